"""The login page: the administrator's password, posted as a plain form to ``POST /login``."""

from __future__ import annotations

from fastapi import Request
from nicegui import ui

from mirbad_master._sign_in_throttle import FIRST_LOCK_S

from ._layout import apply_theme
from ._marks import testid
from ._session import LOGIN_PATH, safe_next

__all__ = ["login_message", "render_login"]


def login_message(error: str | None, retry: str | None) -> str | None:
    """What the login page says after a refused attempt (``?error=wrong|locked&retry=S``)."""
    if error == "wrong":
        return "That is not the administrator password."
    if error == "locked":
        wait = retry if retry and retry.isdigit() else str(int(FIRST_LOCK_S))
        return f"Too many wrong passwords; try again in {wait} s."
    return None


def render_login(request: Request, error: str | None, retry: str | None, next_path: str | None) -> None:
    """Build the login page."""
    apply_theme(request)
    ui.page_title("Sign in · Mirbad")
    with ui.card().classes("absolute-center w-96 p-6 gap-4"):
        ui.label("Mirbad").classes("text-h5")
        ui.label("Sign in with the administrator password.").classes("text-grey-7")
        message = login_message(error, retry)
        if message is not None:
            testid(ui.label(message).classes("text-negative").props("role=alert"), "login-error")
        form = ui.element("form").props(f"method=post action={LOGIN_PATH}").classes("w-full column gap-4")
        with form:
            password = ui.input("Password", password=True, password_toggle_button=True).classes("w-full")
            testid(
                password.props("name=password autofocus autocomplete=current-password outlined"), "password"
            )
            hidden = ui.element("input")
            hidden.props.update(type="hidden", name="next", value=safe_next(next_path))
            testid(ui.button("Sign in", icon="login").props("type=submit"), "sign-in").classes("w-full")
        ui.label("Forgot it? Run `mirbad admin reset-password` on the master's machine.").classes(
            "text-caption text-grey-7"
        )
