"""The router benchmark: requests/s, latency and SSE delay direct, through the agent and through both.

Run it from the repository root with ``.venv/bin/python -m bench.router`` (``--quick`` for a short
smoke run); it writes ``docs/performance.md``. Every figure is measured in the same run as the
``direct`` baseline it is compared with, on the same machine, so the ratios carry over to other
machines better than the absolute numbers do.

The package imports nothing itself: the upstream (:mod:`bench.router._upstream`) runs as a model
process from this package, and should not pay for the harness's imports.
"""
