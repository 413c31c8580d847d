"""Tuning dimensions: the plans per runtime, unknown steps, the extra-flag rewrite and the fingerprint."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.exceptions import UnknownTuningStepError
from mirbad_orchestration.tuning import apply_best, fingerprint, llamacpp_dimensions, plan_for, set_extra_flag
from mirbad_protocol import ExecutableRef, ModelDefinition

LLAMA = ModelDefinition(
    id="tiny",
    served_name="tiny",
    runtime="llamacpp",
    executable=ExecutableRef(name="llama-server", version="1"),
    model_path="tiny.gguf",
    max_num_seqs=2,
)
VLLM = ModelDefinition(id="m", served_name="m", model_path="m")


def test_llama_server_tunes_its_own_dimensions_in_order() -> None:
    assert llamacpp_dimensions(cpu_count=8).steps == [
        "parallel",
        "threads",
        "batch_size",
        "ubatch_size",
        "flash_attn",
        "kv_cache_dtype",
    ]
    assert llamacpp_dimensions(cpu_count=8).dimensions[1].values == (4, 8)
    assert plan_for(LLAMA).steps == ["parallel", "flash_attn"]
    assert len(plan_for(LLAMA, search="full").steps) == 6


def test_unknown_steps_are_refused_naming_each() -> None:
    with pytest.raises(UnknownTuningStepError) as refused:
        plan_for(VLLM, steps=["max_num_seqs", "threads", "warp"])
    assert refused.value.field == "steps"
    assert refused.value.unknown == ["threads", "warp"]
    assert "threads, warp" in str(refused.value)


def test_a_candidate_is_normalized_so_a_raw_flag_cannot_override_it() -> None:
    raw = LLAMA.model_copy(update={"extra_args": ["--parallel", "4", "--flash-attn", "on"]})
    [parallel] = [d for d in plan_for(raw).dimensions if d.name == "parallel"]
    candidate = parallel.candidate(raw, 1)
    assert candidate.max_num_seqs == 1
    assert "--parallel" not in candidate.extra_args
    [flash] = [d for d in plan_for(raw).dimensions if d.name == "flash_attn"]
    assert flash.candidate(raw, "off").extra_args == ["--flash-attn", "off"]


def test_the_fingerprint_is_the_effective_configurations() -> None:
    spelled = LLAMA.model_copy(update={"extra_args": ["--parallel=2"]})
    assert fingerprint(spelled) == fingerprint(LLAMA)
    assert fingerprint(LLAMA.model_copy(update={"max_num_seqs": 4})) != fingerprint(LLAMA)


_OTHER = st.sampled_from(["--jinja", "--seed", "7", "--temp", "0.5", "-ngl", "12", "--no-mmap"])
_FLAG = st.sampled_from(["--threads", "-t", "--threads=3", "--threads 5", "-t=2"])


@given(st.lists(st.one_of(_OTHER, st.tuples(_FLAG, st.sampled_from(["1", "9"])).map(" ".join)), max_size=8))
def test_set_extra_flag_leaves_exactly_one_setting_and_keeps_the_rest(extra: list[str]) -> None:
    result = set_extra_flag(extra, ("--threads", "-t"), "4")
    assert result[-2:] == ["--threads", "4"]
    rest = result[:-2]
    assert not any(element.split("=")[0].split(" ")[0] in ("--threads", "-t") for element in rest)
    assert rest == [
        element for element in extra if element.split("=")[0].split(" ")[0] not in ("--threads", "-t")
    ]


def test_apply_best_takes_only_the_tuned_settings_and_leaves_no_owned_flag() -> None:
    saved = LLAMA.model_copy(update={"extra_args": ["--threads", "2", "--jinja", "-np", "2"]})
    best = LLAMA.model_copy(
        update={"max_num_seqs": 1, "extra_args": ["--threads", "8", "--flash-attn", "on"]}
    )
    edited = saved.model_copy(update={"max_model_len": 512})  # changed by the user after the run

    applied = apply_best(edited, best)

    assert applied.max_num_seqs == 1
    assert applied.max_model_len == 512
    assert applied.extra_args == ["--jinja", "--threads", "8", "--flash-attn", "on"]
    assert "-np" not in applied.extra_args
    vllm = apply_best(VLLM.model_copy(update={"extra_args": ["--max-num-seqs", "64"]}), VLLM)
    assert (vllm.max_num_seqs, vllm.extra_args) == (16, [])
