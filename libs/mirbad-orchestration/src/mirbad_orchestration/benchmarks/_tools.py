"""The Agents preset's tool-call cases and their check against each tool's JSON schema.

Three cases, asked in every repetition, whose schemas between them use what agents' tools use and
servers get wrong: types, required fields, an enum, an array's items and closed objects
(``additionalProperties: false``). The arguments are validated with the ``jsonschema`` library (Draft
2020-12), never by hand, so "valid" means what it means to every other JSON Schema consumer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mirbad_protocol.benchmarks import ToolCallResult

__all__ = ["PRESET_TOOL_CASES", "ToolCase", "check_tool_call"]


@dataclass(frozen=True)
class ToolCase:
    """One tool-call case: a prompt, the one tool it should call and that tool's parameters schema."""

    prompt: str
    name: str
    description: str
    parameters: Mapping[str, Any]

    def request(self, *, max_tokens: int = 256) -> dict[str, Any]:
        """The chat request of this case (without ``model``), answering with at most ``max_tokens``."""
        return {
            "messages": [{"role": "user", "content": self.prompt}],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": self.name,
                        "description": self.description,
                        "parameters": dict(self.parameters),
                    },
                }
            ],
            "tool_choice": "auto",
            "temperature": 0,
            "max_tokens": max_tokens,
        }


PRESET_TOOL_CASES: Final = (
    ToolCase(
        "What is the weather in Oslo in celsius? Use the tool.",
        "get_weather",
        "Returns the current weather of a city.",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    ),
    ToolCase(
        "Create a task titled 'Ship the release' with the tags 'release' and 'urgent'. Use the tool.",
        "create_task",
        "Creates a task with a title and a list of tags.",
        {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            },
            "required": ["title", "tags"],
            "additionalProperties": False,
        },
    ),
    ToolCase(
        "Book a meeting room for 4 people on 2026-03-02 from 10:00 to 11:00. Use the tool.",
        "book_room",
        "Books a meeting room for a number of people and a time slot.",
        {
            "type": "object",
            "properties": {
                "people": {"type": "integer", "minimum": 1},
                "slot": {
                    "type": "object",
                    "properties": {
                        "date": {"type": "string"},
                        "start": {"type": "string"},
                        "end": {"type": "string"},
                    },
                    "required": ["date", "start", "end"],
                    "additionalProperties": False,
                },
            },
            "required": ["people", "slot"],
            "additionalProperties": False,
        },
    ),
)
"""The three cases, asked in this order in every repetition."""


def check_tool_call(case: ToolCase, response: Mapping[str, Any]) -> ToolCallResult:
    """Whether a chat response calls ``case``'s tool with arguments that fit its schema."""
    choices = response.get("choices") or [{}]
    calls = (choices[0].get("message") or {}).get("tool_calls") or []
    if not calls:
        return ToolCallResult(called=False, valid=False, detail="the model answered without a tool call")
    function = calls[0].get("function") or {}
    if function.get("name") != case.name:
        return ToolCallResult(called=True, valid=False, detail=f"unknown tool {function.get('name')!r}")
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError as exc:
        return ToolCallResult(called=True, valid=False, detail=f"arguments are not JSON: {exc}")
    import jsonschema  # here, not at the top: ~2 MB an idle master never needs

    validator = jsonschema.Draft202012Validator(dict(case.parameters))
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "the arguments"
        return ToolCallResult(called=True, valid=False, detail=f"{where}: {error.message}")
    return ToolCallResult(called=True, valid=True)
