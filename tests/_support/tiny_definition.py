"""The tiny GGUF as a llama-server model definition, the way the admin API takes it.

The real-part tiers (``mirbad up`` benchmarks and tuning, the compose deployment) all register the
same model: one place keeps its shape so a change to the tiny model or to the wire names is made once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests._support.tiny_gguf import TINY, TINY_MODEL_PATH

__all__ = ["tiny_llama_definition"]


def tiny_llama_definition(executable: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """The tiny model (``tiny``, served as ``tiny-chat``) on the llama-server ``executable``.

    Args:
        executable: The node's llama-server as its info lists it (``name`` and ``version``, wire form).
        **changes: Wire fields (camelCase) that replace or add to the defaults.

    Returns:
        The definition in its wire form: its trained context in one slot, a quarter GiB budget and one
        thread (the CI machine's cores are shared).
    """
    return {
        "id": "tiny",
        "servedName": "tiny-chat",
        "runtime": "llamacpp",
        "executable": dict(executable),
        "modelPath": TINY_MODEL_PATH,
        # llama-server clamps the context to the model's trained one (256 for the tiny model).
        "maxModelLen": TINY.context,
        "maxNumSeqs": 1,
        "memoryBudgetGiB": 0.25,
        "extraArgs": ["--threads", "1"],
        **changes,
    }
