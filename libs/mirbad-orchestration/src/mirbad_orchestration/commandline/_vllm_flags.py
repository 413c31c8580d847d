"""How vLLM spells the settings Mirbad owns, and how to find them among free-form extra arguments.

vLLM's parser accepts ``--flag value`` and ``--flag=value``, turns underscores into dashes in a long
flag's name (up to its first dot), reads ``--config.key.sub=value`` as one key of a JSON config, and
``--config.key+=a,b`` as a list appended to that key. This module reads the owned flags out of an
argument list in all those spellings, in order, and leaves every other argument untouched.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import JsonValue

from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import InvalidFieldError, ModelDefinition

__all__ = ["check_vllm_values"]

ConfigName = Literal["speculative", "compilation"]

OWNED_SCALARS: Final = {
    "--kv-cache-dtype": "kv_cache_dtype",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--mamba-cache-mode": "mamba_cache_mode",
}
"""Owned flags that take one value, by vLLM's spelling, with the definition field they fill."""

_COUNTS: Final = frozenset({"max_num_seqs", "max_num_batched_tokens"})

OWNED_SWITCHES: Final = {
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
    "--async-scheduling": ("async_scheduling", True),
    "--no-async-scheduling": ("async_scheduling", False),
}
"""Owned on/off flags: the definition field and the value the flag sets."""

_CONFIGS: Final[dict[str, ConfigName]] = {
    "--speculative-config": "speculative",
    "--compilation-config": "compilation",
    "-cc": "compilation",
}

PINNED_VLLM: Final = "0.32.0"
"""The vLLM release whose choices :data:`CHOICES` copies (the real-vLLM test tier checks the copy)."""

CHOICES: Final[dict[str, tuple[str, frozenset[str]]]] = {
    "--kv-cache-dtype": (
        "kvCacheDtype",
        frozenset(
            {
                "auto",
                "bfloat16",
                "float16",
                "fp8",
                "fp8_ds_mla",
                "fp8_e4m3",
                "fp8_e5m2",
                "fp8_inc",
                "fp8_per_token_head",
                "int4_per_token_head",
                "int8_per_token_head",
                "nvfp4",
                "nvfp4_4over6",
                "nvfp4_ds_mla",
                "turboquant_3bit_nc",
                "turboquant_4bit_nc",
                "turboquant_k3v4_nc",
                "turboquant_k8v4",
                "ultraquant_4bit",
            }
        ),
    ),
    "--mamba-cache-mode": ("mambaCacheMode", frozenset({"align", "none"})),
    "--dtype": ("extraArgs", frozenset({"auto", "bfloat16", "float", "float16", "float32", "half"})),
}
"""Flags whose values vLLM checks against a fixed list: the field a bad value is reported on, and the list.

The first two are owned (typed fields); ``--dtype`` is only ever in ``extraArgs``.
"""

RENAMED_COMPILATION_KEYS: Final = {"level": "mode"}
"""Compilation-config keys the pinned vLLM refuses, with the key that replaced each."""

# Everything after the leading dashes up to the first dot: the part vLLM writes with dashes.
_FLAG_NAME = re.compile(r"(?<=^--)[^.]*")
_NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d*)?$")


@dataclass(frozen=True, slots=True)
class Flag:
    """One command-line token that is a flag.

    Attributes:
        written: the flag as written, without an ``=value`` part (named in errors).
        name: vLLM's spelling (dashes instead of underscores before the first dot).
        value: the text after ``=``, or None when the value, if any, is the next token.
    """

    written: str
    name: str
    value: str | None

    @property
    def head(self) -> str:
        """The flag's name before its first dot (the whole name when it has none)."""
        return self.name.split(".", 1)[0]


def read_flag(arg: str) -> Flag | None:
    """Read ``arg`` as a flag, or return None when it is a value (a negative number is a value)."""
    if not arg.startswith("-") or arg == "-" or _NEGATIVE_NUMBER.match(arg):
        return None
    written, sep, value = arg.partition("=")
    name = _FLAG_NAME.sub(lambda match: match.group(0).replace("_", "-"), written, count=1)
    return Flag(written, name, value if sep else None)


@dataclass(frozen=True, slots=True)
class OwnedScalar:
    """An owned flag with one value: ``--max-num-seqs 8``."""

    flag: str
    setting: str
    value: int | str


