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
- **The served-name lookup from an index** (`ModelRegistry.find_by_served_name`, on every `/v1`
  request). models.json was not read per request (the state file kept it in memory), but every
  lookup took the registry's `anyio.Lock` (an event-loop pass) and scanned every model with
  `casefold`, and the node lookup after it took the node registry's lock too. Now a dict built from
  the stored list answers without a lock or an await; it is rebuilt whenever a write stores a new
  list, and at most once a second the file's inode, size and mtime are compared (a hand edit is seen
  within a second; before, never). Loaded state files are read without their lock. Measured alone
  (20 models, uvloop): 15.2-16.4 → 0.5-0.8 µs per lookup. That is under 0.5 % of a request's
  3.6-5.3 ms in the master, below this machine's noise in the bench; kept for the edits it now sees.
- **Profiles of master and agent at c=1 and c=64** (py-spy 200 Hz, wrk on master + agent, load
  average 8-11, so the profiled stack served 34-46 requests/s). No Mirbad-owned function reaches 2 %
  of the samples: the resolver 1.3 %, the usage and limits path (`MasterStats.end`, `RouterStats.end`)
  0.5 % each, the registry lookup below the sampling floor after the change above, and no log line per
  request. The time is in the libraries' per-request work: httpx's `AsyncClient.send` 20-33 % inclusive
  (its cookie extraction alone 0.4-3.7 %, although the jar refuses every cookie), httpcore/h11 10-25 %,
  the two task groups and their cancel scopes (`CancelScope.cancel` 4.8 % own at c=64), and the socket
  writes: uvicorn's `send` to the client (21 % of the master's samples at c=1, 38 % of the agent's,
  whose client side is TLS in uvloop) and anyio's TLS `send` to the agent (14 %). A `--native`
  profile put most of that write time in C (uvloop's SSL writes, the kernel), but slowed the stack
  tenfold, so it was not weighed further. TLS handshakes (`do_handshake`, 5.9 % at c=64) come from the
  pool growing to 64 connections at the start of the window: the agent's port saw 0-4 connections
  closed per 5 s window (column *agent connections closed*), so TLS session reuse would save a
  handshake only when the pool grows and was not built. Keep-alive was left as it is: an idle pooled
  connection is reused for 2 s (`UPSTREAM_KEEPALIVE_S`, under the 5 s after which uvicorn and
  llama-server close idle ones, so the pool does not race them), and under load no connection sits
  idle that long, so a longer one would save no handshake here.
- **HTTP/2 between master and agent** (the spec's choice), a side experiment: `bench/h2_hop.py` in a
  throwaway virtualenv (h2 4.4, hypercorn 0.18, httpx 0.28), only the hop: an httpx client, a TLS
  server answering the bench's fixed completion. Two runs at load average ~8, µs of CPU per request
  (client / server): hypercorn over HTTP/2 with one connection 4,479 / 1,995 and 3,618 / 1,599 at
  c=1, 3,353 / 1,505 and 3,002 / 1,390 at c=64; the same hypercorn over HTTP/1.1 2,401 / 958 and
  2,289 / 1,047 at c=1; uvicorn over HTTP/1.1 (the agent today) 2,092 / 454 and 1,674 / 377 at c=1,
  5,739 / 827 and 4,724 / 632 at c=64 (that client is httpx's stock pool, whose c=64 cost the lean
  pool removed). HTTP/2 cost the client about twice HTTP/1.1 at c=1 (h2's framing and flow control
  are pure Python) and the server 3-4x what uvicorn costs; its only win, at c=64 over httpx's own
  pool, is the one the lean pool already took. Not adopted: no dependency to add.
- **The LiteLLM streamed row** read 0 events with 0 errors: 64 streams of 200 events took LiteLLM
  longer than the window, so wrk, which counts whole responses, finished none of them although
  LiteLLM relayed events all along. The streamed rows now count the bytes wrk read in the window
  over the bytes of one whole stream of that path (measured before the window), so a stream still
  arriving counts by its share. LiteLLM's row now has its events: 316 events/s against master +
  agent's 3,365 in one run (10.6x), 5.3x in another.
- **Idle memory** (`python -X importtime`, and each import's resident memory from
  `/proc/self/statm` in a fresh interpreter). The agent loaded huggingface_hub's API (16 MB with
  yaml, tqdm and filelock) and docker-py (7 MB with requests and urllib3) at start-up; both are now
  imported at first use (a download planned; the container driver connecting, which an agent with
  `docker.enabled` still does at start-up). Import-only memory of the agent 84 → 64 MB; the bench's
  idle agent 99 → 79 MB. The master imported jsonschema (2.3 MB) for the benchmark checks; now
  imported there: idle master 118 → 116 MB. What the agent keeps and needs: cryptography (16 MB: it
  checks its certificate and key at start-up), httpcore with `ssl` (9 MB), pydantic with the wire
  models of mirbad_protocol (15 MB), starlette and uvicorn (5 MB), and click and rich (5 MB), which
  httpx imports for its command line whenever they are installed.
- **Idle memory, second pass** (the bench's stack idle, VmRSS of the agent from /proc, two runs each,
  the same to 0.1 MB; and each import's memory in a fresh interpreter). httpx 0.28's `__init__`
  imports `httpx._main` (rich, pygments, click) with no lazy path, and falls back to a stub `main`
  when that import fails; the agent package now puts the import system's `None` sentinel at
  `sys.modules["httpx._main"]` before httpx is imported (`mirbad_agent/_no_httpx_cli.py`), so rich
  and pygments (69 modules) stay out: idle agent 77.6 → 74.3 MB (51.8 → 48.5 MB anonymous), 1.2 MB
  at import alone. click stays: uvicorn imports it for its own command line. What is left was
  weighed and kept: cryptography is 9 MB at import (its one Rust extension is 6.3 MB of it, so
  importing fewer of its submodules saves nothing) and the agent's whole PKI (`TlsCredentials`:
  the key-matches-certificate check, the fleet CA's certificates, the enrolment pin) is built on its
  objects; the stdlib `ssl` module can load and match a certificate and key but not read one's
  fields or key, so dropping it would mean a second PKI code path in mirbad_protocol. pydantic's
  model building is not where the memory is: every mirbad_protocol module but `_pki` (3.7 MB, the
  cryptography it imports) and `_wire`/`_definition` (4.6 MB, pydantic's first schemas) adds under
  0.5 MB, the master's admin views 0.1 MB, so lazy models would save under 1 MB. prometheus_client
  (0.6 MB) reads a Ready model's metrics. The rest is the interpreter, asyncio with ssl (8 MB),
  pydantic-core, anyio, starlette, uvicorn and httpcore, and three worker threads the agent uses.
  60 MB is out of reach without replacing cryptography in the agent's start-up; the master (115 MB)
  meets its 120 MB target and was left alone.
- **Several router worker processes** (SO_REUSEPORT): designed in docs/architecture.md ("Scaling the
  router out"), not built. On these 2 cores the full path is CPU-bound with every process on the
  same cores (90 % busy at c=64), so a second worker would take cycles from the agent and the upstream
  and add lease traffic: the ceiling, cores / CPU per request, does not move.
- **Sending through the client's transport** (`mirbad_router._forward._send`, master and agent):
  httpx's `AsyncClient.send` runs an auth flow, a redirect loop, the cookie jar (refusing every
  cookie) and a log call around the transport on every request; the proxy uses none of them. Measured
  alone against a bare uvicorn upstream (3,000 requests after a warm-up, client CPU from
  `time.process_time`, two rounds at load average ~10): 1,371 → 1,075 and 1,181 → 1,037 µs per
  request, 150-300 µs (12-22 %) of the client's cost. A bench run right after it (load average 10-12,
  the stack getting 17-22 % of the cores) could not show a change of that size: master 3,645 → 4,171
  µs per request at c=1 and 5,287 → 6,354 at c=64, with `direct` itself slower in the same run.
  Kept on the isolated measurement.
- **One task group per request** (`mirbad_router.UpstreamRelay`, master and agent): the send and
  the relay each started a task group (a task, a cancel scope, a `receive` call) to watch for the
  client leaving. Now `forward` only reads the body and returns the relay, which sends the request
  and relays the answer under one watch; an upstream failure before the headers is answered by the
  caller's `on_failure` response. Measured on one hop alone (`forward` in a bare Starlette app under
  uvicorn in front of the bench upstream, wrk, proxy CPU from /proc, old and new interleaved, four
  rounds at load average 3.4-5): proxy µs per request at c=1 2,146 / 2,282 / 2,424 / 2,093 → 1,669 /
  2,268 / 1,986 / 2,171 (median -6 %), at c=64 2,822 / 2,958 / 3,391 / 3,310 → 2,131 / 3,111 / 2,428 /
  3,060 (median -12 %); µs per streamed event 72-79 → 67-84 (unchanged: the watch is per request).
  The full bench, two A/B pairs at load average 0.5-7.6, moved by less than its noise (master c=1
  3,183 / 3,350 → 2,645 / 3,952 µs). Kept: no slower anywhere, and one watch is less code.
- **A leaner upstream client than httpx** (measured, the cheap part built). A prototype hop that
  hands an `httpcore.Request` straight to the same lean pool and relays `response.stream` under one
  task group, without httpx's Request and Response objects, against the hop as it is (both in a bare
  Starlette app under uvicorn in front of the bench upstream, wrk, proxy CPU from /proc, interleaved,
  three rounds at load average 6-8): µs per request at c=1 2,021 / 2,264 / 2,738 → 2,026 / 1,787 /
  1,828 (median -19 %), at c=64 2,447 / 2,853 / 3,007 → 2,353 / 2,199 / 2,030 (median -23 %), µs
  per streamed event 68-88 → 62-70 (about -10 %). Alone (`timeit`), building an `httpx.Request`
  took 137-183 µs against 37 µs for an `httpcore.Request`, and half of httpx's cost is parsing the
  URL string in Python. Built: the proxy keeps its parsed upstream URLs (`httpx.URL`, immutable; the
  512 most recent), which took the Request from 137 to 63 µs alone; a hop A/B (three rounds, load
  average ~8) could not show a change that small (c=1 2,057 → 1,942 µs median, c=64 2,594 → 2,655).
  The rest of the prototype's gain was built next (below).
