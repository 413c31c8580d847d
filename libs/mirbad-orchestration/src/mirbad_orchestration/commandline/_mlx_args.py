"""mlx_lm.server's command line: ``--model {modelPath} {extraArgs...}``.

The agent adds ``--host`` and ``--port`` and starts the process in the node's model root, so
``--model`` is the relative ``modelPath``. mlx_lm.server has no served-name flag and no API key; its
other settings (``--decode-concurrency``, ``--prompt-cache-size``, ``--max-tokens`` ...) stay in
``extraArgs`` verbatim. ``maxModelLen`` and ``maxNumSeqs`` are not written (mlx_lm.server has no flag
that means the same); ``kvCacheDtype``, ``gpuLayers`` and ``maxNumBatchedTokens`` have no MLX meaning
and are refused rather than dropped.

mlx_lm.server parses with argparse, which also accepts ``--flag=value`` and any unambiguous prefix of a
long flag (``--mod`` for ``--model``), so those spellings of the agent's and the identity flags are
refused too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import ExecutableRef, InvalidFieldError, ModelDefinition

from ._llamacpp_args import validated_definition
from ._llamacpp_flags import split_flag

__all__ = ["build_mlx_args", "normalize_mlx", "parse_mlx_args"]

_MODEL: Final = "--model"
_PLUMBING: Final = ("--host", "--port")
_SHORTEST_PREFIX: Final = 3  # "--h": argparse needs at least one letter after the dashes


def _claimed_by(written: str, flags: Sequence[str]) -> str | None:
    """The flag of ``flags`` that argparse would read ``written`` as (itself or a prefix of it)."""
    if len(written) < _SHORTEST_PREFIX or not written.startswith("--"):
        return None
    return next((flag for flag in flags if flag.startswith(written)), None)


def _check_extra_args(extra_args: Sequence[str]) -> None:
    for element in extra_args:
        written, _ = split_flag(element)
        if _claimed_by(written, _PLUMBING):
            raise InvalidFieldError("extraArgs", f"{written} is set by the agent")
        if _claimed_by(written, (_MODEL,)):
            raise InvalidFieldError("extraArgs", f"{written} is set from modelPath")


def normalize_mlx(definition: ModelDefinition) -> ModelDefinition:
    """Check an MLX definition; MLX owns no flags beyond ``--model``, so nothing is lifted.

    Raises:
        InvalidFieldError: not an MLX model, a llama.cpp-only setting, or a plumbing or ``--model``
            flag in ``extraArgs``.
    """
    if definition.runtime != "mlx":
        raise InvalidFieldError("runtime", f"{definition.runtime!r} is not an MLX model")
    if definition.kv_cache_dtype != "auto":
        raise InvalidFieldError("kvCacheDtype", "is a llama.cpp / vLLM setting; an MLX model does not use it")
    if definition.gpu_layers is not None:
        raise InvalidFieldError("gpuLayers", "is a llama.cpp setting; an MLX model does not use it")
    if definition.max_num_batched_tokens is not None:
        raise InvalidFieldError(
            "maxNumBatchedTokens", "has no mlx_lm.server flag; an MLX model does not use it"
        )
    _check_extra_args(definition.extra_args)
    return definition


def build_mlx_args(definition: ModelDefinition) -> list[str]:
    """Return mlx_lm.server's arguments for ``definition``, without the agent's ``--host``/``--port``.

    Raises:
        InvalidFieldError: as :func:`normalize_mlx`.
    """
    model = normalize_mlx(definition)
    return [_MODEL, model.model_path, *model.extra_args]


def _take_value(written: str, inline: str | None, remaining: list[str]) -> str:
    if inline is not None:
        return inline
    if not remaining:
        raise UnreadableFlagError(written, "needs a value")
    return remaining.pop(0)


def _without_program(argv: Sequence[str]) -> list[str]:
    """Drop a leading ``mlx_lm.server`` / ``python -m mlx_lm server`` / program path."""
    lead = 0
    while lead < len(argv) and not argv[lead].startswith("--"):
        lead += 1
    named = [index for index in range(lead) if "mlx_lm" in argv[index]]
    if named:
        start = named[-1] + 1
        return list(argv[start + 1 :] if argv[start : start + 1] == ["server"] else argv[start:])
    return list(argv[1:] if lead else argv)


def parse_mlx_args(
    argv: Sequence[str], *, model_id: str, executable: ExecutableRef, served_name: str | None = None
) -> ModelDefinition:
    """Read an mlx_lm.server command line back into a definition (a leading program is skipped).

    ``--host`` and ``--port`` (any spelling argparse accepts) are dropped; every other flag lands in
    ``extraArgs``. mlx_lm.server has no served name, so it is ``served_name`` or else ``model_id``.

    Raises:
        UnreadableFlagError: no ``--model``, or a flag without its value.
        InvalidFieldError: a value the definition refuses (an absolute model path ...).
    """
    remaining, rest, model_path = _without_program(argv), [], None
    while remaining:
        element = remaining.pop(0)
        written, inline = split_flag(element)
        if _claimed_by(written, _PLUMBING):
            _take_value(written, inline, remaining)
        elif _claimed_by(written, (_MODEL,)):
            model_path = _take_value(written, inline, remaining)
        else:
            rest.append(element)
    if model_path is None:
        raise UnreadableFlagError(_MODEL, "the command line names no model")
    definition = validated_definition(
        {
            "id": model_id,
            "served_name": served_name or model_id,
            "runtime": "mlx",
            "executable": executable,
            "model_path": model_path,
            "extra_args": rest,
        }
    )
    return normalize_mlx(definition)
