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

__all__: list[str] = []

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
    """Split an element holding a whole ``--flag value`` line, when that flag is owned."""
    for arg in args:
        first, rest = _first_word(arg)
        flag = read_flag(first) if rest and "=" not in first else None
        if flag is None or not _is_owned(flag):
            yield arg
        elif flag.name in _CONFIGS and _is_json(rest):
            # Unquoted JSON would lose its quotes to a shell-style split.
            yield from (first, rest)
        else:
            try:
                yield from shlex.split(arg)
            except ValueError as exc:
                raise UnreadableFlagError(first, f"cannot split {arg!r}: {exc}") from None


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
