"""Restart-pending: does a running model still run its saved definition's configuration?

Every launch carries the config hash of its image and canonical argv (a label on the container). A
Starting or Ready model whose label differs from the hash of its saved definition is restart-pending,
with two exceptions: an instance without a label, or one launched by a tuning run, never is. For vLLM a
differing label gets a second look: the hash is recomputed from the argv the container really runs,
canonicalized, because a container launched with an owned setting overridden in its extra arguments
runs exactly what the normalized definition describes. That recomputation is cached per instance.
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

__all__ = ["TUNING_LABEL", "RestartPendingCheck", "RunningLaunch", "SettingChange", "changed_settings"]

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


class RestartPendingCheck:
    """Decides restart-pending for running models, caching the argv recomputations per instance.

    Args:
        cache_size: how many instances' recomputed hashes are remembered (the oldest are forgotten).
    """

    def __init__(self, *, cache_size: int = 256) -> None:
        self._cache_size = cache_size
        self._recomputed: OrderedDict[tuple[str, str], str | None] = OrderedDict()

    def is_pending(
        self,
        definition: ModelDefinition,
        status: ModelStatus,
        running: RunningLaunch | None = None,
        *,
        total_gib: float = DEFAULT_TOTAL_GIB,
    ) -> bool:
        """Whether ``status``'s instance must restart to run ``definition`` (the saved, normalized one).

        Args:
            definition: the model's saved definition.
            status: the model's current status; its ``config_hash`` is the instance's label.
            running: what the instance was launched with, when its node can tell.
            total_gib: the node's memory, which the vLLM utilization argument is derived from.
        """
        label = status.config_hash
        if status.state not in _LIVE or label is None or (running is not None and running.tuning):
            return False
        expected = launch_spec_for(definition, total_gib=total_gib).config_hash
        if label == expected:
            return False
        if definition.runtime != "vllm" or running is None or running.image is None:
            return True
        return self._effective_hash(label, running) != expected

    def mark(
        self,
        definition: ModelDefinition,
        status: ModelStatus,
        running: RunningLaunch | None = None,
        *,
        total_gib: float = DEFAULT_TOTAL_GIB,
    ) -> ModelStatus:
        """Return ``status`` with ``restart_pending`` set by :meth:`is_pending`."""
        pending = self.is_pending(definition, status, running, total_gib=total_gib)
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
