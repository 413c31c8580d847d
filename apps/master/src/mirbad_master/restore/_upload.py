"""An uploaded backup as the restore routes take it: the JSON document, or a multipart upload.

The body is read here, not by FastAPI or the master's body cap, so that a file over 64 MiB
(:data:`~mirbad_protocol.restore.MAX_BACKUP_BYTES`) is refused with 422 naming why, and no more than
that is ever held in memory. The passphrase comes as the ``passphrase`` field of a multipart upload or
in the :data:`~mirbad_protocol.restore.BACKUP_PASSPHRASE_HEADER` header (a JSON body is the document
itself, so it cannot carry one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.types import Message

from mirbad_orchestration.exceptions import BackupFormatError
from mirbad_protocol.restore import BACKUP_PASSPHRASE_HEADER, MAX_BACKUP_BYTES

__all__ = ["FILE_FIELD", "BackupUpload", "read_backup_upload"]

FILE_FIELD: Final = "file"
"""The multipart field holding the backup file."""
_FORM_SLACK: Final = 64 * 1024  # a multipart body's boundaries, headers and passphrase field
_FIELDS: Final = (FILE_FIELD, "passphrase")


@dataclass(frozen=True)
class BackupUpload:
    """A backup's bytes and the passphrase sent with them.

    Attributes:
        raw: the backup document's bytes.
        passphrase: its passphrase, when one was sent (never logged nor echoed).
    """

    raw: bytes
    passphrase: str | None = field(default=None, repr=False)


async def read_backup_upload(request: Request) -> BackupUpload:
    """Read the request's backup, as a JSON body or a multipart upload.

    Raises:
        BackupFormatError: the upload is over 64 MiB, empty, has no ``file`` field, or carries a field
            a restore does not take (each naming the field).
    """
    multipart = request.headers.get("content-type", "").lower().startswith("multipart/form-data")
    where = FILE_FIELD if multipart else "(document)"
    body = await _read_capped(request, MAX_BACKUP_BYTES + (_FORM_SLACK if multipart else 0), where)
    header = request.headers.get(BACKUP_PASSPHRASE_HEADER) or None
    if not multipart:
        if not body:
            raise BackupFormatError(where, "the request has no body: send the backup document")
        return BackupUpload(body, header)
    raw, passphrase = await _read_form(request, body)
    return BackupUpload(raw, passphrase or header)


async def _read_capped(request: Request, limit: int, where: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BackupFormatError(where, f"the upload is over {MAX_BACKUP_BYTES // (1024 * 1024)} MiB")
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_form(request: Request, body: bytes) -> tuple[bytes, str | None]:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(max_files=1, max_fields=len(_FIELDS))
    except (HTTPException, MultiPartException) as exc:  # Starlette's answer to a malformed upload
        reason = exc.detail if isinstance(exc, HTTPException) else exc.message
        raise BackupFormatError(FILE_FIELD, f"not a multipart upload ({reason})") from None
    try:
        unknown = [name for name in form if name not in _FIELDS]
        if unknown:
            raise BackupFormatError(unknown[0], f"a restore takes only the fields {', '.join(_FIELDS)}")
        upload = form.get(FILE_FIELD)
        if not isinstance(upload, UploadFile):
            raise BackupFormatError(FILE_FIELD, "no backup file in the upload")
        raw = await upload.read(MAX_BACKUP_BYTES + 1)
        if len(raw) > MAX_BACKUP_BYTES:
            raise BackupFormatError(FILE_FIELD, f"the upload is over {MAX_BACKUP_BYTES // (1024 * 1024)} MiB")
        passphrase = form.get("passphrase")
        return raw, passphrase if isinstance(passphrase, str) and passphrase else None
    finally:
        await form.close()
