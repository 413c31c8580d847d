"""The example model a new registry starts with, so a first run shows a complete, editable definition."""

from __future__ import annotations

from typing import Final

from mirbad_protocol import ModelDefinition

__all__ = ["SEED_MODEL"]

SEED_MODEL: Final = ModelDefinition(
    id="ornith-9b-fp8",
    served_name="ornith-9b",
    runtime="vllm",
    image="vllm/vllm-openai:latest",
    model_path="ornith-9b-fp8",
    quantization="fp8",
    kv_cache_dtype="fp8",
    max_model_len=32_768,
    max_num_seqs=16,
    memory_budget_gib=24.0,
    tool_call_parser="hermes",
    enable_prefix_caching=True,
    tags=["chat", "tools", "quantized"],
    auto_start=False,
)
"""A 9B chat model with FP8 weights and KV cache in a 24 GiB budget; stopped until started by hand.

It has no download source: the operator copies a checkpoint into ``ornith-9b-fp8`` on the node, or
edits the example into a model they have.
"""
