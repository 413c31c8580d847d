"""Write a tiny random-weight Llama in Hugging Face format for the real vLLM tier: ``python FILE DIR``.

Runs inside the vLLM virtualenv (it needs torch, safetensors and tokenizers; nothing is downloaded).
2 layers, hidden 128, 4 heads of 32 (vLLM's CPU attention kernels need a head size of at least 32), a
byte-level BPE tokenizer trained here on a small built-in text, a ChatML chat template, bf16 weights.
The weights are random but seeded, so the same script always writes the same files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch  # type: ignore[import-not-found,unused-ignore]
from safetensors.torch import save_file  # type: ignore[import-not-found,unused-ignore]
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # type: ignore[import-not-found,unused-ignore]

HIDDEN, LAYERS, HEADS, HEAD_DIM, INTERMEDIATE, VOCAB = 128, 2, 4, 32, 256, 512
MAX_POSITIONS = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)
_CORPUS = (
    "hello world. the quick brown fox jumps over the lazy dog. a tiny model answers every question "
    "with random words, because its weights are random. system user assistant: say something nice. "
    "one two three four five six seven eight nine ten. mirbad runs local models behind one api."
)


def train_tokenizer() -> Any:
    """A byte-level BPE tokenizer over every byte plus the merges of the built-in text."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([_CORPUS] * 20, trainer=trainer)
    return tokenizer


def weights(vocab: int) -> dict[str, Any]:
    """Seeded random bf16 tensors named as transformers' LlamaForCausalLM names them."""
    generator = torch.Generator().manual_seed(0)

    def normal(*shape: int) -> Any:
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": normal(vocab, HIDDEN), "lm_head.weight": normal(vocab, HIDDEN)}
    tensors["model.norm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    attention = HEADS * HEAD_DIM
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        shapes = {
            "self_attn.q_proj": (attention, HIDDEN),
            "self_attn.k_proj": (attention, HIDDEN),
            "self_attn.v_proj": (attention, HIDDEN),
            "self_attn.o_proj": (HIDDEN, attention),
            "mlp.gate_proj": (INTERMEDIATE, HIDDEN),
            "mlp.up_proj": (INTERMEDIATE, HIDDEN),
            "mlp.down_proj": (HIDDEN, INTERMEDIATE),
        }
        for name, shape in shapes.items():
            tensors[f"{prefix}{name}.weight"] = normal(*shape)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"{prefix}{norm}.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    return tensors


def config(vocab: int, eos: int, bos: int) -> dict[str, Any]:
    """The Llama config.json of the tiny model."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
    }


def write_model(target: Path) -> None:
    """Write config, weights, tokenizer and chat template into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    vocab = tokenizer.get_vocab_size()
    eos, bos = tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")
    tokenizer.save(str(target / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHATML,
    }
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (target / "config.json").write_text(json.dumps(config(vocab, eos, bos), indent=2))
    (target / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}))
    save_file(weights(vocab), str(target / "model.safetensors"), metadata={"format": "pt"})
    (target / "model.safetensors").chmod(0o644)  # safetensors writes 0600; a container reads it too


if __name__ == "__main__":
    write_model(Path(sys.argv[1]))