@dataclass(frozen=True, slots=True)
class OwnedSwitch:
    """An owned on/off flag: ``--no-enable-prefix-caching``."""

    flag: str
    setting: str
    value: bool


@dataclass(frozen=True, slots=True)
class OwnedObject:
    """A whole JSON config: ``--speculative-config '{"method": "mtp"}'``."""

    flag: str
    config: ConfigName
    value: dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class OwnedDotted:
    """One key of a JSON config: ``-cc.cudagraph_mode=FULL``.

    ``group`` is the spelling before the dot: vLLM gathers dotted keys per spelling, so ``-cc.x`` and
    ``--compilation-config.y`` build two separate objects for the same config.
    """

    flag: str
    config: ConfigName
    group: str
    path: tuple[str, ...]
    value: JsonValue


OwnedFlag = OwnedScalar | OwnedSwitch | OwnedObject | OwnedDotted


def load_json(text: str) -> JsonValue:
    """Parse JSON, refusing NaN and infinities (they would not survive a round trip through a file)."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)  # type: ignore[no-any-return]


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def split_owned(args: Sequence[str]) -> tuple[list[OwnedFlag], list[str]]:
    """Separate the owned flags of ``args`` (in order) from every other argument (verbatim, in order).

    Raises:
        UnreadableFlagError: an owned flag whose value is missing or cannot be read.
    """
    tokens = list(_expand_lines(args))
    owned: list[OwnedFlag] = []
    others: list[str] = []
    index = 0
    while index < len(tokens):
        flag = read_flag(tokens[index])
        if flag is None or not _is_owned(flag):
            others.append(tokens[index])
            index += 1
            continue
        found, index = _read_owned(flag, tokens, index + 1)
        owned.append(found)
    return owned, others


def _is_owned(flag: Flag) -> bool:
    if "." in flag.name:
        return flag.head in _CONFIGS
    return flag.name in OWNED_SCALARS or flag.name in OWNED_SWITCHES or flag.name in _CONFIGS


def _expand_lines(args: Sequence[str]) -> Iterator[str]:
    """Split an element holding a whole ``--flag value`` line into the arguments vLLM expects.

    vLLM reads an element such as ``"--seed 7"`` as one unknown positional argument and refuses to
    start, so every flag's line is split, owned or not; JSON after the flag stays one value.
    """
    for arg in args:
        first, rest = _first_word(arg)
        flag = read_flag(first) if rest and "=" not in first else None
        if flag is None:
            yield arg
        elif not _is_owned(flag):
            yield from _split_other(arg, first, rest)
        elif flag.name in _CONFIGS and _is_json(rest):
            # Unquoted JSON would lose its quotes to a shell-style split.
            yield from (first, rest)
        else:
            try:
                yield from shlex.split(arg)
            except ValueError as exc:
                raise UnreadableFlagError(first, f"cannot split {arg!r}: {exc}") from None


def _split_other(arg: str, first: str, rest: str) -> list[str]:
    """A line of a flag Mirbad does not own: JSON stays whole; what shell rules cannot split stays as is."""
    if rest[:1] in "{[" and _is_json(rest):
        return [first, rest]
    try:
        return shlex.split(arg)
    except ValueError:
        return [arg]


def _first_word(arg: str) -> tuple[str, str]:
    words = arg.split(None, 1)
    if len(words) < 2:
        return arg, ""
    return words[0], words[1].strip()


def _is_json(text: str) -> bool:
    try:
        load_json(text)
    except ValueError:
        return False
    return True


def _read_owned(flag: Flag, tokens: list[str], after: int) -> tuple[OwnedFlag, int]:
    """Read one owned flag whose value, if separate, starts at ``tokens[after]``."""
    if flag.name in OWNED_SWITCHES:
        if flag.value is not None:
            raise UnreadableFlagError(flag.written, "is a switch and takes no value")
        setting, on = OWNED_SWITCHES[flag.name]
        return OwnedSwitch(flag.written, setting, on), after
    text, after = _take_value(flag, tokens, after)
    if "." in flag.name:
        return _dotted(flag, text), after
    if flag.name in _CONFIGS:
        return OwnedObject(flag.written, _CONFIGS[flag.name], _json_object(flag.written, text)), after
    setting = OWNED_SCALARS[flag.name]
    return OwnedScalar(flag.written, setting, _scalar(flag.written, setting, text)), after


def _take_value(flag: Flag, tokens: list[str], after: int) -> tuple[str, int]:
    if flag.value is not None:
        return flag.value, after
    # A dotted key takes the next token whatever it looks like (vLLM pairs them before parsing);
    # a plain flag, like argparse, refuses a token that is itself a flag.
    if after < len(tokens) and ("." in flag.name or read_flag(tokens[after]) is None):
        return tokens[after], after + 1
    raise UnreadableFlagError(flag.written, "needs a value")


def _scalar(flag: str, setting: str, text: str) -> int | str:
    if setting not in _COUNTS:
        if not text.strip():
            raise UnreadableFlagError(flag, "needs a value")
        return text
    try:
        count = int(text)
    except ValueError:
        raise UnreadableFlagError(flag, f"{text!r} is not an integer") from None
    if count <= 0:
        raise UnreadableFlagError(flag, f"must be a positive integer, not {count}")
    return count


def _json_object(flag: str, text: str) -> dict[str, JsonValue]:
    try:
        value = load_json(text)
    except ValueError as exc:
        raise UnreadableFlagError(flag, f"is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UnreadableFlagError(flag, f"must be a JSON object, not {text!r}")
    return value


def _dotted(flag: Flag, text: str) -> OwnedDotted:
    head, _, dotted = flag.name.partition(".")
    value: JsonValue
    if dotted.endswith("+"):
        # vLLM's list form: `--config.key+=a,b` appends ["a", "b"] to the key's list.
        dotted, value = dotted[:-1], list(text.split(","))
    else:
        value = _dotted_value(flag.written, text)
    return OwnedDotted(flag.written, _CONFIGS[head], head, tuple(dotted.split(".")), value)


def _dotted_value(flag: str, text: str) -> JsonValue:
    """A dotted key's value is JSON when it parses as JSON, else the text itself (as in vLLM)."""
    try:
        return load_json(text)
    except json.JSONDecodeError:
        return text
    except ValueError as exc:
        raise UnreadableFlagError(flag, str(exc)) from None


