"""Which models are pooling (embedding) models and which are rerankers, from their launch and tags.

A pooling model answers ``/v1/embeddings``, not chat, so it runs the embeddings suite; a reranker
answers neither in a way the suites can measure, so it is refused. Both are read from what the model
is launched with (the argv the runtime gets, so a flag in extra args counts the same as a setting)
and its tags. Flags are matched as ``--flag value`` and ``--flag=value``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

__all__ = ["is_pooling", "reranker_reason"]

# vLLM's spellings of a pooling model, across its versions.
_POOLING_VALUES: Final = {"--runner": {"pooling"}, "--convert": {"embed"}, "--task": {"embed", "embedding"}}
_RERANKER_VALUES: Final = {"--convert": {"classify"}, "--task": {"score", "classify"}}
# llama-server's switches.
_POOLING_SWITCHES: Final = frozenset({"--embedding", "--embeddings"})
_RERANKER_SWITCHES: Final = frozenset({"--reranking", "--rerank"})


def _flags(argv: Sequence[str]) -> tuple[dict[str, set[str]], set[str]]:
    values: dict[str, set[str]] = {}
    switches: set[str] = set()
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        name, equals, value = arg.partition("=")
        switches.add(name)
        if equals:
            values.setdefault(name, set()).add(value.lower())
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            values.setdefault(name, set()).add(argv[i + 1].lower())
    return values, switches


def _matches(values: dict[str, set[str]], wanted: dict[str, set[str]]) -> str | None:
    for flag, accepted in wanted.items():
        hit = values.get(flag, set()) & accepted
        if hit:
            return f"{flag} {sorted(hit)[0]}"
    return None


def is_pooling(argv: Sequence[str], tags: Sequence[str] = ()) -> bool:
    """Whether the model is an embedding model (and not a reranker).

    Pooling: ``--runner pooling``, ``--convert embed``, ``--task embed``, llama-server's
    ``--embeddings`` (or ``--embedding``), or the ``embedding`` tag.
    """
    if reranker_reason(argv, tags) is not None:
        return False
    values, switches = _flags(argv)
    return (
        "embedding" in tags
        or bool(switches & _POOLING_SWITCHES)
        or _matches(values, _POOLING_VALUES) is not None
    )


def reranker_reason(argv: Sequence[str], tags: Sequence[str] = ()) -> str | None:
    """Why the model is a reranker (``--convert classify``, ``--task score``, the tag ...), else None."""
    values, switches = _flags(argv)
    found = _matches(values, _RERANKER_VALUES)
    found = found or next(iter(sorted(switches & _RERANKER_SWITCHES)), None)
    found = found or ("the reranker tag" if "reranker" in tags else None)
    if found is None:
        return None
    return (
        f"it is a reranker ({found}): rerankers score pairs of texts, neither chat nor embeddings, "
        "so there is nothing the benchmark suites can measure"
    )
