"""The model registry: every model definition of the fleet, kept in ``{data_dir}/models.json``.

Fail closed: a file that cannot be read or holds an invalid entry raises :class:`RegistryError` on
every call until someone fixes it; it is never overwritten or seeded over. Only a missing file is
seeded, once, with one example model. The file format is described in ``_registry_file``; the file is
a :class:`~mirbad_orchestration.stores.StateFile` (one lock, atomic replace).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final

from mirbad_orchestration.commandline import normalize_definition
from mirbad_orchestration.exceptions import RegistryError, UnknownModelError
from mirbad_orchestration.stores import StateFile, StoreAction
from mirbad_protocol import ModelDefinition
from mirbad_protocol.support import BeforeReplace

from ._model_rules import Normalizer, check_served_name, prepare_definition
from ._registry_file import decode_registry, encode_registry
from ._seed import SEED_MODEL

__all__ = ["REGISTRY_FILE_NAME", "ModelRegistry"]

REGISTRY_FILE_NAME: Final = "models.json"
"""The registry file's name inside the data directory."""

_RECHECK_S: Final = 1.0
"""How often the served-name lookup checks whether models.json changed under the process (seconds)."""


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
        clock: monotonic seconds; when the served-name lookup last checked the file (a test seam).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        normalize: Normalizer = normalize_definition,
        before_replace: BeforeReplace | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._normalize = normalize
        self._clock = clock
        self._recheck_at = 0.0
        # The served-name index and the stored list it was built from: every write stores a new list,
        # so an index whose list is not the current one is stale.
        self._indexed: builtins.list[ModelDefinition] | None = None
        self._by_served_name: dict[str, ModelDefinition] = {}
        prepare = partial(prepare_definition, normalize=normalize)
        self._file: StateFile[builtins.list[ModelDefinition]] = StateFile(
            data_dir / REGISTRY_FILE_NAME,
            [],
            before_replace=before_replace,
            decode=lambda path, raw: decode_registry(path, raw, prepare),
            encode=encode_registry,
            seed=lambda: [prepare(SEED_MODEL)],
            failure=_registry_error,
        )

    @property
    def path(self) -> Path:
        """The registry file."""
        return self._file.path

    async def list(self) -> builtins.list[ModelDefinition]:
        """Return every model, in stored order.

        Raises:
            RegistryError: the file cannot be read or holds an invalid entry.
        """
        return builtins.list(await self._file.read())

    async def get(self, model_id: str) -> ModelDefinition:
        """Return the model ``model_id``.

        Raises:
            UnknownModelError: no model has that id.
            RegistryError: the file cannot be read or holds an invalid entry.
        """
        return _find(await self._file.read(), model_id)

    async def find_by_served_name(self, served_name: str) -> ModelDefinition | None:
        """Return the model served as ``served_name`` (compared case-insensitively), or None.

        The router calls this on every request, so it answers from an index in memory without taking
        the lock or leaving the event loop; at most once a second it checks that ``models.json`` did
        not change under the process (someone editing it by hand) and reads it again if it did.

        Raises:
            RegistryError: the file cannot be read or holds an invalid entry.
        """
        models = self._file.cached
        now = self._clock()
        if models is None or now >= self._recheck_at:
            models = await self._file.reload_if_changed()
            self._recheck_at = now + _RECHECK_S
        if models is not self._indexed:
            index: dict[str, ModelDefinition] = {}
            for model in models:
                index.setdefault(model.served_name.casefold(), model)  # the first one, as a scan finds
            self._by_served_name, self._indexed = index, models
        return self._by_served_name.get(served_name.casefold())

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

        def put(models: builtins.list[ModelDefinition]) -> builtins.list[ModelDefinition]:
            check_served_name(models, stored)
            index = next((i for i, model in enumerate(models) if model.id == stored.id), len(models))
            return [*models[:index], stored, *models[index + 1 :]]

        # Written even when nothing changed, as before: a save that was asked for reaches the disk.
        await self._file.update(put, write_unchanged=True)
        return stored

    async def delete(self, model_id: str) -> ModelDefinition:
        """Remove the model ``model_id`` and return it.

        Raises:
            UnknownModelError: no model has that id.
            RegistryError: the file cannot be read or written; nothing changed.
        """
        removed: builtins.list[ModelDefinition] = []

        def drop(models: builtins.list[ModelDefinition]) -> builtins.list[ModelDefinition]:
            removed.append(_find(models, model_id))
            return [model for model in models if model.id != model_id]

        await self._file.update(drop)
        return removed[0]

    async def placed_on(self, node_id: str) -> builtins.list[ModelDefinition]:
        """Every model whose placement names ``node_id``, in stored order.

        Raises:
            RegistryError: the file cannot be read or holds an invalid entry.
        """
        return [model for model in await self._file.read() if _is_on(model, node_id)]

    async def unplace(self, node_id: str) -> builtins.list[ModelDefinition]:
        """Clear the placement of every model placed on ``node_id`` in one write; return them as stored.

        An unplaced model runs on the local node from its next start.

        Raises:
            RegistryError: the file cannot be read or written; nothing changed.
        """
        changed: builtins.list[ModelDefinition] = []

        def unplaced(models: builtins.list[ModelDefinition]) -> builtins.list[ModelDefinition]:
            changed.extend(m.model_copy(update={"placement": None}) for m in models if _is_on(m, node_id))
            by_id = {model.id: model for model in changed}
            return [by_id.get(model.id, model) for model in models]

        await self._file.update(unplaced)
        return changed


def _registry_error(path: Path, action: StoreAction, detail: str, disk_full: bool) -> Exception:
    return RegistryError(f"cannot {action} {path}: {detail}", disk_full=disk_full)


def _is_on(model: ModelDefinition, node_id: str) -> bool:
    return model.placement is not None and model.placement.node_id == node_id


def _find(models: builtins.list[ModelDefinition], model_id: str) -> ModelDefinition:
    for model in models:
        if model.id == model_id:
            return model
    raise UnknownModelError(model_id)