def check_vllm_values(definition: ModelDefinition) -> None:
    """Refuse what the pinned vLLM would refuse and the flag table can tell, naming the field.

    ``definition`` is normalized: owned settings are in their typed fields, whatever their spelling
    in ``extraArgs`` was. Called where a definition is saved, never where one is read back (a stored
    or running definition stays readable; its start then fails with vLLM's own message).

    Raises:
        InvalidFieldError: a value outside vLLM's choices (``kvCacheDtype``, ``mambaCacheMode``,
            ``extraArgs`` for ``--dtype``) or a compilation key vLLM renamed (``compilationConfig``).
    """
    _check_choice("--kv-cache-dtype", definition.kv_cache_dtype)
    if definition.mamba_cache_mode is not None:
        _check_choice("--mamba-cache-mode", definition.mamba_cache_mode)
    for old, new in RENAMED_COMPILATION_KEYS.items():
        if old in definition.compilation_config:
            raise InvalidFieldError(
                "compilationConfig", f"vLLM {PINNED_VLLM} refuses the key {old!r}: it is {new!r} now"
            )
    for flag, value in _plain_values(definition.extra_args):
        if flag in CHOICES:
            _check_choice(flag, value)


def _check_choice(flag: str, value: str) -> None:
    field, allowed = CHOICES[flag]
    if value not in allowed:
        raise InvalidFieldError(
            field,
            f"{flag} {value!r} is not one of vLLM {PINNED_VLLM}'s choices: {', '.join(sorted(allowed))}",
        )


def _plain_values(args: Sequence[str]) -> Iterator[tuple[str, str]]:
    """Each non-dotted flag with a value in ``args``, as vLLM spells the flag."""
    tokens = list(_expand_lines(args))
    for index, token in enumerate(tokens):
        flag = read_flag(token)
        if flag is None or "." in flag.name:
            continue
        if flag.value is not None:
            yield flag.name, flag.value
        elif index + 1 < len(tokens) and read_flag(tokens[index + 1]) is None:
            yield flag.name, tokens[index + 1]
