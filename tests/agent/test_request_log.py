"""The agent's request log keeps the models' polls and proxied calls at debug (issue 8: 576 of 607 lines).

Issue 16: 88,001 lines in half an hour of load, one per proxied request, about 3 % of the agent's CPU.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from tests._support.asgi_server import serve_asgi
from tests._support.fake_upstream import WAIT_S, FakeUpstream

from mirbad_agent import REQUEST_LOGGER, quiet_polls

pytestmark = pytest.mark.anyio


@pytest.fixture
def quiet() -> Iterator[logging.Filter]:
    logger = logging.getLogger(REQUEST_LOGGER)
    # `mirbad up`'s command line (run in-process by other tests on this worker) raises httpx's level.
    level = logger.level
    logger.setLevel(logging.NOTSET)
    installed = quiet_polls()
    yield installed
    logger.removeFilter(installed)
    logger.setLevel(level)


@pytest.fixture
async def model_server() -> AsyncIterator[str]:
    async with serve_asgi(FakeUpstream()) as base:
        yield base


async def requested(base: str, *paths: str) -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=WAIT_S) as client:
        for path in paths:
            await client.get(f"{base.rstrip('/')}/{path}")


def request_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    records = [record for record in caplog.records if record.name == REQUEST_LOGGER]
    return [(record.levelno, record.getMessage()) for record in records]


async def test_polls_and_proxied_calls_are_left_out_at_info(
    quiet: logging.Filter, model_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        await requested(
            model_server, "health", "metrics", "v1/models", "v1/chat/completions", "base/health", "props"
        )

    lines = request_lines(caplog)
    assert [level for level, _ in lines] == [logging.INFO]
    assert "/props" in lines[0][1]


async def test_the_polls_are_logged_at_debug_when_the_agent_logs_debug(
    quiet: logging.Filter, model_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        await requested(model_server, "health", "v1/models", "metrics", "props")

    levels = [level for level, _ in request_lines(caplog)]
    assert levels == [logging.DEBUG, logging.DEBUG, logging.DEBUG, logging.INFO]


def test_installing_twice_keeps_one_filter(quiet: logging.Filter) -> None:
    assert quiet_polls() is quiet
    assert logging.getLogger(REQUEST_LOGGER).filters.count(quiet) == 1