- **httpcore on asyncio's own streams** (`mirbad_router.AsyncioNetworkBackend`, httpcore's
  documented `network_backend`, under the lean pool: master to agents and agent to models). A profile
  of the agent at c=64 showed httpcore's default backend (anyio streams) yielding to the loop before
  every read and write, entering a cancel scope for a timeout that is mostly unset, and, on the
  master's mutual TLS to the agent, running the TLS record layer in Python (anyio's `TLSStream` over
  `ssl.MemoryBIO`). The new backend reads from an asyncio `StreamReader` (no loop pass when data is
  already there), leaves TLS to the event loop (uvloop's, in C), sets a timeout only where one is
  asked for, and sends a request's head and body in one write (httpcore writes them apart; they are
  held until the answer is awaited, up to 64 KiB, so the upstream wakes once per request). Full bench,
  `--no-litellm`, old and new interleaved, three old and four new runs at load average 0.8-1.7:
  master + agent requests/s at c=64 318 / 289 / 257 → 371 / 359 / 391 / 380 (about +30 %), at c=1
  237 / 178 / 151 → 218 / 256 / 210 / 277; master µs per request at c=64 3,058 / 3,310 / 3,641 →
  2,578 / 2,606 / 2,411 / 2,509 (about -25 %); streamed events/s through master + agent 6,134 /
  7,086 / 7,983 → 10,403 / 10,104 / 10,101 / 9,664 (about +40 %), master µs per streamed event 146 /
  131 / 116 → 78 / 78 / 79 / 87 (about -35 %), agent 78 / 74 / 61 → 66 / 70 / 68 / 73 (its client
  to the model was already plain TCP). Built: the largest single gain on the hop so far, no new
  dependency (httpcore's extension point, asyncio's streams).
