"""The model definition: everything the registry stores about one model."""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import (
    Field,
    GetJsonSchemaHandler,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ._user_input import (
    UserCheck,
    UserMaximum,
    is_image_reference,
    is_user_input,
    printable_name,
    unknown_field_reason,
)
from ._wire import WireModel
from .exceptions import InvalidFieldError

__all__ = [
    "MODEL_ID_PATTERN",
    "USER_INPUT_LIMITS",
    "ExecutableRef",
    "ModelDefinition",
    "ModelSource",
    "Placement",
    "RuntimeKind",
    "SpeculativeDecoding",
]

MODEL_ID_PATTERN: Final = r"^[a-z0-9][a-z0-9-]{0,39}$"
"""A model id: lowercase, digits and dashes, at most 40 characters. It names containers (``ss-{id}``)."""

USER_INPUT_LIMITS: Final = {
    "memoryBudgetGiB": 4096,
    "maxModelLen": 16 * 1024 * 1024,
    "maxNumSeqs": 65536,
    "maxNumBatchedTokens": 16 * 1024 * 1024,
    "idleUnloadSeconds": 365 * 24 * 3600,
    "gpuLayers": 100_000,
    "speculative.num_speculative_tokens": 1024,
}
"""The largest value a person may give each numeric setting (far above any real deployment; stored
definitions are not held to them). The JSON schema carries them as ``maximum``."""

RuntimeKind = Literal["vllm", "llamacpp", "mlx"]
"""How a model runs: vLLM in a container, or llama.cpp's llama-server / MLX as native processes."""

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_PLAIN_FOLDER = re.compile(r"^[A-Za-z0-9._-]+$")

# Keys a SpeculativeDecoding reads into its typed fields, in every spelling the contract accepts:
# vLLM's own object, the .NET implementation's PascalCase object and our camelCase.
_SPEC_KEYS: Final = {
    "method": "method",
    "Method": "method",
    "num_speculative_tokens": "num_speculative_tokens",
    "NumSpeculativeTokens": "num_speculative_tokens",
    "numSpeculativeTokens": "num_speculative_tokens",
    "model": "model",
    "Model": "model",
}


class SpeculativeDecoding(WireModel):
    """vLLM's ``--speculative-config``: typed method, depth and draft model, every other key in extra.

    On the wire it is vLLM's own object (``{"method": "mtp", "num_speculative_tokens": 3}``); the extra
    keys sit beside the typed ones, never nested. An empty method means vLLM infers it from the draft.
    """

    method: str | None = None
    num_speculative_tokens: (
        Annotated[int, Field(ge=0), UserMaximum(USER_INPUT_LIMITS["speculative.num_speculative_tokens"])]
        | None
    ) = None
    model: str | None = None
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _split_vllm_object(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or ("extra" in data and set(data) <= {*_SPEC_KEYS, "extra"}):
            return data
        typed: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in _SPEC_KEYS:
                typed[_SPEC_KEYS[key]] = value
            else:
                if is_user_input(info):
                    _refuse_near_miss(str(key))
                extra[key] = value
        return {**typed, "extra": extra}

    @model_serializer(mode="plain")
    def _as_vllm_object(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        for key in ("method", "model", "num_speculative_tokens"):
            value = getattr(self, key)
            if value is not None and value != "":
                out[key] = value
        return dict(sorted(out.items()))

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Documented as what is on the wire, both ways: vLLM's flat object, not the Python fields.
        return {
            "type": "object",
            "title": "SpeculativeDecoding",
            "description": "vLLM's `--speculative-config` object: the three keys below, and any other key "
            "of vLLM's, passed through as it is.",
            "properties": {
                "method": {"type": ["string", "null"], "description": "e.g. `mtp`, `eagle`, `ngram`"},
                "model": {
                    "type": ["string", "null"],
                    "description": "the draft model, if the method uses one",
                },
                "num_speculative_tokens": {
                    "type": ["integer", "null"],
                    "minimum": 0,
                    "maximum": USER_INPUT_LIMITS["speculative.num_speculative_tokens"],
                },
            },
            "additionalProperties": True,
        }

    def as_vllm_object(self) -> dict[str, Any]:
        """Return the object vLLM reads, keys sorted."""
        return self._as_vllm_object()

    def is_empty(self) -> bool:
        """Whether the config has nothing to say (vLLM then runs without speculation)."""
        return not self._as_vllm_object()


# The node registry's id rule (mirbad_orchestration.fleet.NODE_ID_PATTERN), which this library cannot import.
_NODE_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def _check_node_id(value: str) -> str:
    if not _NODE_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a node id (lowercase letters, digits, '.', '_', '-'; at most 63)")
    return value


def _refuse_near_miss(key: str) -> None:
    # Any other key is vLLM's own and passes through; one a typo away from a typed key would silently
    # become an extra that vLLM refuses at launch, so a person hears about it now.
    reason = unknown_field_reason(key, _SPEC_KEYS)
    if reason != "unknown field":
        raise InvalidFieldError(key, reason)


class ModelSource(WireModel):
    """Where a model folder comes from: a Hugging Face repo downloaded into a plain folder name."""

    repo_id: str
    folder: str
    revision: str | None = None
    allow_patterns: list[str] = Field(default_factory=list)

    @field_validator("repo_id")
    @classmethod
    def _check_repo(cls, value: str) -> str:
        if not _REPO_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not a repository id of the form owner/name")
        return value

    @field_validator("folder")
    @classmethod
    def _check_folder(cls, value: str) -> str:
        if not _PLAIN_FOLDER.fullmatch(value) or value in {".", ".."}:
            raise ValueError(f"{value!r} is not one plain folder name (letters, digits, '.', '_', '-')")
        return value


class Placement(WireModel):
    """Where a model runs: one node of the fleet and, on a node with discrete GPUs, which of its GPUs.

    A model without a placement runs on the fleet's default node (the master's own, local node). A
    placement takes effect at the next start: a running model moves only when it is restarted.

    Attributes:
        node_id: the id of the node, as ``GET /api/nodes`` lists it.
        gpu_uuids: the GPUs the model may use, by the UUIDs the node reports (``GPU-…``); empty lets
            the node use all of them. vLLM's memory fraction is taken of the smallest chosen GPU.
    """

    node_id: Annotated[
        str,
        Field(
            description="The node that runs the model: its id, as `GET /api/nodes` lists it.",
            examples=["gpu-1"],
        ),
        UserCheck(_check_node_id),
    ]
    gpu_uuids: list[Annotated[str, UserCheck(printable_name)]] = Field(
        default_factory=list,
        description="The node's GPUs the model may use, by the UUIDs the node reports; empty uses them all.",
        examples=[["GPU-8f2c1d3e-0000-4a6b-9c1e-5d7f3a2b1c00"]],
    )


class ExecutableRef(WireModel):
    """A logical executable of a process runtime, resolved by the node's catalogue to a verified path."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    version: Annotated[str, Field(min_length=1)]


def _check_image_reference(value: str) -> str:
    # Empty is "no image" (a process runtime); the vLLM check below insists on one where it matters.
    if value and not is_image_reference(value):
        raise ValueError(
            f"{value!r} is not an image reference: [registry[:port]/]name[:tag][@digest], "
            "name in lowercase letters, digits and . _ - separators, at most 255 characters"
        )
    return value


def _check_relative_path(value: str) -> str:
    parts = value.replace("\\", "/").split("/")
    if not value or value.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", value):
        raise ValueError("must be a path relative to the node's model root")
    if any(part in {"", ".", ".."} for part in parts):
        raise ValueError("must not contain empty, '.' or '..' segments")
    return value


_VLLM_IMAGE: Final = "vllm/vllm-openai:latest"
"""The image a vLLM model runs when its definition names none."""


class ModelDefinition(WireModel):
    """One model as the registry keeps it; the argument builders turn it into a command line.

    Settings that Mirbad owns (speculative and compilation config, CUDA graph mode, max num seqs, max
    batched tokens, KV cache dtype, prefix caching, async scheduling, mamba cache mode) live only in
    their typed fields once normalized; ``extra_args`` holds every other flag, passed through verbatim.
    ``idle_unload_s`` stops the model after that many seconds without a request (the master's default,
    ``MIRBAD_IDLE_UNLOAD_S``, applies to models that start on request); it is not a launch argument.
    """

    id: Annotated[str, Field(pattern=MODEL_ID_PATTERN)]
    served_name: Annotated[
        str, Field(min_length=1, max_length=200, pattern=r"^[^\s]+$"), UserCheck(printable_name)
    ]
    runtime: RuntimeKind = "vllm"
    image: Annotated[str, UserCheck(_check_image_reference)] = _VLLM_IMAGE
    executable: ExecutableRef | None = None
    model_path: str
    quantization: str | None = None
    kv_cache_dtype: Annotated[str, Field(min_length=1)] = "auto"
    max_model_len: Annotated[int, Field(gt=0), UserMaximum(USER_INPUT_LIMITS["maxModelLen"])] = 8192
    max_num_seqs: Annotated[int, Field(gt=0), UserMaximum(USER_INPUT_LIMITS["maxNumSeqs"])] = 16
    max_num_batched_tokens: (
        Annotated[int, Field(gt=0), UserMaximum(USER_INPUT_LIMITS["maxNumBatchedTokens"])] | None
    ) = None
    memory_budget_gib: Annotated[
        float,
        Field(gt=0, allow_inf_nan=False, alias="memoryBudgetGiB"),
        UserMaximum(USER_INPUT_LIMITS["memoryBudgetGiB"]),
    ] = 8.0
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    enable_prefix_caching: bool | None = None
    speculative: SpeculativeDecoding | None = None
    compilation_config: dict[str, JsonValue] = Field(default_factory=dict)
    cudagraph_mode: str | None = Field(default=None, alias="cudaGraphMode")
    async_scheduling: bool | None = None
    mamba_cache_mode: str | None = None
    gpu_layers: Annotated[int, Field(ge=-1), UserMaximum(USER_INPUT_LIMITS["gpuLayers"])] | None = None
    extra_args: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    sources: list[ModelSource] = Field(default_factory=list)
    placement: Placement | None = None
    auto_start: bool = False
    auto_start_on_request: bool = False
    idle_unload_s: (
        Annotated[
            float, Field(gt=0, allow_inf_nan=False), UserMaximum(USER_INPUT_LIMITS["idleUnloadSeconds"])
        ]
        | None
    ) = Field(default=None, alias="idleUnloadSeconds")

    @model_validator(mode="before")
    @classmethod
    def _no_container_image_for_a_process(cls, data: Any) -> Any:
        # The field's default is vLLM's image; a process runtime runs no container, so it stores none.
        process = isinstance(data, dict) and data.get("runtime", "vllm") != "vllm"
        if process and data.get("image", _VLLM_IMAGE) == _VLLM_IMAGE:
            return {**data, "image": ""}
        return data

    @field_validator("model_path")
    @classmethod
    def _check_model_path(cls, value: str) -> str:
        return _check_relative_path(value)

    @field_validator("image")
    @classmethod
    def _check_image(cls, value: str) -> str:
        if any(ch.isspace() for ch in value):
            raise ValueError("an image reference has no white space")
        return value

    @model_validator(mode="after")
    def _check_runtime_fields(self) -> ModelDefinition:
        if self.runtime == "vllm":
            if not self.image:
                raise ValueError("image: a vLLM model needs a container image")
            if self.gpu_layers is not None:
                raise ValueError("gpuLayers: is a llama.cpp setting; a vLLM model does not use it")
            return self
        if self.executable is None:
            raise ValueError(
                f"executable: a {self.runtime} model needs a logical executable (name + version)"
            )
        for name in _VLLM_ONLY:
            if getattr(self, name) not in (None, {}):
                alias = type(self).model_fields[name].alias or name
                raise ValueError(f"{alias}: is a vLLM setting; a {self.runtime} model does not use it")
        return self


# Typed settings only vLLM understands; a process runtime refuses them rather than dropping them.
_VLLM_ONLY: Final = (
    "quantization",
    "tool_call_parser",
    "reasoning_parser",
    "enable_prefix_caching",
    "speculative",
    "compilation_config",
    "cudagraph_mode",
    "async_scheduling",
    "mamba_cache_mode",
)
