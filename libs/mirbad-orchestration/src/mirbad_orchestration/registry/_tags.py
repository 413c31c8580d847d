"""Model tags: the built-in catalogue, normalization of user input, the filter rule and suggestions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from mirbad_protocol import InvalidFieldError, ModelDefinition

from ._tag_rules import suggested_slugs

__all__ = [
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "TAG_CATALOGUE",
    "TagInfo",
    "filter_by_tags",
    "has_all",
    "normalize_tags",
    "suggest_tags",
]

MAX_TAGS: Final = 12
"""How many tags one model may carry."""

MAX_TAG_LENGTH: Final = 24
"""The longest tag slug, in characters."""

_SLUG: Final = re.compile(rf"[a-z0-9-]{{1,{MAX_TAG_LENGTH}}}")
_SEPARATORS: Final = re.compile(r"[\s_-]+")


@dataclass(frozen=True, slots=True)
class TagInfo:
    """One tag of the built-in catalogue.

    Attributes:
        slug: the value stored in ``ModelDefinition.tags``.
        label: a short name for buttons and chips.
        description: one sentence saying when the tag applies.
    """

    slug: str
    label: str
    description: str


TAG_CATALOGUE: Final[tuple[TagInfo, ...]] = (
    TagInfo("chat", "Chat", "Instruction-tuned model for conversations through chat completions."),
    TagInfo("code", "Code", "Trained or tuned for writing and explaining source code."),
    TagInfo("reasoning", "Reasoning", "Thinks before it answers; the server separates the reasoning."),
    TagInfo("tools", "Tool calling", "Emits function calls that the server parses into tool_calls."),
    TagInfo("vision", "Vision", "Accepts images alongside text."),
    TagInfo("audio", "Audio", "Accepts speech or other audio input."),
    TagInfo("embedding", "Embeddings", "Pooling model that turns text into vectors (/v1/embeddings)."),
    TagInfo("reranker", "Reranker", "Scores how well documents match a query (classification / score)."),
    TagInfo("speculative", "Speculative", "Decodes with a draft model or MTP heads to answer faster."),
    TagInfo("quantized", "Quantized", "Weights stored in reduced precision (FP8, AWQ, GPTQ, GGUF quants)."),
    TagInfo("moe", "Mixture of experts", "Activates only a few experts per token."),
    TagInfo("hybrid", "Hybrid (Mamba)", "Mixes attention with Mamba / state-space layers."),
    TagInfo("long-context", "Long context", "Configured for prompts of 64K tokens or more."),
    TagInfo("small", "Small", "About 4B parameters or fewer: fast and cheap to keep loaded."),
    TagInfo("gguf", "GGUF", "A GGUF checkpoint served by llama.cpp."),
    TagInfo("mlx", "MLX", "Runs with Apple's MLX on Apple silicon."),
)
"""The tags Mirbad knows, in display order; users may add their own slugs beside them."""

_CATALOGUE_ORDER: Final = {info.slug: index for index, info in enumerate(TAG_CATALOGUE)}


def normalize_tags(tags: Iterable[str]) -> list[str]:
    """Return ``tags`` as stored: trimmed, lowercase, dashed, without empties or repeats.

    White space, underscores and dash runs become one ``-`` and leading/trailing dashes go; the first
    occurrence of a repeated tag keeps its place. The result is a fixed point of this function.

    Raises:
        InvalidFieldError: ``tags[i]`` (index in the input) is not a slug of ``[a-z0-9-]`` with 1-24
            characters, or ``tags`` holds more than 12 distinct tags.
    """
    result: list[str] = []
    for index, raw in enumerate(tags):
        slug = _slugify(raw)
        if not slug or slug in result:
            continue
        if not _SLUG.fullmatch(slug):
            raise InvalidFieldError(f"tags[{index}]", _slug_problem(slug))
        result.append(slug)
    if len(result) > MAX_TAGS:
        raise InvalidFieldError("tags", f"at most {MAX_TAGS} tags, got {len(result)}")
    return result


def has_all(tags: Iterable[str], selected: Iterable[str]) -> bool:
    """Whether ``tags`` carries every tag of ``selected`` (an empty selection matches everything).

    Both sides are compared in their normalized spelling, so ``?tags=Long_Context`` finds
    ``long-context``.
    """
    present = {_slugify(tag) for tag in tags}
    return all(slug in present for slug in (_slugify(tag) for tag in selected) if slug)


def filter_by_tags(definitions: Iterable[ModelDefinition], selected: Sequence[str]) -> list[ModelDefinition]:
    """Return the definitions carrying ALL ``selected`` tags, in their original order."""
    return [definition for definition in definitions if has_all(definition.tags, selected)]


def suggest_tags(
    definition: ModelDefinition, architecture: str | None = None, has_vision_config: bool = False
) -> list[str]:
    """Suggest catalogue tags for a model from what is known about it, without any I/O.

    Args:
        definition: the model; its runtime, typed settings, ``extra_args`` and names (id, served
            name, model path, source repositories) are read.
        architecture: the first entry of ``architectures`` in the checkpoint's ``config.json``
            (``Qwen3MoeForCausalLM``), when known.
        has_vision_config: whether that ``config.json`` has a vision tower configuration.

    Returns:
        Catalogue slugs only, in catalogue order.
    """
    found = suggested_slugs(definition, architecture or "", has_vision_config)
    return sorted((slug for slug in found if slug in _CATALOGUE_ORDER), key=_CATALOGUE_ORDER.__getitem__)


def _slugify(raw: str) -> str:
    return _SEPARATORS.sub("-", raw.strip().lower()).strip("-")


def _slug_problem(slug: str) -> str:
    if len(slug) > MAX_TAG_LENGTH:
        return f"{slug!r} is longer than {MAX_TAG_LENGTH} characters"
    return f"{slug!r} may only hold a-z, 0-9 and '-'"
