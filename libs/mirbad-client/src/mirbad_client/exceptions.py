"""The exceptions of mirbad_client: one class per error code of the master's admin API.

The tree of its exceptions, each under its first base here (one with more bases names them all)::

    MirbadClientError(MirbadError)
    ├── AdminConnectionError
    ├── ModelFailedError
    └── AdminApiError
        ├── AdminAuthError
        ├── InvalidRequestError(AdminApiError, InvalidFieldError)
        ├── ServedNameTakenError(AdminApiError, InvalidFieldError)
        ├── NoSuchModelError
        ├── NoSuchNodeError
        ├── NoSuchApiKeyError
        ├── NodeExistsError
        └── FleetNodeError
            ├── NodeOfflineError
            ├── NodeTimedOutError
            ├── NodeBadAnswerError
            ├── LogFollowError
            └── NodeRefusedError
                ├── LaunchSpecRejectedError
                └── StartRefusedError
                    ├── AdmissionRefusedError
                    └── StartBlockedError

Every refusal is an :class:`AdminApiError` (its HTTP status, code, message and the ids it names), so
``except AdminApiError`` catches them all; its subclasses say what happened. Which class each code of
:class:`mirbad_protocol.admin.AdminErrorCode` becomes:

=====================  =====  ==================================================
code                   HTTP   raised as
=====================  =====  ==================================================
invalid_request        400    :class:`InvalidRequestError` (an ``InvalidFieldError``)
unauthorized           401    :class:`AdminAuthError`
too_many_attempts      429    :class:`AdminAuthError` with ``retry_after_s``
model_not_found        404    :class:`NoSuchModelError`
node_not_found         404    :class:`NoSuchNodeError`
key_not_found          404    :class:`NoSuchApiKeyError`
served_name_taken      409    :class:`ServedNameTakenError` (an ``InvalidFieldError``)
node_exists            409    :class:`NodeExistsError`
node_conflict          409    :class:`StartRefusedError`
admission_refused      409    :class:`AdmissionRefusedError` (retry with ``force=True``)
start_conflict         409    :class:`StartBlockedError`
start_lane_busy        409    :class:`StartBlockedError`
spec_rejected          422    :class:`LaunchSpecRejectedError`
node_refused           502    :class:`NodeRefusedError`
bad_gateway            502    :class:`NodeBadAnswerError`
log_stream_failed      502    :class:`LogFollowError`
node_unreachable       503    :class:`NodeOfflineError`
node_timeout           504    :class:`NodeTimedOutError`
any other code         any    :class:`AdminApiError` (``model_exists``, ``local_node`` ...)
=====================  =====  ==================================================

An answer without the envelope is an :class:`AdminApiError` with ``code`` ``None``; a master that cannot
be reached is an :class:`AdminConnectionError`.
"""

from __future__ import annotations

from mirbad_protocol import InvalidFieldError, MirbadError

__all__ = [
    "AdminApiError",
    "AdminAuthError",
    "AdminConnectionError",
    "AdmissionRefusedError",
    "FleetNodeError",
    "InvalidRequestError",
    "LaunchSpecRejectedError",
    "LogFollowError",
    "MirbadClientError",
    "ModelFailedError",
    "NoSuchApiKeyError",
    "NoSuchModelError",
    "NoSuchNodeError",
    "NodeBadAnswerError",
    "NodeExistsError",
    "NodeOfflineError",
    "NodeRefusedError",
    "NodeTimedOutError",
    "ServedNameTakenError",
    "StartBlockedError",
    "StartRefusedError",
]


class MirbadClientError(MirbadError):
    """Root of the exceptions of :mod:`mirbad_client`."""


class AdminConnectionError(MirbadClientError):
    """The master's admin API could not be reached, or did not answer in time.

    Attributes:
        base_url: the master's URL the client was given.
    """

    def __init__(self, base_url: str, message: str) -> None:
        super().__init__(message)
        self.base_url = base_url


class ModelFailedError(MirbadClientError):
    """A model that was awaited until Ready went Failed instead.

    Attributes:
        model_id: the model.
        state: the state it ended in (``Failed``).
        error: what its status reported, if anything (often the tail of its log).
    """

    def __init__(self, model_id: str, state: str, error: str | None) -> None:
        detail = f": {error}" if error else ""
        super().__init__(f"model {model_id!r} is {state} instead of Ready{detail}")
        self.model_id = model_id
        self.state = state
        self.error = error


