"""How llama-server reads its flags, and how to find the owned ones among free-form extra arguments.

llama-server takes ``--flag value`` (never ``--flag=value``), reads ``_`` as ``-`` in a long flag's
name, and keeps the last value of a repeated flag. Mirbad also accepts ``--flag=value`` and a
one-element ``"--flag value"`` in ``extraArgs`` for the flags it owns, since normalization rewrites
them in llama-server's own spelling.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import InvalidFieldError

__all__ = [
    "LLAMACPP_CACHE_RAM_MAX_MIB",
    "LLAMACPP_CACHE_TYPES",
    "LLAMACPP_MAX_SLOTS",
    "PROMPT_CACHE_SHARE",
    "llamacpp_cache_ram_mib",
]

LLAMACPP_CACHE_TYPES: Final = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
"""The KV cache types llama-server accepts for ``--cache-type-k`` / ``--cache-type-v``."""

LLAMACPP_MAX_SLOTS: Final = 256
"""llama.cpp's limit on parallel sequences (``LLAMA_MAX_SEQ``)."""

LLAMACPP_CACHE_RAM_MAX_MIB: Final = 8192
"""llama-server's own ``--cache-ram`` default (MiB): the builder's cap never goes above it."""

PROMPT_CACHE_SHARE: Final = 0.25
"""The share of a model's memory budget its prompt cache (``--cache-ram``) may take."""

CACHE_RAM: Final = "--cache-ram"
_CACHE_RAM_SPELLINGS: Final = frozenset({"-cram", CACHE_RAM})

INT32_MAX: Final = 2**31 - 1
DEFAULT_CACHE_TYPE: Final = "f16"
METRICS: Final = "--metrics"
_INTEGER: Final = re.compile(r"-?[0-9]+")

# Every spelling of an owned flag, mapped to the canonical long name the builder writes.
_OWNED: Final = {
    "-c": "--ctx-size",
    "--ctx-size": "--ctx-size",
    "-np": "--parallel",
    "--parallel": "--parallel",
    "-b": "--batch-size",
    "--batch-size": "--batch-size",
    "-ctk": "--cache-type-k",
    "--cache-type-k": "--cache-type-k",
    "-ctv": "--cache-type-v",
    "--cache-type-v": "--cache-type-v",
    "-ngl": "--n-gpu-layers",
    "--gpu-layers": "--n-gpu-layers",
    "--n-gpu-layers": "--n-gpu-layers",
}
# Flags written from identity fields: read by the parser, refused in extraArgs.
_IDENTITY: Final = {"-m": "modelPath", "--model": "modelPath", "-a": "servedName", "--alias": "servedName"}
# Flags the agent adds; each takes a value.
_PLUMBING: Final = frozenset({"--host", "--port", "--api-key", "--api-key-file"})


def split_flag(element: str) -> tuple[str, str | None]:
    """Split ``--flag=value`` or a one-element ``"--flag value"`` into the flag and its inline value.

    Anything that does not start with ``-`` is returned whole with no inline value.
    """
    cut = re.search(r"[=\s]", element) if element.startswith("-") else None
    if cut is None:
        return element, None
    value = element[cut.end() :]
    return element[: cut.start()], value.strip() if cut.group().isspace() else value


def _canonical(name: str) -> str:
    return name.replace("_", "-") if name.startswith("--") else name


@dataclass
class FlagScan:
    """The flags of an argument list sorted by who owns them.

    Attributes:
        owned: (canonical flag, value, flag as written) of each owned flag, in order.
        identity: ``modelPath`` / ``servedName`` as ``--model`` / ``--alias`` give them (last wins).
        rest: every other element, verbatim and in order (``--metrics`` dropped: the builder writes it).
    """

    owned: list[tuple[str, str, str]] = field(default_factory=list)
    identity: dict[str, str] = field(default_factory=dict)
    rest: list[str] = field(default_factory=list)


def _value(written: str, inline: str | None, remaining: Iterator[str]) -> str:
    if inline is not None:
        return inline
    value = next(remaining, None)
    if value is None:
        raise UnreadableFlagError(written, "needs a value")
    return value


def scan_flags(argv: Sequence[str], *, command_line: bool) -> FlagScan:
    """Sort ``argv`` by owner; ``command_line`` reads a whole command line rather than ``extraArgs``.

    In a command line the agent's plumbing is dropped and ``--model``/``--alias`` are read; in
    ``extraArgs`` they are refused.

    Raises:
        InvalidFieldError: (``extraArgs``) a plumbing or identity flag in ``extraArgs``.
        UnreadableFlagError: an owned or identity flag without its value.
    """
    scan = FlagScan()
    remaining = iter(argv)
    for element in remaining:
        written, inline = split_flag(element)
        name = _canonical(written)
        if name in _PLUMBING:
            if not command_line:
                raise InvalidFieldError("extraArgs", f"{written} is set by the agent")
            _value(written, inline, remaining)
        elif name in _IDENTITY:
            if not command_line:
                raise InvalidFieldError("extraArgs", f"{written} is set from {_IDENTITY[name]}")
            scan.identity[_IDENTITY[name]] = _value(written, inline, remaining)
        elif name in _OWNED:
            scan.owned.append((_OWNED[name], _value(written, inline, remaining), written))
        elif name != METRICS or inline is not None:
            scan.rest.append(element)
    return scan


