r"""The digest every downloaded file is checked against, hashed as its bytes stream in.

A source announces one per file: Ollama blobs and Hugging Face LFS files a sha256 of the content, the
other Hugging Face files (``config.json``, a small GGUF kept in git) their git blob id, the sha1 of
``blob {size}\0`` and the content. Both fold in chunk by chunk, so a resumed file re-reads only its
prefix once and verification costs no second pass.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final

__all__ = ["FileDigest", "check_git_sha1", "check_sha256"]

_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_GIT_SHA1: Final = re.compile(r"[0-9a-f]{40}")


def check_sha256(value: object) -> str | None:
    """``value`` if it is a sha256 in lower-case hex (64 digits, nothing around them), else None."""
    return value if isinstance(value, str) and _SHA256.fullmatch(value) else None


def check_git_sha1(value: object) -> str | None:
    """``value`` if it is a git blob id in lower-case hex (40 digits, nothing around them), else None."""
    return value if isinstance(value, str) and _GIT_SHA1.fullmatch(value) else None


@dataclass
class FileDigest:
    """The running digest of one file of ``size`` bytes, against ``sha256`` or else ``git_sha1``.

    Raises:
        ValueError: neither digest is given (a file nobody can verify is never downloaded).
    """

    size: int
    sha256: str | None = None
    git_sha1: str | None = None

    def __post_init__(self) -> None:
        if self.sha256 is None and self.git_sha1 is None:
            raise ValueError("a file needs a sha256 or a git blob id to be verified")
        if self.sha256 is not None:
            self._hash = hashlib.sha256()
        else:
            # The git object header names the whole size, which the plan knows before the first byte.
            self._hash = hashlib.sha1(f"blob {self.size}\0".encode(), usedforsecurity=False)

    def update(self, chunk: bytes) -> None:
        """Fold in the next ``chunk`` of the file."""
        self._hash.update(chunk)

    def mismatch(self) -> str | None:
        """Why the bytes folded in are not the announced file; None when they are."""
        got = self._hash.hexdigest()
        if self.sha256 is not None:
            return None if got == self.sha256 else f"sha256 {got} does not match the announced {self.sha256}"
        return (
            None
            if got == self.git_sha1
            else f"git blob id {got} does not match the announced {self.git_sha1}"
        )
