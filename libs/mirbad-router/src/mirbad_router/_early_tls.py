"""Handing ``start_tls`` the bytes a connection received before it was called.

uvloop starts reading a new connection right after ``connection_made``, so a pause there is lost and
the client's ClientHello may reach the plain protocol before the guard has called ``start_tls``. Those
bytes must reach the TLS protocol first, ahead of anything read after them.
"""

from __future__ import annotations

# The loops' transports and protocols are asyncio's (uvloop implements the same interfaces).
import asyncio  # noqa: TID251

__all__: list[str] = []  # the connection guard's own helper, no public name


def hand_early_bytes_to_tls(transport: asyncio.Transport, early: list[bytes]) -> None:
    """Give ``early`` to the TLS protocol ``start_tls`` just put on ``transport``, before anything newer.

    Call it with ``loop.call_soon`` just before ``start_tls``: it then runs before the TLS protocol's
    ``connection_made`` and the resumed reading that ``start_tls`` schedules.
    """
    if transport.is_closing():
        return
    held = _Held(transport, transport.get_protocol(), early)
    transport.set_protocol(held)
    asyncio.get_running_loop().call_soon(held.hand_over)


class _Held(asyncio.Protocol):
    """Holds what arrives while the bytes read before ``start_tls`` are handed to its TLS protocol.

    ``start_tls`` schedules its protocol's ``connection_made`` and the resumed reading in one turn of
    the loop; :func:`hand_early_bytes_to_tls` runs just before them and the hand-over one turn later,
    so the TLS protocol sees the early bytes first, then whatever was read meanwhile, in order.
    """

    def __init__(self, transport: asyncio.Transport, tls: asyncio.BaseProtocol, early: list[bytes]) -> None:
        self._transport = transport
        self._tls = tls
        self._pending = list(early)
        self._lost: tuple[Exception | None] | None = None

    def data_received(self, data: bytes) -> None:
        self._pending.append(data)

    def eof_received(self) -> bool | None:
        self._pending.append(b"")
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = (exc,)

    def hand_over(self) -> None:
        if self._lost is None:
            self._transport.set_protocol(self._tls)
        for data in self._pending:
            if data:
                _feed(self._tls, data)
            else:
                self._tls.eof_received()  # type: ignore[attr-defined]
        if self._lost is not None:
            self._tls.connection_lost(self._lost[0])


def _feed(protocol: asyncio.BaseProtocol, data: bytes) -> None:
    if isinstance(protocol, asyncio.Protocol):
        protocol.data_received(data)
        return
    view = memoryview(data)
    while view:
        buffer = protocol.get_buffer(len(view))  # type: ignore[attr-defined]
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        protocol.buffer_updated(size)  # type: ignore[attr-defined]
        view = view[size:]