def llamacpp_cache_ram_mib(budget_gib: float) -> int:
    """The ``--cache-ram`` (MiB) the builder gives a model with a budget of ``budget_gib``.

    llama-server keeps the prompts of idle slots in RAM up to ``--cache-ram``, 8 GiB unless told, so a
    model in a 0.5 GiB budget grew far past it under load. The builder has no GGUF header, so it
    cannot subtract the admission estimate (weights, KV cache, compute) from the budget; it gives the
    cache :data:`PROMPT_CACHE_SHARE` of the budget instead, leaving the rest to what the estimate
    counts, and never more than llama-server's own default.
    """
    return min(LLAMACPP_CACHE_RAM_MAX_MIB, max(0, int(budget_gib * 1024 * PROMPT_CACHE_SHARE)))


def sets_cache_ram(extra_args: Sequence[str]) -> bool:
    """Whether ``extra_args`` set ``--cache-ram`` themselves, in any spelling llama-server reads."""
    return any(_canonical(split_flag(element)[0]) in _CACHE_RAM_SPELLINGS for element in extra_args)


def _integer(written: str, value: str, *, minimum: int) -> int:
    if not _INTEGER.fullmatch(value.strip()):
        raise UnreadableFlagError(written, f"{value!r} is not a whole number")
    number = int(value)
    if number < minimum:
        raise UnreadableFlagError(written, f"{number} is below the smallest value Mirbad accepts ({minimum})")
    if number > INT32_MAX:
        raise UnreadableFlagError(written, f"{number} is larger than llama.cpp reads")
    return number


def _cache_type(written: str, value: str) -> str:
    if value not in LLAMACPP_CACHE_TYPES:
        allowed = ", ".join(LLAMACPP_CACHE_TYPES)
        raise UnreadableFlagError(written, f"{value!r} is not a llama.cpp cache type ({allowed})")
    return value


def _gpu_layers(written: str, value: str) -> int:
    if value == "auto":
        return -1
    if value == "all":
        raise UnreadableFlagError(written, "'all' has no typed value; give a layer count, or -1 for auto")
    return _integer(written, value, minimum=-1)


def _slots(written: str, value: str) -> int:
    if value.strip() == "-1":
        raise UnreadableFlagError(written, "-1 (auto) leaves the slots to llama.cpp; give a slot count")
    slots = _integer(written, value, minimum=1)
    if slots > LLAMACPP_MAX_SLOTS:
        raise UnreadableFlagError(written, f"llama.cpp serves at most {LLAMACPP_MAX_SLOTS} slots")
    return slots


def _context(written: str, value: str) -> int:
    if value.strip() == "0":
        raise UnreadableFlagError(written, "0 (the trained context) is not known here; give a token count")
    return _integer(written, value, minimum=1)


@dataclass
class EffectiveSettings:
    """The owned settings llama-server ends up with, applied flag by flag as it reads them."""

    ctx_size: int
    parallel: int
    batch: int | None
    cache_k: str | None
    cache_v: str | None
    gpu_layers: int | None
    spellings: dict[str, str] = field(default_factory=dict)

    def apply(self, flag: str, value: str, written: str) -> None:
        """Apply one owned flag (its canonical name, value, and spelling for errors)."""
        self.spellings[flag] = written
        if flag == "--ctx-size":
            self.ctx_size = _context(written, value)
        elif flag == "--parallel":
            self.parallel = _slots(written, value)
        elif flag == "--batch-size":
            self.batch = _integer(written, value, minimum=1)
        elif flag == "--cache-type-k":
            self.cache_k = _cache_type(written, value)
        elif flag == "--cache-type-v":
            self.cache_v = _cache_type(written, value)
        else:
            self.gpu_layers = _gpu_layers(written, value)

    def per_slot_context(self) -> int:
        """Each slot's share of the context, as llama.cpp divides it."""
        if self.ctx_size < self.parallel:
            flag = self.spellings.get("--ctx-size") or self.spellings.get("--parallel", "--ctx-size")
            raise UnreadableFlagError(
                flag, f"{self.ctx_size} tokens cannot be shared by {self.parallel} slots"
            )
        return self.ctx_size // self.parallel

    def kv_cache_dtype(self) -> str:
        """The one cache type for K and V, or ``auto`` when neither is set."""
        if self.cache_k is None and self.cache_v is None:
            return "auto"
        key, value = self.cache_k or DEFAULT_CACHE_TYPE, self.cache_v or DEFAULT_CACHE_TYPE
        if key != value:
            flag = self.spellings.get("--cache-type-v") or self.spellings.get("--cache-type-k", "-ctk")
            raise UnreadableFlagError(flag, f"K ({key}) and V ({value}) differ; kvCacheDtype sets both")
        return key
