"""A tiny random-weight llama GGUF (about 0.6 MB) that a real llama-server loads in milliseconds.

The model is a 2-layer, 64-wide llama with 4 heads and a 256-token context, every tensor F32. Its
vocabulary is SentencePiece-style and embedded in the file: ``<unk>``, ``<s>``, ``</s>``, the 256
byte-fallback pieces, the ChatML control tokens, the printable ASCII characters and a handful of words
together with every prefix of each (the SentencePiece merge only joins two pieces when the joined text
is itself a piece). The output rows of every token that is not an ordinary piece are zero, so greedy
decoding keeps producing readable pieces instead of stopping at once on an end-of-text token.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
from gguf import GGUFWriter, TokenType
from numpy.typing import NDArray

__all__ = ["CHATML_TEMPLATE", "TINY", "TINY_MODEL_PATH", "TinyLlama", "write_tiny_gguf"]


@dataclass(frozen=True)
class TinyLlama:
    """The shape of the generated model (what ``read_gguf_info`` must find in the file)."""

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
"""Where tests put the tiny model under a model root (a definition's relative modelPath)."""

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


@dataclass
class _Vocabulary:
    pieces: list[str]
    scores: list[float]
    kinds: list[int]

    def add(self, piece: str, kind: TokenType, score: float = 0.0) -> None:
        if piece not in self.pieces:
            self.pieces.append(piece)
            self.scores.append(score)
            self.kinds.append(int(kind))


def _vocabulary() -> _Vocabulary:
    vocab = _Vocabulary([], [], [])
    vocab.add("<unk>", TokenType.UNKNOWN)
    vocab.add("<s>", TokenType.CONTROL)
    vocab.add("</s>", TokenType.CONTROL)
    for value in range(256):
        vocab.add(f"<0x{value:02X}>", TokenType.BYTE)
    vocab.add("<|im_start|>", TokenType.CONTROL)
    vocab.add("<|im_end|>", TokenType.CONTROL)
    for char in _WORD_MARK + "".join(chr(code) for code in range(0x21, 0x7F)):
        vocab.add(char, TokenType.NORMAL, _ORDINARY_SCORE)
    for word in _WORDS:
        piece = _WORD_MARK + word
        # A longer piece scores higher, so the merge prefers whole words over their prefixes.
        for end in range(2, len(piece) + 1):
            vocab.add(piece[:end], TokenType.NORMAL, _ORDINARY_SCORE + 50.0 * end)
    return vocab


def _weights(shape: TinyLlama, vocab: _Vocabulary, seed: int) -> dict[str, NDArray[np.float32]]:
    rng = np.random.default_rng(seed)

    def random(rows: int, cols: int, scale: float) -> NDArray[np.float32]:
        # numpy's (rows, cols) is ggml's ne = [cols, rows]: the input width comes last.
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def ones() -> NDArray[np.float32]:
        return np.ones(shape.width, dtype=np.float32)

    n_vocab, kv_width = len(vocab.pieces), shape.kv_heads * shape.head_width
    tensors = {"token_embd.weight": random(n_vocab, shape.width, 0.5)}
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        tensors |= {
            f"{block}.attn_norm.weight": ones(),
            f"{block}.attn_q.weight": random(shape.width, shape.width, 0.1),
            f"{block}.attn_k.weight": random(kv_width, shape.width, 0.1),
            f"{block}.attn_v.weight": random(kv_width, shape.width, 0.1),
            f"{block}.attn_output.weight": random(shape.width, shape.width, 0.1),
            f"{block}.ffn_norm.weight": ones(),
            f"{block}.ffn_gate.weight": random(shape.feed_forward, shape.width, 0.1),
            f"{block}.ffn_up.weight": random(shape.feed_forward, shape.width, 0.1),
            f"{block}.ffn_down.weight": random(shape.width, shape.feed_forward, 0.1),
        }
    output = random(n_vocab, shape.width, 1.0)
    output[np.asarray(vocab.kinds) != int(TokenType.NORMAL)] = 0.0
    return tensors | {"output_norm.weight": ones(), "output.weight": output}


def _write_metadata(writer: GGUFWriter, shape: TinyLlama, vocab: _Vocabulary) -> None:
    writer.add_name(shape.name)
    writer.add_file_type(0)  # all tensors F32
    writer.add_block_count(shape.layers)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.width)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.head_width)
    writer.add_rope_freq_base(10_000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(vocab.pieces))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab.pieces)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.kinds)
    writer.add_unk_token_id(vocab.pieces.index("<unk>"))
    writer.add_bos_token_id(vocab.pieces.index("<s>"))
    writer.add_eos_token_id(vocab.pieces.index("</s>"))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    writer.add_chat_template(CHATML_TEMPLATE)


def write_tiny_gguf(path: str | Path, *, seed: int = 0, shape: TinyLlama = TINY) -> Path:
    """Write the tiny llama GGUF to ``path`` (parents created) and return the path.

    The same seed always gives the same weights, so a test's file is reproducible.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    vocab = _vocabulary()
    writer = GGUFWriter(path, "llama")
    try:
        _write_metadata(writer, shape, vocab)
        for name, tensor in _weights(shape, vocab, seed).items():
            writer.add_tensor(name, tensor)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return path
