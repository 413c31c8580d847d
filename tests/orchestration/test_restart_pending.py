"""Restart-pending from the config hash, and the "old -> new" list of the Apply dialog."""

from __future__ import annotations

import pytest
from tests._support.vllm_strategies import TOTAL_GIB

from mirbad_orchestration.commandline import (
    TUNING_LABEL,
    RestartPendingCheck,
    RunningLaunch,
    SettingChange,
    build_vllm_args,
    changed_settings,
    config_hash,
    launch_spec_for,
    normalize_vllm,
)
from mirbad_protocol import (
    ExecutableRef,
    ModelDefinition,
    ModelSource,
    ModelState,
    ModelStatus,
    SpeculativeDecoding,
)

IMAGE = "vllm/vllm-openai:v0.11.0"
SAVED = normalize_vllm(
    ModelDefinition(
        id="qwen",
        served_name="qwen",
        image=IMAGE,
        model_path="Qwen/Qwen3-8B",
        memory_budget_gib=40.0,
        speculative=SpeculativeDecoding(method="mtp", num_speculative_tokens=4),
        extra_args=["-O3"],
    )
)
# What a launcher that skipped normalization ran: the typed settings, then a raw override that vLLM
# applies last. vLLM effectively runs SAVED, but the label is the hash of this raw line.
RAW_OVERRIDE = [
    *build_vllm_args(
        SAVED.model_copy(update={"speculative": SpeculativeDecoding(method="mtp", num_speculative_tokens=2)}),
        total_gib=TOTAL_GIB,
    )[:-1],
    "--speculative-config.num_speculative_tokens=4",
    "--speculative-config.method=mtp",
    "-O3",
]


def _status(label: str | None, state: ModelState = ModelState.READY) -> ModelStatus:
    return ModelStatus(id="qwen", served_name="qwen", state=state, config_hash=label)


def _expected(definition: ModelDefinition) -> str:
    return launch_spec_for(definition, total_gib=TOTAL_GIB).config_hash


def _running(argv: list[str], instance: str = "c1", **labels: str) -> RunningLaunch:
    return RunningLaunch(instance_id=instance, argv=tuple(argv), image=IMAGE, labels=labels)


def test_an_unchanged_definition_is_not_pending() -> None:
    check = RestartPendingCheck()
    assert not check.is_pending(SAVED, _status(_expected(SAVED)), total_gib=TOTAL_GIB)


def test_a_changed_setting_is_pending_even_after_reading_the_argv() -> None:
    check = RestartPendingCheck()
    running_argv = build_vllm_args(SAVED, total_gib=TOTAL_GIB)
    edited = SAVED.model_copy(update={"max_num_seqs": 32})
    status = _status(_expected(SAVED))
    assert check.is_pending(edited, status, total_gib=TOTAL_GIB)
    assert check.is_pending(edited, status, _running(running_argv), total_gib=TOTAL_GIB)


def test_a_raw_override_matching_the_normalized_definition_is_not_pending() -> None:
    check = RestartPendingCheck()
    label = config_hash(IMAGE, RAW_OVERRIDE)
    assert label != _expected(SAVED)
    status = _status(label)
    # Without the argv only the label speaks, and it differs.
    assert check.is_pending(SAVED, status, total_gib=TOTAL_GIB)
    assert not check.is_pending(SAVED, status, _running(RAW_OVERRIDE), total_gib=TOTAL_GIB)


def test_the_recomputed_hash_is_cached_per_instance() -> None:
    check = RestartPendingCheck()
    status = _status(config_hash(IMAGE, RAW_OVERRIDE))
    assert not check.is_pending(SAVED, status, _running(RAW_OVERRIDE), total_gib=TOTAL_GIB)
    # Same instance: its argv is not read again.
    assert not check.is_pending(SAVED, status, _running(["garbage"]), total_gib=TOTAL_GIB)
    # Another instance is read afresh; an argv that cannot be read proves nothing: pending.
    assert check.is_pending(SAVED, status, _running(["garbage"], instance="c2"), total_gib=TOTAL_GIB)


