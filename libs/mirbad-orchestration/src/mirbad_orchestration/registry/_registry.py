"""The model registry: every model definition of the fleet, kept in ``{data_dir}/models.json``.

Fail closed: a file that cannot be read or holds an invalid entry raises :class:`RegistryError` on
every call until someone fixes it; it is never overwritten or seeded over. Only a missing file is
seeded, once, with one example model. The file format is described in ``_registry_file``.
"""

from __future__ import annotations

import builtins
import contextlib
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread

from mirbad_orchestration.commandline import normalize_definition
from mirbad_orchestration.exceptions import RegistryError, UnknownModelError
from mirbad_orchestration.stores import is_disk_full
from mirbad_protocol import BeforeReplace, ModelDefinition, remove_stale_temp_files, write_json_atomic

from ._model_rules import Normalizer, check_served_name, prepare_definition
from ._registry_file import decode_registry, encode_registry
from ._seed import SEED_MODEL

__all__ = ["REGISTRY_FILE_NAME", "ModelRegistry"]

REGISTRY_FILE_NAME: Final = "models.json"
"""The registry file's name inside the data directory."""

# models.json holds no secret (API keys live in their own store), so others may read it, as any
# configuration file.
_FILE_MODE: Final = 0o644


class ModelRegistry:
    """The stored model definitions, read once and written atomically on every change.

    One :class:`anyio.Lock` serializes every read-modify-write, so concurrent upserts never lose one
    another; file I/O runs in a worker thread. The registry must be the only writer of its file.

    Args:
        data_dir: the data directory; the registry file is ``data_dir / "models.json"``.
        normalize: turns a definition into its canonical effective configuration (owned flags lifted
            out of ``extra_args``); applied on every upsert and to every model read from the file.
        before_replace: test seam passed to :func:`write_json_atomic`: called between writing the
            temporary file and replacing ``models.json``; raising there simulates a crash.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        normalize: Normalizer = normalize_definition,
        before_replace: BeforeReplace | None = None,
    ) -> None:
        self._path = data_dir / REGISTRY_FILE_NAME
        self._normalize = normalize
        self._before_replace = before_replace
        self._lock = anyio.Lock()
        self._models: builtins.list[ModelDefinition] | None = None

    @property
    def path(self) -> Path:
        """The registry file."""
        return self._path

    async def list(self) -> builtins.list[ModelDefinition]:
        """Return every model, in stored order.

        Raises:
            RegistryError: the file cannot be read or holds an invalid entry.
        """
        async with self._lock:
            return builtins.list(await self._loaded())

    async def get(self, model_id: str) -> ModelDefinition:
        """Return the model ``model_id``.

        Raises:
            UnknownModelError: no model has that id.
            RegistryError: the file cannot be read or holds an invalid entry.
        """
        async with self._lock:
            return _find(await self._loaded(), model_id)

    async def find_by_served_name(self, served_name: str) -> ModelDefinition | None:
        """Return the model served as ``served_name`` (compared case-insensitively), or None."""
        wanted = served_name.casefold()
        async with self._lock:
            models = await self._loaded()
        return next((model for model in models if model.served_name.casefold() == wanted), None)

    async def upsert(self, definition: ModelDefinition) -> ModelDefinition:
        """Validate, normalize and store ``definition``, replacing the model with its id if any.

        Returns:
            The definition as stored: tags normalized, owned flags lifted out of ``extra_args``.

        Raises:
            InvalidFieldError: a field breaks a rule (named in ``field``): tags, sources, an
                unreadable owned flag (:class:`UnreadableFlagError`) or a served name another model
                already uses (:class:`DuplicateServedNameError`).
            RegistryError: the file cannot be read or written; nothing changed.
        """
        stored = prepare_definition(definition, self._normalize)
        async with self._lock:
            models = await self._loaded()
            check_served_name(models, stored)
            index = next((i for i, model in enumerate(models) if model.id == stored.id), len(models))
            await self._save([*models[:index], stored, *models[index + 1 :]])
        return stored

    async def delete(self, model_id: str) -> ModelDefinition:
        """Remove the model ``model_id`` and return it.

        Raises:
            UnknownModelError: no model has that id.
            RegistryError: the file cannot be read or written; nothing changed.
        """
        async with self._lock:
            models = await self._loaded()
            removed = _find(models, model_id)
            await self._save([model for model in models if model.id != model_id])
        return removed

    async def placed_on(self, node_id: str) -> builtins.list[ModelDefinition]:
        """Every model whose placement names ``node_id``, in stored order.

        Raises:
            RegistryError: the file cannot be read or holds an invalid entry.
        """
        async with self._lock:
            return [model for model in await self._loaded() if _is_on(model, node_id)]

    async def unplace(self, node_id: str) -> builtins.list[ModelDefinition]:
        """Clear the placement of every model placed on ``node_id`` in one write; return them as stored.

        An unplaced model runs on the local node from its next start.

        Raises:
            RegistryError: the file cannot be read or written; nothing changed.
        """
        async with self._lock:
            models = await self._loaded()
            changed = [m.model_copy(update={"placement": None}) for m in models if _is_on(m, node_id)]
            if changed:
                by_id = {model.id: model for model in changed}
                await self._save([by_id.get(model.id, model) for model in models])
        return changed

    async def _loaded(self) -> builtins.list[ModelDefinition]:
        # A failed load is not cached: once the file is fixed by hand the next call reads it.
        if self._models is None:
            self._models = await anyio.to_thread.run_sync(self._load_or_seed)
        return self._models

    async def _save(self, models: builtins.list[ModelDefinition]) -> None:
        # Shielded: once the write has started, memory must follow the file even if the caller is
        # cancelled meanwhile (the cancellation arrives right after).
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(partial(self._write, encode_registry(models)))
            self._models = models

    def _load_or_seed(self) -> builtins.list[ModelDefinition]:
        with contextlib.suppress(OSError):
            remove_stale_temp_files(self._path)
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            seeded = [prepare_definition(SEED_MODEL, self._normalize)]
            self._write(encode_registry(seeded))
            return seeded
        except OSError as exc:
            raise RegistryError(f"cannot read {self._path}: {exc.strerror or exc}") from exc
        return decode_registry(self._path, raw, partial(prepare_definition, normalize=self._normalize))

    def _write(self, document: dict[str, Any]) -> None:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self._path, document, mode=_FILE_MODE, before_replace=self._before_replace)
        except OSError as exc:
            reason = f"cannot write {self._path}: {exc.strerror or exc}"
            raise RegistryError(reason, disk_full=is_disk_full(exc)) from exc


def _is_on(model: ModelDefinition, node_id: str) -> bool:
    return model.placement is not None and model.placement.node_id == node_id


def _find(models: builtins.list[ModelDefinition], model_id: str) -> ModelDefinition:
    for model in models:
        if model.id == model_id:
            return model
    raise UnknownModelError(model_id)
