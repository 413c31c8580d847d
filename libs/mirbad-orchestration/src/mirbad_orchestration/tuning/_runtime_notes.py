"""RuntimeNotes: what vLLM's own log says it resolved, compared with what the candidate asked for.

vLLM may quietly run something else than requested: it downgrades the CUDA graph mode when the
attention backend cannot capture full graphs with speculative decoding ("… setting
cudagraph_mode=PIECEWISE"), switches asynchronous scheduling off, or caps the scheduled tokens per step
("max_num_scheduled_tokens is set to …"). :func:`parse_runtime_log` reads those lines from a
candidate's log (the engine's "Initializing a V1 LLM engine … with config:" line for the speculative
config and the graph mode it started with, the later warnings for what it resolved), and
:func:`compare_with_request` says what differs from the candidate's definition: ``["as requested"]``
when nothing does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from mirbad_protocol import ModelDefinition

__all__ = ["AS_REQUESTED", "RuntimeNotes", "compare_with_request", "parse_runtime_log"]

AS_REQUESTED: Final = "as requested"
"""The note when the log shows nothing different from the request."""

# "(EngineCore pid=199) INFO 05-21 21:03:20 [core.py:109] " and the like: the logger's prefix.
_PREFIX: Final = re.compile(r"^(?:\([^)]*\)\s*)?(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s*)?")
_CONFIG_GRAPH: Final = re.compile(r"'cudagraph_mode':\s*<CUDAGraphMode\.([A-Z_]+)")
_SETTING_GRAPH: Final = re.compile(r"setting cudagraph_mode=([A-Z_]+)")
_SPEC_NONE: Final = re.compile(r"speculative_config=None\b")
_SPEC: Final = re.compile(r"speculative_config=(SpeculativeConfig\((?:[^()]|\([^()]*\))*\))")
_SPEC_METHOD: Final = re.compile(r"method='([^']*)'")
_SPEC_TOKENS: Final = re.compile(r"num_spec_tokens=(\d+)")
_ASYNC: Final = re.compile(r"Asynchronous scheduling is (enabled|disabled)")
# vLLM 0.32's warnings when it leaves async scheduling off on its own ("Async scheduling not supported
# with ngram-based speculative decoding and will be disabled.", "… is disabled because …").
_ASYNC_OFF: Final = re.compile(r"Async scheduling (?:.*\bwill be disabled|is disabled)\b")
_SCHEDULED: Final = re.compile(r"max_num_scheduled_tokens is set to (-?\d+)")


@dataclass(frozen=True)
class RuntimeNotes:
    """What a vLLM log says the engine runs with (None: the log does not say).

    Attributes:
        cudagraph_mode: the resolved CUDA graph mode (the last downgrade, else the config's).
        speculative: the ``SpeculativeConfig(…)`` text, ``"None"`` when it runs without one.
        speculative_method: the method in it.
        speculative_tokens: its ``num_spec_tokens``.
        async_scheduling: whether asynchronous scheduling is on.
        max_num_scheduled_tokens: the cap on scheduled tokens per step, when vLLM set one.
        notices: the notices worth showing (the logger's prefix stripped), in log order.
    """

    cudagraph_mode: str | None = None
    speculative: str | None = None
    speculative_method: str | None = None
    speculative_tokens: int | None = None
    async_scheduling: bool | None = None
    max_num_scheduled_tokens: int | None = None
    notices: tuple[str, ...] = field(default=())


def _message(line: str) -> str:
    return _PREFIX.sub("", line.strip(), count=1).strip()


def parse_runtime_log(lines: Iterable[str]) -> RuntimeNotes:
    """Read the resolved settings and notices out of a vLLM log (lines in log order)."""
    graph = spec = method = None
    tokens = scheduled = None
    async_on: bool | None = None
    notices: list[str] = []
    for raw in lines:
        line = raw.rstrip("\n")
        if "with config:" in line:
            if (found := _CONFIG_GRAPH.search(line)) is not None:
                graph = found.group(1)
            if _SPEC_NONE.search(line):
                spec, method, tokens = "None", None, None
            elif (config := _SPEC.search(line)) is not None:
                spec = config.group(1)
                method = m.group(1) if (m := _SPEC_METHOD.search(spec)) else None
                tokens = int(t.group(1)) if (t := _SPEC_TOKENS.search(spec)) else None
            continue
        if (found := _SETTING_GRAPH.search(line)) is not None:
            graph = found.group(1)
            notices.append(_message(line))
        elif (found := _ASYNC.search(line)) is not None:
            async_on = found.group(1) == "enabled"
        elif _ASYNC_OFF.search(line) is not None:
            async_on = False
            notices.append(_message(line))
        elif (found := _SCHEDULED.search(line)) is not None:
            scheduled = int(found.group(1))
            notices.append(_message(line))
    return RuntimeNotes(graph, spec, method, tokens, async_on, scheduled, tuple(notices))


def compare_with_request(notes: RuntimeNotes, definition: ModelDefinition) -> list[str]:
    """What the log shows differently from ``definition`` (``["as requested"]`` when nothing differs).

    Only what the request set is compared (a setting left to vLLM has nothing to differ from); the
    notices (a capped step, a downgraded graph) are always listed.
    """
    found: list[str] = []
    wanted_graph = definition.cudagraph_mode
    if wanted_graph is not None and notes.cudagraph_mode is not None and notes.cudagraph_mode != wanted_graph:
        found.append(f"cudagraph_mode {notes.cudagraph_mode} (requested {wanted_graph})")
    wanted = definition.speculative
    if notes.speculative is not None:
        if wanted is None and notes.speculative != "None":
            found.append(f"speculative {notes.speculative} (requested off)")
        elif wanted is not None and notes.speculative == "None":
            found.append("speculative off (requested on)")
        elif wanted is not None and wanted.num_speculative_tokens not in (None, notes.speculative_tokens):
            found.append(
                f"speculative tokens {notes.speculative_tokens} (requested {wanted.num_speculative_tokens})"
            )
    wanted_async = definition.async_scheduling
    if (
        wanted_async is not None
        and notes.async_scheduling is not None
        and notes.async_scheduling != wanted_async
    ):
        state = "on" if notes.async_scheduling else "off"
        found.append(f"async scheduling {state} (requested {'on' if wanted_async else 'off'})")
    found += notes.notices
    return found or [AS_REQUESTED]
