"""Restart-pending: does a running model still run its saved definition's configuration?

Every launch carries the config hash of its image and canonical argv (a label on the container). A
Starting or Ready model whose label differs from the hash of its saved definition is restart-pending,
with two exceptions: an instance without a label, or one launched by a tuning run, never is. For vLLM a
differing label gets a second look: the hash is recomputed from the argv the container really runs,
canonicalized, because a container launched with an owned setting overridden in its extra arguments
runs exactly what the normalized definition describes. That recomputation is cached per instance.

Where the node reports the instance's argv (:attr:`~mirbad_protocol.ModelStatus.argv`), a differing
label is checked against what that argv runs (:func:`read_running_config`), for every runtime, and
:meth:`RestartPendingCheck.review` lists the settings a restart changes from it, so both hold after a
master restart and for adopted instances. An argv that cannot be read leaves the label's verdict
(pending) and is said so.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from pydantic import JsonValue

from mirbad_protocol import MirbadError, ModelDefinition, ModelState, ModelStatus

from ._commandline import DEFAULT_TOTAL_GIB, launch_spec_for
from ._config_hash import canonicalize_vllm_args, config_hash
from ._running_config import RunningConfig, read_running_config

__all__ = [
    "TUNING_LABEL",
    "PendingReview",
    "RestartPendingCheck",
    "RunningLaunch",
    "SettingChange",
    "changed_settings",
]

TUNING_LABEL: Final = "mirbad.tuning"
"""The label (value ``"1"``) of an instance a tuning run launched: never restart-pending."""

_LIVE: Final = (ModelState.STARTING, ModelState.READY)
# Settings applied without a restart: the monitor and the router read them from the registry.
_NO_RESTART: Final = frozenset({"autoStart", "autoStartOnRequest", "idleUnloadSeconds"})
# Bookkeeping the model's process never sees; the Apply dialog does not list them.
_NOT_SETTINGS: Final = frozenset({"tags", "sources"})


@dataclass(frozen=True)
class RunningLaunch:
    """What a running instance was launched with, as its node reads it back.

    Attributes:
        instance_id: what identifies this one instance (a container id); recomputed hashes are cached
            under it, so a new instance of the same model is looked at afresh.
        argv: the arguments it runs (a vLLM container's command: the arguments of ``vllm serve``).
        image: its container image; ``None`` for a native process or when unknown.
        labels: its labels (``mirbad.tuning``, ``mirbad.config-hash``, ...).
    """

    instance_id: str
    argv: tuple[str, ...]
    image: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def tuning(self) -> bool:
        """Whether a tuning run launched this instance."""
        return self.labels.get(TUNING_LABEL) == "1"


@dataclass(frozen=True)
class SettingChange:
    """One setting that differs between two versions of a definition.

    Attributes:
        field: the setting's wire name (``maxNumSeqs``).
        old: its value before, as JSON.
        new: its value after, as JSON.
        needs_restart: whether the running model only picks it up when restarted.
    """

    field: str
    old: JsonValue
    new: JsonValue
    needs_restart: bool


@dataclass(frozen=True)
class PendingReview:
    """Restart-pending for one model with the settings a restart would change (the Apply dialog).

    Attributes:
        pending: whether the running instance must restart to run the saved definition.
        changes: the settings that differ from what it runs (old: what it runs, new: the saved value).
        problem: why the list cannot be complete (the running command line cannot be read, it runs an
            image the master cannot name, the node reports no command line); ``None`` when it is.
    """

    pending: bool
    changes: list[SettingChange]
    problem: str | None = None


class RestartPendingCheck:
    """Decides restart-pending for running models, caching the argv recomputations per instance.

    Args:
        cache_size: how many instances' recomputed hashes are remembered (the oldest are forgotten).
    """

    def __init__(self, *, cache_size: int = 256) -> None:
        self._cache_size = cache_size
        self._recomputed: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._read: OrderedDict[tuple[str, ...], RunningConfig | None] = OrderedDict()

    def is_pending(
        self,
        definition: ModelDefinition,
        status: ModelStatus,
        running: RunningLaunch | None = None,
        *,
        launched: ModelDefinition | None = None,
        total_gib: float = DEFAULT_TOTAL_GIB,
    ) -> bool:
        """Whether ``status``'s instance must restart to run ``definition`` (the saved, normalized one).

        Args:
            definition: the model's saved definition.
            status: the model's current status; its ``config_hash`` is the instance's label, its
                ``argv`` (when reported) what the instance runs.
            running: what the instance was launched with, when its node can tell.
            launched: the definition this master remembers launching it with, if any.
            total_gib: the node's memory, which the vLLM utilization argument is derived from.
        """
        label = status.config_hash
        if status.state not in _LIVE or label is None or (running is not None and running.tuning):
            return False
        expected = launch_spec_for(definition, total_gib=total_gib).config_hash
        if label == expected:
            return False
        if running is None:
            read = self.read(definition, status, launched=launched, total_gib=total_gib)
            # No argv reported (an older agent): the label's verdict stands.
            return read is None or read.config_hash != expected
        if definition.runtime != "vllm" or running.image is None:
            return True
        return self._effective_hash(label, running) != expected

    def read(
        self,
        definition: ModelDefinition,
        status: ModelStatus,
        *,
        launched: ModelDefinition | None = None,
        total_gib: float = DEFAULT_TOTAL_GIB,
    ) -> RunningConfig | None:
        """What ``status``'s instance runs (:func:`read_running_config`), remembered per command line."""
        if status.argv is None:
            return None
        key = (
            definition.model_dump_json(),
            launched.model_dump_json() if launched is not None else "",
            status.config_hash or "",
            repr(total_gib),
            *status.argv,
        )
        if key in self._read:
            self._read.move_to_end(key)
            return self._read[key]
        result = read_running_config(definition, status, launched=launched, total_gib=total_gib)
        self._read[key] = result
        while len(self._read) > self._cache_size:
            self._read.popitem(last=False)
        return result

    def review(
        self,
        definition: ModelDefinition,
        status: ModelStatus,
        *,
        launched: ModelDefinition | None = None,
        total_gib: float = DEFAULT_TOTAL_GIB,
    ) -> PendingReview:
        """Restart-pending and the "old -> new" list for a model, from what its instance runs.

        The list compares the command line the node reports, read back, with the saved definition;
        where the node reports none (an older agent) it falls back to ``launched``, what this master
        remembers launching. A model that does not run has nothing to list.
        """
        pending = self.is_pending(definition, status, launched=launched, total_gib=total_gib)
        if status.state not in _LIVE:
            return PendingReview(pending, [])
        read = self.read(definition, status, launched=launched, total_gib=total_gib)
        if read is None:
            if launched is not None:
                return PendingReview(pending, changed_settings(launched, definition))
            problem = "the node does not report the running command line" if pending else None
            return PendingReview(pending, [], problem)
        if read.definition is None:
            return PendingReview(pending, [], read.problem)
        changes = changed_settings(read.definition, definition)
        if not pending:
            # Same launch hash: a setting read back differently (a budget derived from the utilization
            # text) is no change; only the settings applied without a restart can differ.
            changes = [change for change in changes if not change.needs_restart]
        elif read.config_hash is None:
            # The image (or executable version) it runs is not one the master can name.
            name = "image" if definition.runtime == "vllm" else "executable"
            new = definition.model_dump(mode="json", by_alias=True)[name]
            changes = [SettingChange(name, None, new, True), *changes]
        return PendingReview(pending, changes, read.problem)

    def mark(
        self,
        definition: ModelDefinition,
        status: ModelStatus,
        running: RunningLaunch | None = None,
        *,
        launched: ModelDefinition | None = None,
        total_gib: float = DEFAULT_TOTAL_GIB,
    ) -> ModelStatus:
        """Return ``status`` with ``restart_pending`` set by :meth:`is_pending`."""
        pending = self.is_pending(definition, status, running, launched=launched, total_gib=total_gib)
        return status.model_copy(update={"restart_pending": pending})

    def _effective_hash(self, label: str, running: RunningLaunch) -> str | None:
        key = (running.instance_id, label)
        if key in self._recomputed:
            self._recomputed.move_to_end(key)
            return self._recomputed[key]
        assert running.image is not None  # checked by the caller
        try:
            recomputed: str | None = config_hash(running.image, canonicalize_vllm_args(running.argv))
        except (MirbadError, ValueError):
            # An argv we cannot read proves nothing: the label's verdict (pending) stands.
            recomputed = None
        self._recomputed[key] = recomputed
        while len(self._recomputed) > self._cache_size:
            self._recomputed.popitem(last=False)
        return recomputed


def changed_settings(old: ModelDefinition, new: ModelDefinition) -> list[SettingChange]:
    """List the settings that differ from ``old`` to ``new``, in the definition's field order.

    Values are compared as they appear on the wire, defaults included, so resetting a setting to its
    default is listed too. Tags and sources are not settings of the running model and are ignored.
    """
    before = old.model_dump(mode="json", by_alias=True)
    after = new.model_dump(mode="json", by_alias=True)
    return [
        SettingChange(name, before.get(name), after.get(name), name not in _NO_RESTART)
        for name in after
        if name not in _NOT_SETTINGS and before.get(name) != after.get(name)
    ]
