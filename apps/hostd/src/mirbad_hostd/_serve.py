"""Serving hostd: uvicorn on a unix socket hostd binds itself, stopped by SIGTERM or SIGINT.

hostd binds the socket rather than passing ``uds=`` to uvicorn, because uvicorn makes a new socket
0666; here it is 0660 before ``listen`` and its folder root:``socket_group`` 0750, so only root and
that group (docker) can ever connect.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import signal
import socket
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import uvicorn

from ._app import create_app
from ._backup_mount import BackupMount
from ._deny import load_deny_list
from ._gpu import GpuProcesses
from ._services import HostServices
from ._settings import HostdSettings
from ._systemctl import Systemctl
from ._whitelist import WhitelistStore, read_seed
from .exceptions import HostdStartupError

__all__ = ["bind_socket", "compose", "run_hostd"]

logger = logging.getLogger(__name__)

_FOLDER_MODE = 0o750
_SOCKET_MODE = 0o660


def compose(settings: HostdSettings) -> tuple[HostServices, BackupMount]:
    """Load the deny list, the seed and the whitelist (refusing insecure or malformed files).

    Raises:
        HostdStartupError: a file is insecure or malformed.
    """
    strict = settings.require_root_owner
    deny = load_deny_list(settings.deny_file, require_root_owner=strict)
    seed = read_seed(settings.config_file, require_root_owner=strict)
    store = WhitelistStore.open(settings.whitelist_file, seed, deny, require_root_owner=strict)
    systemctl = Systemctl(
        settings.systemctl,
        deny,
        query_timeout_s=settings.query_timeout_s,
        action_timeout_s=settings.action_timeout_s,
    )
    gpus = GpuProcesses(settings.nvidia_smi, settings.proc_root, timeout_s=settings.gpu_timeout_s)
    logger.info(
        "whitelist %s: %d services; discoverUsers %s",
        settings.whitelist_file,
        len(store.entries()),
        list(seed.discover_users),
    )
    services = HostServices(store, deny, systemctl, gpus, seed.discover_users, show_batch=settings.show_batch)
    return services, BackupMount(settings, systemctl)


def bind_socket(path: Path, group: str) -> socket.socket:
    """Make the socket's folder root:``group`` 0750 and bind the socket 0660 to ``group``.

    Raises:
        HostdStartupError: no such group, or the folder or socket cannot be made.
    """
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise HostdStartupError(f"socket_group: no group {group!r} on this machine") from None
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, 0 if os.geteuid() == 0 else -1, gid)
        os.chmod(folder, _FOLDER_MODE)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()  # a previous hostd's socket; anything else at the path is an error below
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        raise HostdStartupError(f"cannot prepare {folder}: {exc}") from None
    try:
        listener.bind(str(path))
        os.chmod(path, _SOCKET_MODE)
        os.chown(path, -1, gid)
        listener.listen(64)
    except OSError as exc:
        listener.close()
        raise HostdStartupError(f"cannot listen on {path}: {exc.strerror or exc}") from None
    return listener


async def run_hostd(settings: HostdSettings) -> None:
    """Compose hostd and serve it on its socket until SIGTERM or SIGINT."""
    # The trusted files are read once, off the event loop like every other blocking call.
    services, backup_mount = await anyio.to_thread.run_sync(compose, settings)
    # The signal handlers come first: a stop that arrives as soon as the socket exists is graceful.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        listener = bind_socket(settings.socket_path, settings.socket_group)
        with listener:
            config = uvicorn.Config(
                create_app(services, backup_mount),
                lifespan="off",
                log_config=None,
                access_log=False,
                server_header=False,
            )
            server = _Server(config)
            logger.info("hostd listening on %s", settings.socket_path)
            async with anyio.create_task_group() as group:
                group.start_soon(_stop_on_signal, server, signals)
                await server.serve(sockets=[listener])
                group.cancel_scope.cancel()
    with contextlib.suppress(OSError):
        settings.socket_path.unlink()


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: hostd handles them with anyio."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _stop_on_signal(server: uvicorn.Server, signals: AsyncIterator[int]) -> None:
    async for received in signals:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True
        logger.info("%s: stopping", signal.Signals(received).name)
