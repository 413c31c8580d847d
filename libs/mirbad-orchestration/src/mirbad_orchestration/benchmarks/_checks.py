"""The suite's checks of answers: the tool call and the objective questions.

The tool's schema is an object without ``properties`` (the case some servers and templates get wrong);
its arguments are validated with the ``jsonschema`` library. The objective questions have one right
answer each, matched by a regular expression on the reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mirbad_protocol.benchmarks import ToolCallResult

__all__ = ["OBJECTIVE_QUESTIONS", "TOOL_CALL_REQUEST", "ObjectiveQuestion", "score_tool_call"]

_TOOL_SCHEMA: Final[dict[str, Any]] = {"type": "object"}
TOOL_CALL_REQUEST: Final[dict[str, Any]] = {
    "messages": [{"role": "user", "content": "What time is it on the server? Use the tool."}],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_server_time",
                "description": "Returns the server's current time. Takes no arguments.",
                "parameters": _TOOL_SCHEMA,
            },
        }
    ],
    "tool_choice": "auto",
    "temperature": 0,
    "max_tokens": 128,
}
"""The tool-call request (without ``model``)."""


@dataclass(frozen=True)
class ObjectiveQuestion:
    """A question with one right answer and the pattern that recognizes it in a reply."""

    question: str
    pattern: str

    def is_answered_by(self, reply: str) -> bool:
        """Whether ``reply`` contains the right answer."""
        return re.search(self.pattern, reply, re.IGNORECASE) is not None


OBJECTIVE_QUESTIONS: Final = (
    ObjectiveQuestion("What is 17 + 25? Answer with the number only.", r"\b42\b"),
    ObjectiveQuestion("What is 9 times 8? Answer with the number only.", r"\b72\b"),
    ObjectiveQuestion("What is the capital of France? Answer with one word.", r"\bparis\b"),
    ObjectiveQuestion("How many days are in a week? Answer with the number only.", r"\b(7|seven)\b"),
    ObjectiveQuestion("What is the chemical symbol of gold? Answer with the symbol only.", r"\bAu\b"),
    ObjectiveQuestion("Which planet is closest to the Sun? Answer with one word.", r"\bmercury\b"),
    ObjectiveQuestion("What is 100 divided by 4? Answer with the number only.", r"\b25\b"),
    ObjectiveQuestion("Spell the word 'cat' backwards. Answer with the word only.", r"\btac\b"),
)
"""The eight objective questions of the classic suite."""


def score_tool_call(response: Mapping[str, Any]) -> ToolCallResult:
    """Whether a chat response holds a tool call whose arguments fit the tool's schema."""
    choices = response.get("choices") or [{}]
    calls = (choices[0].get("message") or {}).get("tool_calls") or []
    if not calls:
        return ToolCallResult(called=False, valid=False, detail="the model answered without a tool call")
    function = calls[0].get("function") or {}
    if function.get("name") != "get_server_time":
        return ToolCallResult(called=True, valid=False, detail=f"unknown tool {function.get('name')!r}")
    import jsonschema  # here, not at the top: ~2 MB an idle master never needs

    try:
        arguments = json.loads(function.get("arguments") or "{}")
        jsonschema.validate(arguments, _TOOL_SCHEMA)
    except json.JSONDecodeError as exc:
        return ToolCallResult(called=True, valid=False, detail=f"arguments are not JSON: {exc}")
    except jsonschema.ValidationError as exc:
        return ToolCallResult(called=True, valid=False, detail=f"arguments break the schema: {exc.message}")
    return ToolCallResult(called=True, valid=True)