class AdminApiError(MirbadClientError):
    """A refusal of the master's admin API; its subclasses name the refusals a caller tells apart.

    This class itself stands for the codes without a class of their own (an id that exists already,
    the local node that cannot be removed, a server error, a code of a newer master) and for an answer
    outside the contract.

    Attributes:
        status_code: the HTTP status of the answer.
        code: the error envelope's ``code``, or ``None`` when the answer had no envelope.
        message: what went wrong, for people.
        field: the offending field, when the envelope names one.
        node_id: the node the refusal is about, when the envelope names one.
        model_id: the model the refusal is about, when the envelope names one.
    """

    def __init__(
        self,
        status_code: int,
        code: str | None,
        message: str,
        field: str | None = None,
        *,
        node_id: str | None = None,
        model_id: str | None = None,
    ) -> None:
        # Not super(): in the classes that are also an InvalidFieldError, the next __init__ in line is
        # that one's, which takes other arguments; the exception's text is the message either way.
        Exception.__init__(self, message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.field = field
        self.node_id = node_id
        self.model_id = model_id


class AdminAuthError(AdminApiError):
    """The admin API refused the administrator password (HTTP 401), or refuses this client for now (429).

    Attributes:
        retry_after_s: after too many wrong passwords, the seconds until the client may try again;
            ``None`` for a plain refusal.
    """

    def __init__(
        self,
        status_code: int,
        code: str | None,
        message: str,
        retry_after_s: int | None = None,
        *,
        field: str | None = None,
        node_id: str | None = None,
        model_id: str | None = None,
    ) -> None:
        super().__init__(status_code, code, message, field, node_id=node_id, model_id=model_id)
        self.retry_after_s = retry_after_s


class InvalidRequestError(AdminApiError, InvalidFieldError):
    """A request the admin API refused as invalid (400); ``field`` names the field (wire spelling).

    Attributes:
        reason: what is wrong with the field, without its name.
    """

    field: str

    def __init__(
        self,
        status_code: int,
        code: str | None,
        message: str,
        field: str,
        *,
        node_id: str | None = None,
        model_id: str | None = None,
    ) -> None:
        super().__init__(status_code, code, message, field, node_id=node_id, model_id=model_id)
        self.field = field
        self.reason = message.removeprefix(f"{field}: ")


class ServedNameTakenError(AdminApiError, InvalidFieldError):
    """Another model already serves under the requested name (409, ``field`` is ``servedName``).

    Attributes:
        served_name: the name asked for.
        owner_id: the model already serving it.
        reason: the message without the field's name.
    """

    field: str

    def __init__(
        self,
        status_code: int,
        code: str | None,
        message: str,
        served_name: str,
        owner_id: str,
        *,
        node_id: str | None = None,
    ) -> None:
        super().__init__(status_code, code, message, "servedName", node_id=node_id, model_id=owner_id or None)
        self.field = "servedName"
        self.reason = message.removeprefix("servedName: ")
        self.served_name = served_name
        self.owner_id = owner_id


class NoSuchModelError(AdminApiError):
    """No model with that id is registered, or its node has no instance of it (404).

    ``model_id`` is always set (the request's model when the envelope names none).
    """

    model_id: str


class NoSuchNodeError(AdminApiError):
    """No node with that id is registered (404); ``node_id`` is always set."""

    node_id: str


class NoSuchApiKeyError(AdminApiError):
    """No API key has that id (404).

    Attributes:
        key_id: the key asked for.
    """

    def __init__(
        self,
        status_code: int,
        code: str | None,
        message: str,
        key_id: str,
        *,
        field: str | None = None,
        node_id: str | None = None,
        model_id: str | None = None,
    ) -> None:
        super().__init__(status_code, code, message, field, node_id=node_id, model_id=model_id)
        self.key_id = key_id


class NodeExistsError(AdminApiError):
    """A node with that id, or another node at the same agent URL, is registered already (409)."""


class FleetNodeError(AdminApiError):
    """The master could not do it because of one node of the fleet; ``node_id`` names it."""


class NodeOfflineError(FleetNodeError):
    """The node's agent could not be reached (503): connection refused, no route, TLS refused."""


class NodeTimedOutError(FleetNodeError):
    """The node's agent accepted the request but did not answer in time (504)."""


class NodeBadAnswerError(FleetNodeError):
    """The node's agent answered outside the agent contract (502)."""


class LogFollowError(FleetNodeError):
    """The model's log could not be read any further (502, or the ``error`` event of a followed log)."""


class NodeRefusedError(FleetNodeError):
    """The node refused the request (502 unless a subclass says otherwise).

    ``message`` is the node's own words; ``str()`` of the exception is the master's whole message,
    which starts with ``node '<id>': ``.
    """

    def __init__(
        self,
        status_code: int,
        code: str | None,
        message: str,
        field: str | None = None,
        *,
        node_id: str | None = None,
        model_id: str | None = None,
    ) -> None:
        super().__init__(status_code, code, message, field, node_id=node_id, model_id=model_id)
        if node_id is not None:
            self.message = message.removeprefix(f"node {node_id!r}: ")


class LaunchSpecRejectedError(NodeRefusedError):
    """The node cannot run this launch at all (422): no such runtime, executable or model file."""


class StartRefusedError(NodeRefusedError):
    """The node refused a start for now (409); the message says why."""


class AdmissionRefusedError(StartRefusedError):
    """The model's memory budget does not fit on its node (409); starting with ``force=True`` overrides it."""


class StartBlockedError(StartRefusedError):
    """The node is busy starting another model, or runs this one under another runtime (409)."""