def test_the_cache_is_bounded() -> None:
    check = RestartPendingCheck(cache_size=1)
    status = _status(config_hash(IMAGE, RAW_OVERRIDE))
    assert not check.is_pending(SAVED, status, _running(RAW_OVERRIDE, "c1"), total_gib=TOTAL_GIB)
    assert not check.is_pending(SAVED, status, _running(RAW_OVERRIDE, "c2"), total_gib=TOTAL_GIB)
    # c1 was forgotten, so its (now unreadable) argv is read again.
    assert check.is_pending(SAVED, status, _running(["garbage"], "c1"), total_gib=TOTAL_GIB)


@pytest.mark.parametrize("state", [ModelState.STOPPED, ModelState.STOPPING, ModelState.FAILED])
def test_only_starting_or_ready_models_can_be_pending(state: ModelState) -> None:
    assert not RestartPendingCheck().is_pending(
        SAVED, _status("0000000000000000", state), total_gib=TOTAL_GIB
    )


def test_starting_models_can_be_pending() -> None:
    status = _status("0000000000000000", ModelState.STARTING)
    assert RestartPendingCheck().is_pending(SAVED, status, total_gib=TOTAL_GIB)


def test_no_label_or_a_tuning_instance_is_never_pending() -> None:
    check = RestartPendingCheck()
    assert not check.is_pending(SAVED, _status(None), total_gib=TOTAL_GIB)
    tuning = _running(["--model", "/models/x"], **{TUNING_LABEL: "1"})
    assert tuning.tuning
    assert not check.is_pending(SAVED, _status("0000000000000000"), tuning, total_gib=TOTAL_GIB)


def test_a_process_model_compares_labels_only() -> None:
    llama = ModelDefinition(
        id="tiny",
        served_name="tiny",
        runtime="llamacpp",
        executable=ExecutableRef(name="llama-server", version="b6000"),
        model_path="tiny.gguf",
    )
    check = RestartPendingCheck()
    label = launch_spec_for(llama).config_hash
    status = ModelStatus(
        id="tiny", served_name="tiny", state=ModelState.READY, runtime="llamacpp", config_hash=label
    )
    assert not check.is_pending(llama, status)
    changed = llama.model_copy(update={"max_model_len": 4096})
    running = RunningLaunch(instance_id="p1", argv=tuple(launch_spec_for(llama).argv))
    assert check.is_pending(changed, status, running)


def test_mark_sets_the_status_flag() -> None:
    check = RestartPendingCheck()
    edited = SAVED.model_copy(update={"max_num_seqs": 32})
    assert check.mark(edited, _status(_expected(SAVED)), total_gib=TOTAL_GIB).restart_pending
    assert not check.mark(SAVED, _status(_expected(SAVED)), total_gib=TOTAL_GIB).restart_pending


def test_changed_settings_lists_old_and_new_values() -> None:
    new = SAVED.model_copy(
        update={
            "max_num_seqs": 32,
            "kv_cache_dtype": "fp8",
            "auto_start": True,
            "tags": ["chat"],
            "sources": [ModelSource(repo_id="Qwen/Qwen3-8B", folder="Qwen3-8B")],
        }
    )
    assert changed_settings(SAVED, new) == [
        SettingChange("kvCacheDtype", "auto", "fp8", needs_restart=True),
        SettingChange("maxNumSeqs", 16, 32, needs_restart=True),
        SettingChange("autoStart", False, True, needs_restart=False),
    ]
    assert changed_settings(SAVED, SAVED) == []


def test_changed_settings_shows_whole_objects() -> None:
    new = SAVED.model_copy(update={"speculative": None})
    assert changed_settings(SAVED, new) == [
        SettingChange("speculative", {"method": "mtp", "num_speculative_tokens": 4}, None, needs_restart=True)
    ]
