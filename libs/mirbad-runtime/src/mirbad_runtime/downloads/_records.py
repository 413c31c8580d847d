"""The files a download job keeps in the state folder: its record and, while it runs, its token.

``{id}.json`` holds the job as the wire shows it, the request without its token, and every file's URL,
size and digest, so a restarted agent resumes without asking the source again. It is replaced
atomically on every change of state. ``{id}.token`` (owner-only, as the instance keys are) holds a
Hugging Face token until the job completes or is removed. These methods block: run them in a thread.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mirbad_protocol.downloads import DownloadJob
from mirbad_protocol.support import remove_stale_temp_files, write_bytes_atomic, write_json_atomic
from mirbad_runtime.exceptions import DownloadError

from ._sources import DownloadPlan, PlannedFile

__all__ = ["JobRecord", "JobRecords"]

logger = logging.getLogger(__name__)

_FOLDER_MODE: Final = 0o700


@dataclass(frozen=True)
class JobRecord:
    """What a job's record holds: its view, its request (without the token) and its plan."""

    view: DownloadJob
    request: dict[str, Any]
    plan: DownloadPlan


class JobRecords:
    """The job records and tokens under ``folder`` (the agent's ``{state_dir}/downloads``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, record: JobRecord) -> None:
        """Replace the record of ``record.view.id`` atomically."""
        files = [
            {"path": f.path, "url": f.url, "size": f.size, "sha256": f.sha256, "git_sha1": f.git_sha1}
            for f in record.plan.files
        ]
        content = {"job": record.view.to_wire(), "request": record.request, "files": files}
        self._folder()
        write_json_atomic(self.folder / f"{record.view.id}.json", content)

    def load(self, root_count: int) -> list[JobRecord]:
        """Every readable record whose model root still exists (the others are logged and skipped)."""
        if not self.folder.is_dir():
            return []
        remove_stale_temp_files(self.folder)
        loaded = []
        for path in sorted(self.folder.glob("dl-*.json")):
            try:
                content = json.loads(path.read_bytes())
                view = DownloadJob.from_wire(content["job"])
                files = tuple(PlannedFile(**item) for item in content["files"])
            except (OSError, ValueError, KeyError, TypeError, DownloadError) as exc:
                logger.warning("skipping the unreadable download record %s: %s", path, exc)
                continue
            if view.root >= root_count:
                logger.warning("skipping download %s: its model root %d is gone", view.id, view.root)
                continue
            plan = DownloadPlan(revision=view.revision or "", files=files)
            loaded.append(JobRecord(view, content.get("request", {}), plan))
        return loaded

    def save_token(self, download_id: str, token: str) -> None:
        """Keep ``token`` for the job, owner-only."""
        self._folder()
        write_bytes_atomic(self._token(download_id), token.encode())

    def auth_headers(self, download_id: str) -> dict[str, str]:
        """The Authorization header of the job's token; none without one."""
        path = self._token(download_id)
        return {"Authorization": f"Bearer {path.read_text().strip()}"} if path.is_file() else {}

    def forget_token(self, download_id: str) -> None:
        """Delete the job's token (nothing happens without one)."""
        self._token(download_id).unlink(missing_ok=True)

    def delete(self, download_id: str) -> None:
        """Delete the job's record and token."""
        (self.folder / f"{download_id}.json").unlink(missing_ok=True)
        self.forget_token(download_id)

    def _token(self, download_id: str) -> Path:
        return self.folder / f"{download_id}.token"

    def _folder(self) -> None:
        self.folder.mkdir(mode=_FOLDER_MODE, parents=True, exist_ok=True)
