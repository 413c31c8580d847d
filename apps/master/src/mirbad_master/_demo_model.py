"""The demo model: a tiny random-weight llama GGUF (about 0.6 MB) that llama-server loads in milliseconds.

``mirbad demo`` writes it so a machine with no network (no Hugging Face hub) still gets a chat model
that starts and answers; the tests serve the same file. It is a 2-layer, 64-wide llama with 4 heads
and a 256-token context, every tensor F32, and a SentencePiece-style vocabulary embedded in the file:
``<unk>``, ``<s>``, ``</s>``, the 256 byte-fallback pieces, the ChatML control tokens, the printable
ASCII characters and a handful of words together with every prefix of each (the SentencePiece merge
only joins two pieces when the joined text is itself a piece). The output rows of every token that is
not an ordinary piece are zero, so greedy decoding keeps producing readable pieces instead of stopping
at once on an end-of-text token. The answers are nonsense words: it proves the path, not a model.

The file is written with the standard library only (GGUF version 3 is a short header, typed key/value
pairs and aligned F32 arrays), so the master needs neither ``gguf`` nor ``numpy`` for one demo file.
"""

from __future__ import annotations

import os
import random
import struct
import tempfile
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

__all__ = [
    "CHATML_TEMPLATE",
    "DEMO_MODEL_ID",
    "TINY",
    "TINY_MODEL_PATH",
    "TinyLlama",
    "demo_definition",
    "write_tiny_gguf",
]


@dataclass(frozen=True)
class TinyLlama:
    """The shape of the generated model (what a GGUF reader must find in the file)."""

    layers: int = 2
    width: int = 64
    heads: int = 4
    kv_heads: int = 4
    feed_forward: int = 128
    context: int = 256
    name: str = "mirbad-tiny-llama"

    @property
    def head_width(self) -> int:
        """The width of one attention head."""
        return self.width // self.heads


TINY: Final = TinyLlama()

TINY_MODEL_PATH: Final = "tiny/tiny-llama.gguf"
"""Where the demo model goes under a model root (the definition's relative ``modelPath``)."""

DEMO_MODEL_ID: Final = "tiny-llama"
"""The id (and served name) ``mirbad demo`` defines, as ``examples/llamacpp-tiny.json`` does."""

CHATML_TEMPLATE: Final = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Words the tokenizer can produce whole; the SentencePiece word marker U+2581 starts each piece.
_WORDS: Final = (
    "hello", "world", "tiny", "model", "mirbad", "node", "agent", "token", "llama", "server",
    "the", "a", "an", "is", "it", "of", "to", "in", "on", "and", "or", "for", "with", "we", "you",
    "fast", "slow", "red", "blue", "green", "one", "two", "three", "yes", "no", "ok",
)  # fmt: skip
_WORD_MARK: Final = "\u2581"
_ORDINARY_SCORE: Final = -1000.0

# llama.cpp's token types (tokenizer.ggml.token_type).
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6

# GGUF value types and the tensor type of F32.
_UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = 4, 5, 6, 7, 8, 9
_GGML_F32: Final = 0
_ALIGNMENT: Final = 32


@dataclass
class _Vocabulary:
    pieces: list[str]
    scores: list[float]
    kinds: list[int]

    def add(self, piece: str, kind: int, score: float = 0.0) -> None:
        if piece not in self.pieces:
            self.pieces.append(piece)
            self.scores.append(score)
            self.kinds.append(kind)


def _vocabulary() -> _Vocabulary:
    vocab = _Vocabulary([], [], [])
    vocab.add("<unk>", _UNKNOWN)
    vocab.add("<s>", _CONTROL)
    vocab.add("</s>", _CONTROL)
    for value in range(256):
        vocab.add(f"<0x{value:02X}>", _BYTE)
    vocab.add("<|im_start|>", _CONTROL)
    vocab.add("<|im_end|>", _CONTROL)
    for char in _WORD_MARK + "".join(chr(code) for code in range(0x21, 0x7F)):
        vocab.add(char, _NORMAL, _ORDINARY_SCORE)
    for word in _WORDS:
        piece = _WORD_MARK + word
        # A longer piece scores higher, so the merge prefers whole words over their prefixes.
        for end in range(2, len(piece) + 1):
            vocab.add(piece[:end], _NORMAL, _ORDINARY_SCORE + 50.0 * end)
    return vocab


@dataclass(frozen=True)
class _Tensor:
    name: str
    shape: tuple[int, ...]  # ggml order: the innermost (input) width first
    data: array[float]


