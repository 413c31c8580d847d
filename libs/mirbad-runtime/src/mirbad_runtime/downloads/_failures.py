"""What a download job's ``error`` says about a failure nobody foresaw, without the node's paths.

The job's error travels to the master, the portal and the audit of whoever looks at the node: it says
what failed (the system's reason, the file as a path inside its model root) but never the node's
absolute paths (issue 31 follow-up). The full exception, paths and all, goes to the agent's own log.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["unexpected_failure"]

# An absolute POSIX path (or a Windows drive path) inside a message: a slash or drive after a start,
# a blank, a quote or an opening bracket, up to the next blank or quote.
_ABSOLUTE: Final = re.compile(r"(?<![\w.~-])(?:[A-Za-z]:[\\/]|/)[^\s'\"]*")


def unexpected_failure(exc: BaseException, roots: Sequence[Path]) -> str:
    """``"unexpected failure: …"`` for ``exc``, naming files relative to their model root (``roots``)."""
    if isinstance(exc, OSError) and (exc.strerror or exc.filename is not None):
        reason = exc.strerror or type(exc).__name__
        code = errno.errorcode.get(exc.errno, "") if isinstance(exc.errno, int) else ""
        message = f"unexpected failure: {reason}" + (f" ({code})" if code else "")
        names = [_shown(name, roots) for name in (exc.filename, exc.filename2) if name is not None]
        return message + (f" on {' and '.join(names)}" if names else "")
    return f"unexpected failure: {type(exc).__name__}: {_without_paths(str(exc), roots)}"


def _shown(name: object, roots: Sequence[Path]) -> str:
    """A file named by an OSError, as ``model root N: relative/path`` or just its last part."""
    raw = os.fsdecode(name) if isinstance(name, str | bytes | os.PathLike) else str(name)
    return _without_paths(raw, roots) if os.path.isabs(raw) else raw


def _without_paths(text: str, roots: Sequence[Path]) -> str:
    # The longest root first, so a root inside another is named as itself.
    for index, root in sorted(enumerate(roots), key=lambda pair: -len(str(pair[1]))):
        label = f"model root {index}"

        def relative(match: re.Match[str], label: str = label) -> str:
            return f"{label}: {match['rest'] or '.'}"

        text = re.sub(re.escape(str(root)) + r"(?:[\\/](?P<rest>[^\s'\"]*))?", relative, text)
    # Any other absolute path (a cache, a temporary folder): only its last part is said.
    return _ABSOLUTE.sub(lambda match: f".../{Path(match[0]).name}", text)