- **Sending through httpcore without httpx's Request and Response** (built after the network layer
  above): on the proxy's own transport (`mirbad_router.LeanTransport`, whose pool is public) the
  forwarding core hands its request to the pool as an `httpcore.Request` (with the Host and
  Content-Length httpx would write, from a cached parse of the URL) and relays httpcore's response
  stream, classifying httpcore's errors next to httpx's (connect, timeout, the stale keep-alive retry,
  a cut mid-body); any other transport still gets httpx's Request, and the forwarding tests run on
  both. The master's own calls to its agents (telemetry, start, stop) keep httpx. Full bench,
  three runs against the four of the network layer alone just before (load average 0.6-1.6): master
  µs per request at c=64 2,578 / 2,606 / 2,411 / 2,509 → 2,310 / 2,145 / 2,423, agent 1,998 / 2,171 /
  2,008 / 2,016 → 1,911 / 1,677 / 1,786 (about -8 to -10 %), master + agent requests/s at c=64 371 /
  359 / 391 / 380 → 410 / 439 / 393; c=1 and the streamed rows moved less than their noise.
- **aiohttp for the master's hop to its agents** (`forward_with="aiohttp"` on the master's node
  transports; `mirbad_router._aiohttp_sender`). With the network layer on the event loop's C paths,
  what was left on the client side was h11 writing and parsing every message in Python. Measured
  alone, a client sending the bench's completion to the same mutual-TLS upstream, client CPU per
  request from `time.process_time`, interleaved, two rounds: the forwarding core on httpcore (both
  changes above) 832 / 729 µs, aiohttp 359 / 375 µs; per streamed event 33.7 / 31.5 against 20.9 /
  20.0 µs. Over plain HTTP 718 / 1,106 against 403 / 331 µs. aiohttp costs 7.3 MB at import (in a
  fresh interpreter that has httpx, anyio and uvloop already), which the master already pays (NiceGUI
  runs on aiohttp) and an agent would not: so the master's `/v1` hop sends with aiohttp and the agent
  keeps httpcore, whose idle memory is a target of its own (an agent also carries only its node's
  traffic, the master the whole fleet's). aiohttp's errors are raised as httpcore's, so the
  forwarding core's classification and its stale keep-alive retry are one; the forwarding tests run
  on all three clients, and the node-identity check (on the TLS context) is tested on this path
  too. The master's other calls to its agents keep httpx on the same transport. Full bench,
  `--no-litellm`, three runs against the three just before it (load average 0.6-2.6): master µs per
  request at c=64 2,310 / 2,145 / 2,423 → 1,646 / 1,470 / 1,733 (about -28 %), master + agent
  requests/s at c=64 410 / 439 / 393 → 509 / 543 / 476 (about +22 %), master µs per streamed event
  81 / 61 / 79 → 49 / 57 / 52 (about -30 %); at c=1 the master's cost moved less than its noise
  (1,979 / 2,228 / 3,073 → 1,917 / 2,679 / 1,886). Against the start of this work (the first three
  runs of the network-layer A/B), master µs per request at c=64 went from 3,058-3,641 to
  1,470-1,733, master + agent requests/s at c=64 from 257-318 to 476-543 and streamed events/s from
  6,134-7,983 to 11,135-12,688.
"""
"""Markdown: one bullet per attempt."""
