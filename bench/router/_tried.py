"""What was tried on the router's hot path and what the bench showed: the report's last section.

Written by hand from the runs it describes (their numbers come from those runs, on the same shared
2-core machine, not from the run above them in the report), so that the report keeps the record of
what paid and what did not. Update it with each change to the hot path.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TRIED"]

TRIED: Final = """\
Each change was measured by running `python -m bench.router --no-litellm` on the commit before it and
on the commit with it, back to back (A/B), and by profiling the master with cProfile under wrk at
c=64 on the master + agent path for 8 s. The machine was shared with five other engineers' builds
(load average 3 to 15 on 2 cores): the stack got 10-70 % of the cores and CPU per request came out
2-4x what the issue measured on a quiet machine of the same kind (the bare upstream itself cost
87-235 µs per request instead of 31-65 µs), so differences under ~20 % are within the noise.

- **The load generator (wrk).** The Python generator capped `direct` at 0.7-2.3k requests/s;
  wrk (one thread, C) reached 5-9k here with the rest of the machine busy, so "% of direct" is no
  longer flattering. The agent's mutual TLS goes through a local TLS terminator whose cost
  (0.5-1 ms per request on this machine) is its own column, not the agent's.
- **uvloop for the master and the agent** (anyio's `use_uvloop`, only when `uvloop` imports; without
  it the asyncio loop runs, silently). A/B at load average ~10: master 5,981 → 6,115 µs per request at
  c=1 and 10,607 → 10,321 µs at c=64, agent 3,096 → 4,000 and 4,770 → 5,545 µs: no difference this
  machine could show. Kept: the upstreams run on it, it costs nothing where absent, and the profile
  of the master is dominated by Python-level work (httpx/httpcore, anyio, the router) that no loop
  makes cheaper. Under uvloop libuv sheds the waiting connections itself when descriptors run out,
  so the once-per-interval "cannot accept connections" report of the asyncio loop is not written
  there (tested: no flood, the server recovers). mirbad-router declares uvloop (not on Windows), so
  an agent installed alone has it too.
- **A lean connection pool** (`mirbad_router.LeanConnectionPool`, for the agent's client to the
  models and the master's transports to agents). httpcore's pool did work per request quadratic in
  the connections it holds and, counting every connection against the keep-alive bound, closed idle
  connections whenever more requests were in flight than the bound (a new TLS handshake to the agent
  for the next request). Profile of the master at c=64: httpcore's `_assign_requests_to_connections`
  took 2.84 s of 8 s (first by far); a first linear version still polled every idle socket per
  request (2.55 s, 10,767 polls); checking only the connection handed out, and sweeping the whole
  pool at most once a second, brought it to 1.08 s for 3x the requests (0.37 ms per call under the
  profiler instead of 3.1 ms), and the profiled run served 40 requests/s instead of 10-16. A/B with
  wrk (load average ~5): master 4,866 → 4,340 µs per request at c=64, 3,669 → 3,679 µs at c=1 (where
  the pool holds one connection); master µs per streamed event 172 → 151. Kept.
- **/v1 before FastAPI's layers**: the master's entry point sends `/v1/…` straight to the router's
  mount (FastAPI's error and exception middleware, the origin guard and the match against every `/api`
  route did nothing for it, on the request and on each streamed event's `send`). Landed with the pool
  and not measured apart; its share is below this machine's noise.
- **Already in place before this work**: proxied `/v1` calls logged at debug, not info, on the agent;
  `mirbad up --log-level` passed to the agent.
- **Not tried yet** (measured order of what is left, from the profiles): anyio's per-call overhead
  on TLS streams (`send` and the socket-attribute dict are the top functions by own time now); two
  task groups per request (the client-disconnect watch around the upstream send, and again around
  the relay); HTTP/2 with one multiplexed connection between master and agent; TLS session reuse;
  an aiohttp-based transport (aiohttp 3.14 is in the lock, through NiceGUI and python-socketio, but
  no member declares it, and the lock could not change in this work); several router worker processes
  with SO_REUSEPORT (the per-key limits would need a shared counter to stay exact).
"""
"""Markdown: one bullet per attempt."""
