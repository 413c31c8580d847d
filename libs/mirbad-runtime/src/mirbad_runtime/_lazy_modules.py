"""Modules an idle agent does not need, imported on their first use.

docker-py (with requests and urllib3) is ~7 MB of an agent's memory, and an agent whose container
driver is off never calls it. The modules that talk to dockerd name ``docker`` as usual (the type
checker sees the real module); at run time it is a :class:`LazyModule`, which imports docker-py when
an attribute is first read: a client is made (``docker.from_env``) or an error is matched
(``except docker.errors.NotFound``, evaluated only when an exception is on its way).
"""

from __future__ import annotations

import importlib
from typing import Any

# Internal to the modules that talk to dockerd.
__all__: list[str] = []


class LazyModule:
    """Stands for the module ``name`` and imports it when one of its attributes is first read.

    Safe from any thread: the import system's lock serializes the first import.

    Args:
        name: the module's dotted name.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


docker = LazyModule("docker")
"""docker-py, imported on first use."""

requests = LazyModule("requests")
"""requests (docker-py's HTTP session: an image pull reads its stream), imported on first use."""

urllib3 = LazyModule("urllib3")
"""urllib3 (a pull's read timeout is one of its exceptions), imported on first use."""
