"""The agent's request log: every HTTP request it makes, with the routine ones at debug.

httpx logs each request at info. The agent reads every model's ``/health`` on each status read and
scrapes its ``/metrics`` on each telemetry pass, so at info those polls were nearly all of the log
(576 of 607 lines on one node) and hid what happened: starts, failures. Proxied ``/v1`` calls are
routine too: one line each was 88,001 lines in half an hour of load and about 3 % of the agent's CPU,
and the master's usage records already count them. The filter lowers both to debug, where
``--log-level debug`` still shows them.
"""

from __future__ import annotations

import logging
from typing import Final

import httpx

__all__ = ["POLL_PATHS", "PROXIED_PREFIX", "REQUEST_LOGGER", "QuietPollFilter", "quiet_polls"]

REQUEST_LOGGER: Final = "httpx"
"""The logger each request the agent makes is logged on (httpx's own)."""
POLL_PATHS: Final = frozenset({"health", "metrics"})
"""Last path segments of the requests logged at debug: the health checks and metrics scrapes."""
PROXIED_PREFIX: Final = "/v1/"
"""Path prefix of the proxied OpenAI-compatible calls, logged at debug too."""


class QuietPollFilter(logging.Filter):
    """Turns a poll's or a proxied call's log record into a debug record, kept only at debug level."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every other record as it is; lower a routine record to debug, or drop it above debug."""
        if not _is_routine(record):
            return True
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        # The logger already passed the record at info; the handlers would not look at its level again.
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_polls() -> QuietPollFilter:
    """Install :class:`QuietPollFilter` on the request logger once, and return the installed filter."""
    logger = logging.getLogger(REQUEST_LOGGER)
    installed = next((known for known in logger.filters if isinstance(known, QuietPollFilter)), None)
    if installed is None:
        installed = QuietPollFilter()
        logger.addFilter(installed)
    return installed


def _is_routine(record: logging.LogRecord) -> bool:
    # httpx logs 'HTTP Request: %s %s ...' with (method, url, ...) as its arguments.
    url = record.args[1] if isinstance(record.args, tuple) and len(record.args) > 1 else None
    if not isinstance(url, httpx.URL):
        return False
    return url.path.startswith(PROXIED_PREFIX) or url.path.rstrip("/").rsplit("/", 1)[-1] in POLL_PATHS
