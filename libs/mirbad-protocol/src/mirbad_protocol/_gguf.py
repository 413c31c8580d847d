"""What a node reports about a GGUF model file: the header facts the master sizes a llama.cpp start by."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ._wire import WireModel

__all__ = ["GgufInfo"]

_Count = Annotated[int, Field(ge=0)]


class GgufInfo(WireModel):
    """The header and hyperparameters of one GGUF file, read without touching its tensor data.

    Hyperparameters come from the architecture-prefixed keys (``llama.block_count``,
    ``llama.attention.head_count_kv`` ...); a key the file does not carry is ``None``. Where a file gives
    a per-layer array (some models vary the KV head count by layer) the largest value is kept, so an
    estimate built on it errs on the safe side.

    Attributes:
        version: the GGUF format version (2 or 3).
        architecture: ``general.architecture`` (``llama``, ``qwen2``, ``bert`` ...).
        name: ``general.name``, the model's display name, when the file has one.
        file_type: ``general.file_type``, llama.cpp's weight type code (0 = F32, 1 = F16, 7 = Q8_0 ...).
        tensor_count: how many tensors the file holds.
        size_bytes: the size of this file; a split model has ``split_count`` files.
        split_count: ``split.count`` for a model split over several files, else 0.
        block_count: the number of transformer layers.
        context_length: the context the model was trained with.
        embedding_length: the width of the hidden state (also an embedding model's dimensions).
        head_count: attention (query) heads.
        head_count_kv: key/value heads (grouped-query attention); ``None`` means as many as ``head_count``.
        key_length: the width of one key head, when the file states it.
        value_length: the width of one value head, when the file states it.
        vocab_size: ``{arch}.vocab_size``, else the length of ``tokenizer.ggml.tokens``.
        pooling_type: ``{arch}.pooling_type``, present on embedding models.
    """

    version: Annotated[int, Field(ge=1)]
    architecture: Annotated[str, Field(min_length=1)]
    name: str | None = None
    file_type: _Count | None = None
    tensor_count: _Count = 0
    size_bytes: _Count = 0
    split_count: _Count = 0
    block_count: _Count | None = None
    context_length: _Count | None = None
    embedding_length: _Count | None = None
    head_count: _Count | None = None
    head_count_kv: _Count | None = None
    key_length: _Count | None = None
    value_length: _Count | None = None
    vocab_size: _Count | None = None
    pooling_type: _Count | None = None

    def kv_head_count(self) -> int | None:
        """Key/value heads per layer: ``head_count_kv``, or ``head_count`` when the model has no GQA."""
        return self.head_count_kv if self.head_count_kv is not None else self.head_count

    def head_dims(self) -> tuple[int, int] | None:
        """The (key, value) width of one head, defaulting to ``embedding_length / head_count``.

        Returns ``None`` when neither the explicit lengths nor the width and head count are known.
        """
        default = None
        if self.embedding_length is not None and self.head_count:
            default = self.embedding_length // self.head_count
        key = self.key_length if self.key_length is not None else default
        value = self.value_length if self.value_length is not None else default
        if key is None or value is None:
            return None
        return key, value
