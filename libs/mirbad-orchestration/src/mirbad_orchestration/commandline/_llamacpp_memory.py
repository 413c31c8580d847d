"""The admission estimate of a llama.cpp model: its weights, its KV cache and a compute allowance.

* Weights: the GGUF file size (llama.cpp maps the tensors as they are stored).
* KV cache: for every layer and every cell, one K row of ``kv_heads x key_length`` elements and one V
  row of ``kv_heads x value_length`` elements, each stored in its cache type. A quantized type is
  counted by its blocks (``q8_0`` keeps 32 elements in 34 bytes). The head widths default to
  ``embedding_length / head_count`` when the file does not state them.
* Compute: a fixed allowance for the scheduler's graph buffers and backend context, plus the logits of
  one micro-batch (``512 x vocab`` floats). It is an allowance, not a measurement: llama.cpp sizes its
  buffers at load time, and flash attention or the backend move them by tens of MiB either way.

The estimate errs high on models with sliding-window or recurrent layers, which need fewer cells.
"""

from __future__ import annotations

from typing import Final

from mirbad_protocol import InvalidFieldError, ModelDefinition
from mirbad_protocol.agent import GgufInfo

from ._llamacpp_args import llamacpp_ctx_size, normalize_llamacpp

__all__ = [
    "COMPUTE_ALLOWANCE_BYTES",
    "estimate_llamacpp_definition_gib",
    "estimate_llamacpp_gib",
    "llamacpp_kv_cache_bytes",
    "llamacpp_kv_cells",
]

GIB: Final = 1024**3
COMPUTE_ALLOWANCE_BYTES: Final = 256 * 1024**2
"""The fixed part of the compute allowance (graph buffers, backend context)."""

_MICRO_BATCH: Final = 512  # llama-server's default --ubatch-size
_CELL_PADDING: Final = 256  # llama.cpp rounds each slot's context up to a multiple of this

# (bytes per block, elements per block) of each cache type, as ggml stores them.
_CACHE_BLOCKS: Final = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q4_0": (18, 32),
    "q4_1": (20, 32),
    "iq4_nl": (18, 32),
    "q5_0": (22, 32),
    "q5_1": (24, 32),
}


def _row_bytes(cache_type: str, elements: int, field: str) -> int:
    if cache_type not in _CACHE_BLOCKS:
        raise InvalidFieldError(field, f"{cache_type!r} is not a llama.cpp cache type")
    block_bytes, block_elements = _CACHE_BLOCKS[cache_type]
    return -(-elements // block_elements) * block_bytes


def _required(value: int | None, field: str) -> int:
    if not value:
        raise InvalidFieldError(field, "the GGUF header does not state it, so the KV cache cannot be sized")
    return value


def llamacpp_kv_cells(ctx_size: int, slots: int) -> int:
    """The KV cells llama.cpp allocates for ``--ctx-size ctx_size --parallel slots``.

    llama.cpp rounds the total and then each slot's share up to a multiple of 256 cells.
    """
    padded = -(-ctx_size // _CELL_PADDING) * _CELL_PADDING
    per_slot = -(-(padded // slots) // _CELL_PADDING) * _CELL_PADDING
    return per_slot * slots


def llamacpp_kv_cache_bytes(
    info: GgufInfo, *, context_tokens: int, cache_type_k: str = "f16", cache_type_v: str = "f16"
) -> int:
    """The bytes of the K and V caches of ``context_tokens`` cells for the model ``info`` describes.

    Raises:
        InvalidFieldError: the header lacks the layer count, the heads or the width (``field`` names
            the missing GgufInfo field), or a cache type is not one of llama.cpp's.
    """
    layers = _required(info.block_count, "blockCount")
    kv_heads = _required(info.kv_head_count(), "headCountKv")
    dims = info.head_dims()
    if dims is None:
        raise InvalidFieldError("keyLength", "neither the head widths nor the embedding width are known")
    key_row = _row_bytes(cache_type_k, kv_heads * dims[0], "cacheTypeK")
    value_row = _row_bytes(cache_type_v, kv_heads * dims[1], "cacheTypeV")
    return layers * context_tokens * (key_row + value_row)


def estimate_llamacpp_gib(
    info: GgufInfo,
    *,
    context_tokens: int,
    file_size_bytes: int | None = None,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
) -> float:
    """Estimate the memory (GiB) llama-server needs to serve the model with ``context_tokens`` cells.

    Args:
        info: the model's GGUF header.
        context_tokens: KV cells over all slots (see :func:`llamacpp_kv_cells`).
        file_size_bytes: the weights on disk; defaults to ``info.size_bytes`` (give the sum of all
            files for a split model).
        cache_type_k: the K cache type (``--cache-type-k``).
        cache_type_v: the V cache type (``--cache-type-v``).

    Raises:
        InvalidFieldError: as :func:`llamacpp_kv_cache_bytes`.
    """
    weights = info.size_bytes if file_size_bytes is None else file_size_bytes
    cache = llamacpp_kv_cache_bytes(
        info, context_tokens=context_tokens, cache_type_k=cache_type_k, cache_type_v=cache_type_v
    )
    logits = _MICRO_BATCH * (info.vocab_size or 0) * 4
    return (weights + cache + COMPUTE_ALLOWANCE_BYTES + logits) / GIB


def estimate_llamacpp_definition_gib(
    definition: ModelDefinition, info: GgufInfo, *, file_size_bytes: int | None = None
) -> float:
    """Estimate the memory (GiB) of serving ``definition`` (normalized first) as the builder launches it.

    The cells are those llama.cpp allocates for the builder's ``--ctx-size`` and ``--parallel``; the
    cache type is ``kvCacheDtype`` for K and V (llama.cpp's f16 when it is ``auto``).

    Raises:
        InvalidFieldError: as :func:`normalize_llamacpp` and :func:`llamacpp_kv_cache_bytes`.
    """
    model = normalize_llamacpp(definition)
    cache_type = "f16" if model.kv_cache_dtype == "auto" else model.kv_cache_dtype
    return estimate_llamacpp_gib(
        info,
        context_tokens=llamacpp_kv_cells(llamacpp_ctx_size(model), model.max_num_seqs),
        file_size_bytes=file_size_bytes,
        cache_type_k=cache_type,
        cache_type_v=cache_type,
    )
