"""Restart-pending and the "old -> new" list read from the argv a node reports (hand-written statuses)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tests._support.vllm_strategies import TOTAL_GIB

from mirbad_orchestration.commandline import (
    RestartPendingCheck,
    SettingChange,
    build_vllm_args,
    config_hash,
    launch_spec_for,
    launched_argv,
    normalize_definition,
    read_running_config,
)
from mirbad_protocol import ExecutableRef, ModelDefinition, ModelState, ModelStatus

_Verdict = tuple[bool, list[tuple[str, object, object]], str | None]
IMAGE = "vllm/vllm-openai:v0.11.0"
VLLM = normalize_definition(
    ModelDefinition(
        id="qwen", served_name="qwen", image=IMAGE, model_path="Qwen/Qwen3-8B", memory_budget_gib=40.0
    )
)
LLAMA = normalize_definition(
    ModelDefinition(
        id="tiny",
        served_name="tiny",
        runtime="llamacpp",
        executable=ExecutableRef(name="llama-server", version="b6000"),
        model_path="tiny.gguf",
        memory_budget_gib=4.0,
    )
)


def _running(launched: ModelDefinition, *, plumbing: bool = True, label: str | None = "") -> ModelStatus:
    """The status a node reports for an instance launched with ``launched`` (its label and argv)."""
    spec = launch_spec_for(launched, total_gib=TOTAL_GIB)
    argv = list(spec.argv)
    if launched.runtime != "vllm" and plumbing:
        argv += ["--host", "127.0.0.1", "--port", "41234"]
    return ModelStatus(
        id=launched.id,
        served_name=launched.served_name,
        state=ModelState.READY,
        runtime=launched.runtime,
        config_hash=spec.config_hash if label == "" else label,
        budget_gib=launched.memory_budget_gib,
        argv=argv,
    )


def _review(saved: ModelDefinition, status: ModelStatus, launched: ModelDefinition | None = None) -> _Verdict:
    review = RestartPendingCheck().review(saved, status, launched=launched, total_gib=TOTAL_GIB)
    return (
        review.pending,
        [(c.field, c.old, c.new) for c in review.changes if c.needs_restart],
        review.problem,
    )


def test_an_unchanged_model_is_not_pending_and_lists_nothing() -> None:
    for saved in (VLLM, LLAMA):
        assert _review(saved, _running(saved)) == (False, [], None)


def test_an_edit_is_listed_from_the_argv_without_any_launch_memory() -> None:
    # What a master that just restarted sees: no memory of its launches, only the node's report.
    for saved in (VLLM, LLAMA):
        edited = saved.model_copy(update={"max_num_seqs": 7, "max_model_len": 4096})
        pending, changes, problem = _review(edited, _running(saved))
        assert pending
        assert changes == [("maxModelLen", saved.max_model_len, 4096), ("maxNumSeqs", saved.max_num_seqs, 7)]
        assert problem is None


def test_the_argv_wins_over_a_stale_launch_memory() -> None:
    # The instance was restarted by someone else (another master) with the saved settings.
    edited = LLAMA.model_copy(update={"max_num_seqs": 3})
    assert _review(edited, _running(edited), launched=LLAMA) == (False, [], None)


def test_bookkeeping_changes_are_listed_without_a_restart() -> None:
    edited = VLLM.model_copy(update={"auto_start": True, "tags": ["x"]})
    review = RestartPendingCheck().review(edited, _running(VLLM), launched=VLLM, total_gib=TOTAL_GIB)
    assert not review.pending
    assert review.changes == [SettingChange("autoStart", False, True, needs_restart=False)]


def test_an_unreadable_argv_is_said_so() -> None:
    status = _running(VLLM).model_copy(update={"argv": ["--max-num-seqs", "many"], "config_hash": "0" * 16})
    pending, changes, problem = _review(VLLM, status)
    assert pending
    assert changes == []
    assert problem is not None
    assert problem.startswith("the running command line cannot be read")


def test_an_unknown_image_is_said_so_and_listed() -> None:
    saved = VLLM.model_copy(update={"image": "vllm/vllm-openai:v0.12.0", "max_num_seqs": 4})
    pending, changes, problem = _review(saved, _running(VLLM))
    assert pending
    assert changes == [("image", None, "vllm/vllm-openai:v0.12.0"), ("maxNumSeqs", 16, 4)]
    assert problem == "the instance runs another image than the saved one"


def test_a_remembered_launch_names_the_old_image() -> None:
    saved = VLLM.model_copy(update={"image": "vllm/vllm-openai:v0.12.0"})
    assert _review(saved, _running(VLLM), launched=VLLM) == (
        True,
        [("image", IMAGE, "vllm/vllm-openai:v0.12.0")],
        None,
    )


def test_a_new_executable_version_is_pending() -> None:
    saved = LLAMA.model_copy(update={"executable": ExecutableRef(name="llama-server", version="b7000")})
    pending, changes, problem = _review(saved, _running(LLAMA))
    assert pending
    assert changes == [("executable", None, {"name": "llama-server", "version": "b7000"})]
    assert problem == "the instance runs another executable version than the saved one"


def test_a_raw_override_the_normalized_definition_runs_is_not_pending() -> None:
    raw = [
        *build_vllm_args(VLLM.model_copy(update={"max_num_seqs": 2}), total_gib=TOTAL_GIB),
        "--max-num-seqs",
        "16",
    ]
    status = _running(VLLM).model_copy(update={"argv": raw, "config_hash": config_hash(IMAGE, raw)})
    assert _review(VLLM, status) == (False, [], None)


def test_an_older_agent_without_argv_falls_back_to_the_launch_memory() -> None:
    edited = VLLM.model_copy(update={"max_num_seqs": 4})
    status = _running(VLLM).model_copy(update={"argv": None})
    assert _review(edited, status, launched=VLLM) == (True, [("maxNumSeqs", 16, 4)], None)
    assert _review(edited, status) == (True, [], "the node does not report the running command line")


def test_a_stopped_model_lists_nothing() -> None:
    edited = VLLM.model_copy(update={"max_num_seqs": 4})
    status = _running(VLLM).model_copy(update={"state": ModelState.STOPPED})
    assert _review(edited, status) == (False, [], None)


def test_the_process_plumbing_is_not_part_of_the_launch() -> None:
    argv = ["--model", "x.gguf", "--host", "0.0.0.0", "--port", "9"]
    assert launched_argv(LLAMA, argv) == ["--model", "x.gguf"]
    # A vLLM command is the container's own: nothing is taken off it.
    assert launched_argv(VLLM, argv) == argv


def test_no_argv_reads_nothing() -> None:
    assert read_running_config(VLLM, _running(VLLM).model_copy(update={"argv": None})) is None


@given(
    runtime=st.sampled_from(["vllm", "llamacpp"]),
    before=st.tuples(
        st.integers(1, 64), st.sampled_from([2048, 4096, 8192]), st.sampled_from([4.0, 8.0, 20.0])
    ),
    after=st.tuples(
        st.integers(1, 64), st.sampled_from([2048, 4096, 8192]), st.sampled_from([4.0, 8.0, 20.0])
    ),
)
def test_the_list_names_exactly_the_settings_that_moved(
    runtime: str, before: tuple[int, int, float], after: tuple[int, int, float]
) -> None:
    base = VLLM if runtime == "vllm" else LLAMA
    fields = ("max_num_seqs", "max_model_len", "memory_budget_gib")
    launched = base.model_copy(update=dict(zip(fields, before, strict=True)))
    saved = base.model_copy(update=dict(zip(fields, after, strict=True)))
    pending, changes, problem = _review(saved, _running(launched))
    wire = {
        "max_num_seqs": "maxNumSeqs",
        "max_model_len": "maxModelLen",
        "memory_budget_gib": "memoryBudgetGiB",
    }
    moved = [
        (wire[name], old, new) for name, old, new in zip(fields, before, after, strict=True) if old != new
    ]
    assert pending == bool(moved)
    assert sorted(changes, key=str) == sorted(moved, key=str)
    assert problem is None
