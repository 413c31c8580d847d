"""What the download search box's text names: a Hugging Face repository or an Ollama model.

``owner/name[@revision]`` (or a huggingface.co URL, or ``hf:owner/name``) is a Hugging Face repository;
``name[:tag]`` (or ``namespace/name:tag``, or ``ollama:…``) an Ollama model. The request is checked as
the API checks a body (a person's input: unknown fields refused, each refusal naming its field).
"""

from __future__ import annotations

import re
from typing import Final

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.downloads import HuggingFaceDownload, OllamaDownload

__all__ = ["SEARCH_LABEL", "default_folder", "parse_download"]

SEARCH_LABEL: Final = "a Hugging Face repo or an Ollama model"
"""The search box's label."""
_HF_URL: Final = re.compile(r"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/(?P<repo>[^/?#]+/[^/?#]+)")
_PREFIXES: Final = {"hf:": "huggingface", "huggingface:": "huggingface", "ollama:": "ollama"}


def _kind_and_name(text: str) -> tuple[str, str]:
    value = text.strip()
    for prefix, kind in _PREFIXES.items():
        if value.lower().startswith(prefix):
            return kind, value[len(prefix) :].strip()
    url = _HF_URL.match(value)
    if url is not None:
        return "huggingface", url["repo"]
    # owner/name is a Hugging Face repository; name[:tag] (or namespace/name:tag) an Ollama model.
    if "/" in value and ":" not in value:
        return "huggingface", value
    return "ollama", value


def default_folder(text: str) -> str:
    """The folder a download lands in unless one is named: the model's name, made one plain name."""
    kind, name = _kind_and_name(text)
    name = name.split("@", 1)[0]
    base = name.rsplit("/", 1)[-1] if kind == "huggingface" else name.removeprefix("library/")
    folder = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.").lower()
    return folder or "model"


def parse_download(
    text: str, folder: str = "", *, patterns: str = "", token: str = ""
) -> HuggingFaceDownload | OllamaDownload:
    """The request the search box's text names.

    ``owner/name[@revision]`` (or a huggingface.co URL, or ``hf:owner/name``) is a Hugging Face
    repository; ``name[:tag]`` (or ``namespace/name:tag``, or ``ollama:…``) an Ollama model.

    Args:
        text: what was typed.
        folder: the target folder; empty: :func:`default_folder`.
        patterns: comma-separated glob patterns (Hugging Face only; empty takes every file).
        token: a Hugging Face token for a private or gated repository (empty: none).

    Raises:
        InvalidFieldError: a field the API would refuse (``repoId``, ``model``, ``folder`` ...).
    """
    if not text.strip():
        raise InvalidFieldError("source", f"name {SEARCH_LABEL}")
    kind, name = _kind_and_name(text)
    target = folder.strip() or default_folder(text)
    if kind == "huggingface":
        repo, _, revision = name.partition("@")
        body: dict[str, object] = {"kind": kind, "repoId": repo, "folder": target}
        if revision:
            body["revision"] = revision
        globs = [pattern.strip() for pattern in patterns.split(",") if pattern.strip()]
        if globs:
            body["allowPatterns"] = globs
        if token.strip():
            body["token"] = token.strip()
        return HuggingFaceDownload.from_user_input(body)
    return OllamaDownload.from_user_input({"kind": kind, "model": name, "folder": target})
