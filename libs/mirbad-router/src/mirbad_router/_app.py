"""The OpenAI-compatible /v1 router as a Starlette app that any ASGI application can mount.

Each request passes the same gates in the same order, and the first that refuses answers in the OpenAI
error shape: maintenance (503 ``maintenance``, before anything else, so a running benchmark sees no
traffic: the whole router's, or a job's on the named model's node, for which the body is read first)
→ API key (401) → the path (400 for one that could leave the upstream's ``v1/``) → body and ``model``
field (413, 400) → the model (404, or 503 while it is not Ready unless it starts on request) →
the key's limits (429; a token limit reserves the request's bound until it ends, and the request's
length fields are fitted to it) → the upstream,
streamed both ways. A method no route takes is 405, in the same shape.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import _errors as errors
from ._body import RequestBody, parse_request_body
from ._bounds import fit_output_to, generates_output, request_token_bound, request_token_floor
from ._contracts import KeyGrant, KeyStore, MaintenanceGate, ModelResolver, Resolution, StatsSink
from ._exchange import ExchangeOutcome, ObservedResponse
from ._forward import MAX_BODY_BYTES, forward, join_upstream_url, read_body
from ._limits import LimitExceeded, RateLimiter, TokenReservation
from ._paths import checked_path_param
from ._prompt_scale import PromptScale
from ._relay import CLIENT_CLOSED_REQUEST
from ._startup import wait_until_ready
from ._usage import request_stream_usage
from .exceptions import InvalidRequestBodyError, RequestTooLargeError, UnsafeProxyPathError, UpstreamError

__all__ = ["create_router_app"]

_log = logging.getLogger(__name__)

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
# The client's key is for the router; the upstream gets its own credentials from the resolver.
_CLIENT_CREDENTIALS = frozenset({b"authorization"})


def create_router_app(
    resolver: ModelResolver,
    keys: KeyStore,
    maintenance: MaintenanceGate,
    stats: StatsSink,
    *,
    startup_timeout_s: float = 600.0,
    poll_interval_s: float = 1.0,
    limiter: RateLimiter | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    owned_by: str = "mirbad",
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Starlette:
    """Build the router; mount it at ``/v1`` (``Mount("/v1", app=create_router_app(...))``).

    It serves ``GET /models`` (the Ready models by served name, in the OpenAI list shape),
    ``GET /models/{name}``, and proxies every other path to the upstream of the model its body names.
    It has no life cycle of its own: upstream clients belong to the resolver.

    Args:
        resolver: finds models and their upstreams, and starts models on request.
        keys: checks bearer keys and records usage.
        maintenance: says when every request must be refused for a while.
        stats: receives the per-model counters (a :class:`~mirbad_router.RouterStats`, say).
        startup_timeout_s: how long a request waits for a model it started to become Ready.
        poll_interval_s: how often the resolver is asked about a starting model.
        limiter: the per-key request and token limits (a fresh one by default).
        now: the current time: the one clock that decides key expiry (and stamps a key's last use).
        owned_by: the ``owned_by`` of each listed model.
        max_body_bytes: the largest request body accepted (64 MiB; larger ones get 413).
    """
    router = _Router(
        resolver,
        keys,
        maintenance,
        stats,
        limiter or RateLimiter(),
        now,
        startup_timeout_s,
        poll_interval_s,
        max_body_bytes,
        owned_by,
    )
    return Starlette(
        routes=[
            Route("/models", router.list_models, methods=["GET"]),
            Route("/models/{name:path}", router.retrieve_model, methods=["GET"]),
            Route("/{path:path}", router.proxy, methods=_METHODS),
        ],
        # Starlette answers a method no route takes (TRACE, OPTIONS, ...) in plain text; OpenAI
        # clients read errors from JSON.
        exception_handlers={HTTPException: _http_error},
    )


class _Refused(Exception):  # noqa: N818 - a control-flow signal carrying the answer, not an error
    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass(frozen=True)
class _Router:
    resolver: ModelResolver
    keys: KeyStore
    maintenance: MaintenanceGate
    stats: StatsSink
    limiter: RateLimiter
    now: Callable[[], datetime]
    startup_timeout_s: float
    poll_interval_s: float
    max_body_bytes: int
    owned_by: str
    prompt_scale: PromptScale = field(default_factory=PromptScale)

    async def list_models(self, request: Request) -> Response:
        return await _answer(self._list_models(request, None))

    async def retrieve_model(self, request: Request) -> Response:
        return await _answer(self._list_models(request, request.path_params["name"]))

    async def proxy(self, request: Request) -> Response:
        return await _answer(self._proxy(request))

    async def _list_models(self, request: Request, only: str | None) -> Response:
        grant = await self._admit(request)
        models = [
            {"id": model.served_name, "object": "model", "created": model.created, "owned_by": self.owned_by}
            for model in await self.resolver.list_ready()
            if grant is None or grant.allows(model.served_name)
        ]
        if only is None:
            return JSONResponse({"object": "list", "data": models})
        found = [model for model in models if str(model["id"]).casefold() == only.casefold()]
        return JSONResponse(found[0]) if found else errors.model_not_found(only)

    async def _proxy(self, request: Request) -> Response:
        grant = await self._admit(request)
        early = await self._refuse_held_model(request)
        try:
            path = checked_path_param(request)
        except UnsafeProxyPathError as error:
            return errors.unsafe_path(error)
        try:
            body = await self._body(request, early)
        except ClientDisconnect:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        if body.model is None:
            return errors.missing_model()
        model = await self._ready_model(request, body.model, grant)
        if grant is None:
            return await self._forward(request, path, body, model, None)
        scale = self.prompt_scale.tokens_per_byte(model.served_name)
        bound = request_token_bound(path, body, model.context_tokens, tokens_per_byte=scale)
        floor = request_token_floor(path, body, tokens_per_byte=scale)
        admitted = self.limiter.reserve(grant, bound, least=floor)
        if isinstance(admitted, LimitExceeded):
            return errors.rate_limited(grant.name, admitted)
        try:
            return await self._forward(request, path, body, model, (grant, admitted), scale)
        except BaseException:
            admitted.release()  # nothing went upstream (settling twice counts once)
            raise

    async def _refuse_held_model(self, request: Request) -> RequestBody | Exception | None:
        """While a job holds some models, refuse a request for one of them (503 maintenance).

        Runs after the key check: the gate needs the model's name, so the body is read early, and a
        caller without a valid key must never make the router read a body (issue 31, item 2). What
        that early read found (the body, or why it cannot be read) is answered later, in the gates'
        usual order. With no job holding models the body is read at its usual place.
        """
        await self._refuse_in_maintenance(None)
        if not await self.maintenance.holds_models():
            return None
        try:
            body = await self._read_body(request)
        except (_Refused, ClientDisconnect) as problem:
            return problem
        if body.model is not None:
            await self._refuse_in_maintenance(body.model)
        return body

    async def _body(self, request: Request, early: RequestBody | Exception | None) -> RequestBody:
        if isinstance(early, RequestBody):
            return early
        if early is not None:
            raise early
        return await self._read_body(request)

    async def _refuse_in_maintenance(self, served_name: str | None) -> None:
        if served_name is None:
            notice = await self.maintenance.current()
        else:
            notice = await self.maintenance.notice_for(served_name)
        if notice is not None:
            raise _Refused(errors.maintenance(notice.message, notice.retry_after_s))

    async def _admit(self, request: Request) -> KeyGrant | None:
        await self._refuse_in_maintenance(None)
        token = _bearer(request.headers.get("authorization"))
        grant = await self.keys.authenticate(token) if token else None
        required = await self.keys.keys_required()
        # The one reading of the one clock that decides expiry: the store only reports the key's
        # state, so a key expires at the same instant whoever stores it.
        now = self.now()
        if grant is not None and grant.expired(now):
            if required:
                expired_at = grant.expires_at.isoformat() if grant.expires_at else "?"
                raise _Refused(errors.unauthorized(f"The API key '{grant.name}' expired at {expired_at}."))
            grant = None  # keys are optional: an expired one just brings no limits or usage
        if grant is None and required:
            reason = "No API key was sent" if token is None else "The API key is not valid"
            raise _Refused(errors.unauthorized(f"{reason}: send 'Authorization: Bearer <key>'."))
        if grant is not None:
            await self.keys.mark_used(grant, now)
        return grant

    async def _read_body(self, request: Request) -> RequestBody:
        try:
            content = await read_body(request, limit=self.max_body_bytes)
            return parse_request_body(request.headers.get("content-type"), content)
        except RequestTooLargeError as error:
            raise _Refused(errors.too_large(f"The request body is too large: {error}.")) from None
        except InvalidRequestBodyError as error:
            raise _Refused(
                errors.invalid_body(f"The request body cannot be read: {error}.", error.param)
            ) from None

    async def _ready_model(self, request: Request, name: str, grant: KeyGrant | None) -> Resolution:
        model = await self.resolver.resolve(name)
        if model is None or (grant is not None and not grant.allows(model.served_name)):
            raise _Refused(errors.model_not_found(name))
        if model.ready:
            return model
        if not model.auto_start_on_request:
            raise _Refused(errors.not_ready(model.served_name, model.state, model.error))
        outcome = await wait_until_ready(
            self.resolver, model, request.receive, self.startup_timeout_s, self.poll_interval_s
        )
        if isinstance(outcome, Response):
            raise _Refused(outcome)
        return outcome

    async def _forward(
        self,
        request: Request,
        path: str,
        body: RequestBody,
        model: Resolution,
        admission: tuple[KeyGrant, TokenReservation] | None,
        tokens_per_byte: float = 0.25,
    ) -> Response:
        assert model.upstream is not None  # model.ready said so
        grant, reservation = admission or (None, None)
        fitted = None
        if reservation is not None and reservation.tokens:
            # The model server must not generate past the reservation, whichever length field it obeys.
            fitted = fit_output_to(path, body, reservation.tokens, tokens_per_byte=tokens_per_byte)
        changed = fitted is not None
        outgoing = fitted if fitted is not None else body.json
        injected = False
        if grant is not None and outgoing is not None:
            with_usage = request_stream_usage(path, outgoing)
            if with_usage is not None:
                outgoing, injected, changed = with_usage, True, True
        # As UTF-8 and compact: \u-escaped text could double a body past the next hop's size limit (the
        # body holds no lone surrogate, so every string encodes).
        content = _encoded(outgoing) if changed and outgoing is not None else body.content
        # Only ever below the upstream's v1/: the path was checked, and the join checks it again.
        url = join_upstream_url(model.upstream.base_url, f"v1/{path}", request.url.query)
        # Identity encoding keeps the body readable for usage; the hop is a LAN or loopback.
        headers = {"accept-encoding": "identity"} | {k.lower(): v for k, v in model.upstream.headers.items()}
        served_name = model.served_name

        async def failed(error: UpstreamError) -> Response:
            # The client's message leaves the address out; the operator's log keeps it. The stats and
            # the reservation are settled by the report, as for any exchange that did not complete.
            _log.warning("forwarding a request for %s failed: %s", served_name, error)
            return errors.upstream_failed(served_name, error)

        self.stats.begin(model.served_name)
        try:
            relay = await forward(
                _without_credentials(request),
                url,
                model.upstream.client,
                on_failure=failed,
                headers=headers,
                body=content,
            )
        except BaseException:
            self._failed_before_answer(model.served_name, reservation)
            raise
        report = partial(
            self._report, model.served_name, len(body.content), generates_output(path), grant, reservation
        )
        return ObservedResponse(relay, report, read_usage=grant is not None, drop_usage_only=injected)

    def _failed_before_answer(self, served_name: str, reservation: TokenReservation | None) -> None:
        self.stats.end(served_name, failed=True)
        if reservation is not None:
            reservation.release()

    async def _report(
        self,
        served_name: str,
        body_bytes: int,
        generates: bool,
        grant: KeyGrant | None,
        reservation: TokenReservation | None,
        outcome: ExchangeOutcome,
    ) -> None:
        self.stats.end(served_name, failed=outcome.failed)
        if reservation is not None:
            reservation.settle(_tokens_to_charge(outcome, reservation, generates=generates))
        if grant is None or outcome.usage is None:
            return
        self.prompt_scale.learn(served_name, body_bytes, outcome.usage.prompt_tokens)
        try:
            await self.keys.record_usage(
                grant, served_name, outcome.usage.prompt_tokens, outcome.usage.completion_tokens
            )
        except Exception:
            # The answer has been delivered; losing one usage record must not turn it into an error.
            _log.exception("could not record the usage of API key %s on %s", grant.key_id, served_name)


def _encoded(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _tokens_to_charge(outcome: ExchangeOutcome, reservation: TokenReservation, *, generates: bool) -> int:
    # What the response reported stays in the window. Without a report, an exchange that ended whole
    # with an error (a refusal, an upstream that never answered) generated nothing. One cut short (the
    # client left, or the upstream broke off) may have generated its whole bound, and the usage chunk
    # that would say how much never came; so may a generation answered in full without the usage every
    # runtime we drive reports: the reservation stays charged, so no way of ending passes the limit.
    if outcome.usage is not None:
        return outcome.usage.total_tokens
    if not outcome.completed or (generates and not outcome.failed):
        return reservation.tokens
    return 0


async def _answer(handling: Awaitable[Response]) -> Response:
    try:
        return await handling
    except _Refused as refused:
        return refused.response


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # registered for HTTPException only
    return errors.routing_refused(request.method, request.url.path, exc.status_code, exc.headers)


def _bearer(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _without_credentials(request: Request) -> Request:
    headers = [(name, value) for name, value in request.scope["headers"] if name not in _CLIENT_CREDENTIALS]
    return Request({**request.scope, "headers": headers}, request.receive)
