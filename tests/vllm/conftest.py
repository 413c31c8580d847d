"""Fixtures of the real vLLM tier: vLLM's own ``vllm serve`` parser, run in the pinned vLLM virtualenv."""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests._support.vllm_image import PARSER_SCRIPT, VllmTierError, ensure_venv

_PARSE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Parsed:
    """What vLLM's parser made of one argv: its settings by destination, or its own error lines."""

    argv: list[str]
    settings: dict[str, Any] | None
    error: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether vLLM accepted the argv."""
        return self.settings is not None


class VllmParser:
    """vLLM's parser in one long-lived child process (importing vLLM takes seconds), one line per batch."""

    def __init__(self, python: Path) -> None:
        # vLLM logs a warning per parse: a file, not a pipe nobody drains, takes them.
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - open as long as the child, closed in close()
        self._process = subprocess.Popen(
            [str(python), str(PARSER_SCRIPT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors, text=True,
        )  # fmt: skip
        self._flags: dict[str, dict[str, Any]] | None = None

    def parse(self, argvs: Sequence[Sequence[str]]) -> list[Parsed]:
        """Parse each argv as ``vllm serve ARGV``."""
        answer = self._ask([list(argv) for argv in argvs])
        return [
            Parsed(list(argv), result.get("settings"), result.get("error", []))
            for argv, result in zip(argvs, answer["results"], strict=True)
        ]

    @property
    def flags(self) -> dict[str, dict[str, Any]]:
        """Every option string of ``vllm serve``: its destination, choices and whether it takes a value."""
        if self._flags is None:
            self._flags = self._ask([])["flags"]
        return self._flags

    def close(self) -> None:
        """End the child process."""
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(_PARSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(_PARSE_TIMEOUT_S)
        assert self._process.stdout is not None
        self._process.stdout.close()
        self._errors.close()

    def _ask(self, argvs: list[list[str]]) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write(json.dumps({"argvs": argvs}) + "\n")
        stdin.flush()
        readable, _, _ = select.select([stdout], [], [], _PARSE_TIMEOUT_S)
        line = stdout.readline() if readable else ""
        if not line:
            self._process.kill()
            _, errors = self._process.communicate(timeout=_PARSE_TIMEOUT_S)
            pytest.fail(
                f"the vLLM parser probe gave no answer (exit {self._process.returncode}):\n{errors[-3000:]}"
            )
        answer: dict[str, Any] = json.loads(line)
        self._flags = answer["flags"]
        return answer


@pytest.fixture(scope="session")
def vllm_parser() -> Iterator[VllmParser]:
    """vLLM's own serve parser, from the pinned virtualenv (installed when missing)."""
    try:
        parser = VllmParser(ensure_venv())
    except VllmTierError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield parser
    parser.close()


@pytest.fixture
def run_id() -> str:
    """This test's id: the suffix of its model ids and of its Docker network's name."""
    return os.urandom(3).hex()