def _tensors(shape: TinyLlama, vocab: _Vocabulary, seed: int) -> Iterator[_Tensor]:
    rng = random.Random(seed)  # noqa: S311 - reproducible demo weights, not a secret

    def matrix(name: str, rows: int, cols: int, scale: float) -> _Tensor:
        values = array("f", (rng.gauss(0.0, scale) for _ in range(rows * cols)))
        return _Tensor(name, (cols, rows), values)

    def ones(name: str) -> _Tensor:
        return _Tensor(name, (shape.width,), array("f", [1.0] * shape.width))

    n_vocab, kv_width = len(vocab.pieces), shape.kv_heads * shape.head_width
    yield matrix("token_embd.weight", n_vocab, shape.width, 0.5)
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        yield ones(f"{block}.attn_norm.weight")
        yield matrix(f"{block}.attn_q.weight", shape.width, shape.width, 0.1)
        yield matrix(f"{block}.attn_k.weight", kv_width, shape.width, 0.1)
        yield matrix(f"{block}.attn_v.weight", kv_width, shape.width, 0.1)
        yield matrix(f"{block}.attn_output.weight", shape.width, shape.width, 0.1)
        yield ones(f"{block}.ffn_norm.weight")
        yield matrix(f"{block}.ffn_gate.weight", shape.feed_forward, shape.width, 0.1)
        yield matrix(f"{block}.ffn_up.weight", shape.feed_forward, shape.width, 0.1)
        yield matrix(f"{block}.ffn_down.weight", shape.width, shape.feed_forward, 0.1)
    yield ones("output_norm.weight")
    output = matrix("output.weight", n_vocab, shape.width, 1.0)
    for row, kind in enumerate(vocab.kinds):
        if kind != _NORMAL:
            output.data[row * shape.width : (row + 1) * shape.width] = array("f", [0.0] * shape.width)
    yield output


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _metadata(shape: TinyLlama, vocab: _Vocabulary) -> list[tuple[str, int, object]]:
    arch = "llama"
    return [
        ("general.architecture", _STRING, arch),
        ("general.name", _STRING, shape.name),
        ("general.file_type", _UINT32, 0),  # all tensors F32
        (f"{arch}.block_count", _UINT32, shape.layers),
        (f"{arch}.context_length", _UINT32, shape.context),
        (f"{arch}.embedding_length", _UINT32, shape.width),
        (f"{arch}.feed_forward_length", _UINT32, shape.feed_forward),
        (f"{arch}.attention.head_count", _UINT32, shape.heads),
        (f"{arch}.attention.head_count_kv", _UINT32, shape.kv_heads),
        (f"{arch}.rope.dimension_count", _UINT32, shape.head_width),
        (f"{arch}.rope.freq_base", _FLOAT32, 10_000.0),
        (f"{arch}.attention.layer_norm_rms_epsilon", _FLOAT32, 1e-5),
        (f"{arch}.vocab_size", _UINT32, len(vocab.pieces)),
        ("tokenizer.ggml.model", _STRING, "llama"),
        ("tokenizer.ggml.tokens", _ARRAY, (_STRING, vocab.pieces)),
        ("tokenizer.ggml.scores", _ARRAY, (_FLOAT32, vocab.scores)),
        ("tokenizer.ggml.token_type", _ARRAY, (_INT32, vocab.kinds)),
        ("tokenizer.ggml.unknown_token_id", _UINT32, vocab.pieces.index("<unk>")),
        ("tokenizer.ggml.bos_token_id", _UINT32, vocab.pieces.index("<s>")),
        ("tokenizer.ggml.eos_token_id", _UINT32, vocab.pieces.index("</s>")),
        ("tokenizer.ggml.add_bos_token", _BOOL, True),
        ("tokenizer.ggml.add_eos_token", _BOOL, False),
        ("tokenizer.ggml.add_space_prefix", _BOOL, True),
        ("tokenizer.chat_template", _STRING, CHATML_TEMPLATE),
    ]


def _scalar(kind: int, value: object) -> bytes:
    if kind == _STRING:
        assert isinstance(value, str)
        return _string(value)
    code = {_UINT32: "<I", _INT32: "<i", _FLOAT32: "<f", _BOOL: "<?"}[kind]
    return struct.pack(code, value)


def _value(kind: int, value: object) -> bytes:
    head = struct.pack("<I", kind)
    if kind != _ARRAY:
        return head + _scalar(kind, value)
    assert isinstance(value, tuple)
    item_kind, items = value
    body = b"".join(_scalar(item_kind, item) for item in items)
    return head + struct.pack("<IQ", item_kind, len(items)) + body


def _pad(size: int) -> int:
    return -size % _ALIGNMENT


def _write(out: BinaryIO, shape: TinyLlama, seed: int) -> None:
    vocab = _vocabulary()
    metadata = _metadata(shape, vocab)
    tensors = list(_tensors(shape, vocab, seed))
    header = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, kind, value in metadata:
        header += _string(key) + _value(kind, value)
    offset = 0
    for tensor in tensors:
        header += _string(tensor.name) + struct.pack("<I", len(tensor.shape))
        header += struct.pack(f"<{len(tensor.shape)}Q", *tensor.shape)
        header += struct.pack("<IQ", _GGML_F32, offset)
        size = tensor.data.itemsize * len(tensor.data)
        offset += size + _pad(size)
    header += bytes(_pad(len(header)))
    out.write(header)
    for tensor in tensors:
        raw = tensor.data.tobytes()  # the machine's order; GGUF is little-endian, as are llama.cpp's hosts
        out.write(raw + bytes(_pad(len(raw))))


def write_tiny_gguf(path: str | Path, *, seed: int = 0, shape: TinyLlama = TINY) -> Path:
    """Write the tiny llama GGUF to ``path`` (parents created) atomically and return the path.

    The same seed always gives the same weights, so a file is reproducible.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A half-written model must never be found by a start: write beside it, then rename over.
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            _write(out, shape, seed)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def demo_definition() -> dict[str, object]:
    """The demo model's definition, as ``examples/llamacpp-tiny.json`` has it (a chat model)."""
    return {
        "id": DEMO_MODEL_ID,
        "servedName": DEMO_MODEL_ID,
        "runtime": "llamacpp",
        "executable": {"name": "llama-server", "version": "11434"},
        "modelPath": TINY_MODEL_PATH,
        "maxModelLen": TINY.context,
        "maxNumSeqs": 2,
        "kvCacheDtype": "f16",
        "memoryBudgetGiB": 0.5,
    }
