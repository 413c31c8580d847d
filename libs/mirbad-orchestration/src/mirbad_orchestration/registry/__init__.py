"""The model registry: the fleet's model definitions in ``models.json``, and the rules they obey.

:class:`ModelRegistry` stores them (fail closed, seeded once with :data:`SEED_MODEL`); the model rules
(:func:`prepare_definition`, :func:`check_served_name`) validate a definition before it is stored; the
tags (:func:`normalize_tags`, :func:`suggest_tags`, :data:`TAG_CATALOGUE`) label models for people and
filters.
"""

from ._model_rules import Normalizer, check_served_name, prepare_definition
from ._registry import REGISTRY_FILE_NAME, ModelRegistry
from ._registry_file import REGISTRY_SCHEMA_VERSION
from ._seed import SEED_MODEL
from ._tags import (
    MAX_TAG_LENGTH,
    MAX_TAGS,
    TAG_CATALOGUE,
    TagInfo,
    filter_by_tags,
    has_all,
    normalize_tags,
    suggest_tags,
)

__all__ = [
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "REGISTRY_FILE_NAME",
    "REGISTRY_SCHEMA_VERSION",
    "SEED_MODEL",
    "TAG_CATALOGUE",
    "ModelRegistry",
    "Normalizer",
    "TagInfo",
    "check_served_name",
    "filter_by_tags",
    "has_all",
    "normalize_tags",
    "prepare_definition",
    "suggest_tags",
]
