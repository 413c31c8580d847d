"""The config hash of a vLLM container: which configuration it runs, independent of spelling.

A container carries the hash of its image and canonical arguments. The canonical arguments of a
command line are the builder's output for the definition read back from it (parsed, normalized and
rebuilt in the builder's order), keeping the utilization text as written, so the hash does not move
when the node's GPU total is measured slightly differently later. A builder output is already
canonical, so an unchanged definition keeps its hash, and a container started with an owned setting
overridden in its extra arguments hashes like the normalized definition vLLM effectively ran.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from ._vllm_args import build_vllm_args
from ._vllm_parse import read_vllm_command

__all__ = ["canonicalize_vllm_args", "config_hash"]


def canonicalize_vllm_args(argv: Sequence[str]) -> list[str]:
    """Return the canonical form of a ``vllm serve`` command line (see the module documentation).

    Raises:
        UnreadableFlagError: the line names no model, or an owned flag cannot be read.
    """
    definition, utilization = read_vllm_command(argv, model_id="canonical")
    return build_vllm_args(definition, utilization=utilization)


def config_hash(image: str, canonical_args: Sequence[str]) -> str:
    r"""Return the first 16 hex digits of SHA-256 over the image and the canonical arguments.

    The hashed bytes are the UTF-8 of the compact JSON array ``[image, *canonical_args]`` (separators
    ``,`` and ``:``, non-ASCII written as ``\uXXXX``): one encoding per list, whatever the arguments
    contain, so no two different command lines share their hashed bytes.
    """
    payload = json.dumps([image, *canonical_args], separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]
