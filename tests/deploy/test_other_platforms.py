"""The macOS and Windows installers, checked as far as a Linux machine can.

The LaunchDaemon plist is parsed with plistlib and its program arguments with the agent's own parser;
the macOS script gets ``bash -n`` and shellcheck. The PowerShell script is parsed by PowerShell's own
parser where ``pwsh`` is installed, else only its delimiters are checked. Not checked here: dscl,
launchctl, plutil, sc.exe, icacls and the Service Control Manager themselves (docs/deploy.md).
"""

from __future__ import annotations

import plistlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mirbad_agent.cli import _parser as agent_parser

AGENT = Path(__file__).parents[2] / "deploy" / "agent"
PLIST = AGENT / "macos" / "com.mirbad.agent.plist"
MACOS_SCRIPT = AGENT / "macos" / "install-macos.sh"
WINDOWS_SCRIPT = AGENT / "windows" / "install-windows.ps1"


def load_plist() -> dict[str, Any]:
    with PLIST.open("rb") as handle:
        loaded: dict[str, Any] = plistlib.load(handle)
    return loaded


def test_the_launch_daemon_runs_the_agent_as_its_own_user_and_leaves_models_running() -> None:
    plist = load_plist()
    assert plist["Label"] == "com.mirbad.agent"
    assert (plist["UserName"], plist["GroupName"]) == ("_mirbadagent", "_mirbadagent")
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}
    # launchd would otherwise kill what the agent started when it exits.
    assert plist["AbandonProcessGroup"] is True
    assert plist["Umask"] == 0o077


def test_the_launch_daemon_uses_the_real_command_line() -> None:
    program, *arguments = load_plist()["ProgramArguments"]
    assert program == "/usr/local/bin/mirbad-agent"
    parsed = agent_parser().parse_args(arguments)
    assert parsed.command == "serve"
    assert str(parsed.config) == "/Library/Application Support/Mirbad/agent.toml"
    assert str(parsed.state_dir) == load_plist()["WorkingDirectory"]


def test_the_macos_installer_rewrites_the_program_path_it_finds_in_the_plist() -> None:
    # install-macos.sh's sed matches this exact element; a reformatted plist would be installed unchanged.
    assert "<string>/usr/local/bin/mirbad-agent</string>" in PLIST.read_text()
    assert "<string>/usr/local/bin/mirbad-agent</string>" in MACOS_SCRIPT.read_text()


def test_the_macos_installer_is_valid_bash() -> None:
    result = subprocess.run(
        ["bash", "-n", str(MACOS_SCRIPT)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.deploy
def test_the_macos_installer_is_shellcheck_clean() -> None:
    result = subprocess.run(
        ["shellcheck", str(MACOS_SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout


def test_the_windows_installer_parses() -> None:
    pwsh = shutil.which("pwsh")
    if pwsh is not None:
        command = (
            "$errors = $null; [System.Management.Automation.Language.Parser]::ParseFile("
            f"'{WINDOWS_SCRIPT}', [ref]$null, [ref]$errors) | Out-Null; $errors | ForEach-Object {{ $_ }}; "
            "exit $errors.Count"
        )
        argv = [pwsh, "-NoProfile", "-Command", command]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    assert unbalanced_delimiters(WINDOWS_SCRIPT.read_text()) == []


def test_the_windows_installer_uses_a_virtual_account_and_the_event_log() -> None:
    text = WINDOWS_SCRIPT.read_text()
    assert text.startswith("#Requires -RunAsAdministrator\n")
    assert "Set-StrictMode -Version Latest" in text
    assert '$Account = "NT SERVICE\\$ServiceName"' in text
    assert "[System.Diagnostics.EventLog]::CreateEventSource($ServiceName, 'Application')" in text
    assert "'obj=', $Account" in text


@pytest.mark.parametrize(
    ("source", "unbalanced"),
    [
        ("if ($a) { $b = @(1, 2) }", []),
        ("'(' + \"{$x}\" # )\n<# ] #>", []),
        ("function f { (1 }", ["line 1: '}' closes '('", "line 1: '{' is never closed"]),
    ],
)
def test_the_delimiter_check_itself(source: str, unbalanced: list[str]) -> None:
    assert unbalanced_delimiters(source) == unbalanced


def unbalanced_delimiters(source: str) -> list[str]:
    """Brackets, braces and parentheses that do not pair up outside strings and comments.

    PowerShell's quoting, as far as pairing needs it: '...' (quotes doubled inside), "..." with
    backtick escapes, # to the end of the line, <# ... #>. A ``$(...)`` inside "..." pairs up on its own.
    """
    pairs = {")": "(", "}": "{", "]": "["}
    stack: list[tuple[str, int]] = []
    problems: list[str] = []
    index, line = 0, 1
    while index < len(source):
        char = source[index]
        if char == "\n":
            line += 1
        if source.startswith("<#", index):
            end = source.index("#>", index) + 2
            line += source.count("\n", index, end)
            index = end
            continue
        if char == "#":
            index = source.find("\n", index) if "\n" in source[index:] else len(source)
            continue
        if char in "'\"":
            end = _string_end(source, index)
            line += source.count("\n", index, end)
            index = end
            continue
        if char in "({[":
            stack.append((char, line))
        elif char in pairs:
            opened = stack.pop()[0] if stack else None
            if opened != pairs[char]:
                problems.append(f"line {line}: {char!r} closes {opened!r}")
        index += 1
    problems += [f"line {opened_at}: {opened!r} is never closed" for opened, opened_at in stack]
    return problems


def _string_end(source: str, start: int) -> int:
    quote = source[start]
    index = start + 1
    while index < len(source):
        if quote == '"' and source[index] == "`":
            index += 2
            continue
        if source[index] == quote:
            if source.startswith(quote * 2, index):
                index += 2
                continue
            return index + 1
        index += 1
    return index
