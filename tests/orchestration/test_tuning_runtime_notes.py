"""RuntimeNotes: vLLM's own log lines read for what it resolved, compared with the request.

The fixture lines follow real vLLM logs: the engine's config line (``core.py``, "Initializing a V1 LLM
engine (v0.20.2) with config: …", trimmed to the fields read here), the CUDA graph downgrade
(``compilation.py``, v0.20.2), "Asynchronous scheduling is enabled." (``vllm.py``, v0.20.2) and the
scheduled-tokens notice (``vllm.py``, "max_num_scheduled_tokens is set to … based on the speculative
decoding settings", as vLLM 0.2x prints it). The container's ``(EngineCore pid=…)`` prefix is kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st
from tests.fakes import fake_vllm

from mirbad_orchestration.tuning import AS_REQUESTED, compare_with_request, parse_runtime_log
from mirbad_protocol import ModelDefinition, SpeculativeDecoding

CONFIG_MTP = (
    "(EngineCore pid=199) INFO 05-21 21:03:20 [core.py:109] Initializing a V1 LLM engine (v0.20.2) with "
    "config: model='org/model', speculative_config=SpeculativeConfig(method='mtp', model='org/model', "
    "num_spec_tokens=3), tokenizer='org/model', dtype=torch.bfloat16, max_seq_len=262144, "
    "kv_cache_dtype=fp8, enable_prefix_caching=True, enable_chunked_prefill=True, "
    "compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': "
    "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_num_of_warmups': 1}"
)
CONFIG_PLAIN = (
    "(EngineCore_DP0 pid=178) INFO 04-20 04:20:48 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with "
    "config: model='org/plain', speculative_config=None, tokenizer='org/plain', "
    "compilation_config={'level': 3, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}"
)
ASYNC_ON = "(APIServer pid=1) INFO 05-21 21:03:02 [vllm.py:840] Asynchronous scheduling is enabled."
ASYNC_OFF = "(APIServer pid=1) INFO 05-21 21:03:02 [vllm.py:840] Asynchronous scheduling is disabled."
DOWNGRADE = (
    "(EngineCore pid=199) WARNING 05-21 21:10:10 [compilation.py:1390] CUDAGraphMode.FULL_AND_PIECEWISE is "
    "not supported with spec-decode for attention backend FlashInferBackend (support: "
    "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE"
)
SCHEDULED = (
    "(APIServer pid=1) WARNING 05-21 21:03:02 [vllm.py:1406] max_num_scheduled_tokens is set to 8064 based "
    "on the speculative decoding settings. This may lead to suboptimal performance."
)
NOISE = [
    "(APIServer pid=1) INFO 05-21 21:02:57 [model.py:1680] Using max model len 262144",
    "(APIServer pid=1) INFO 05-21 21:03:02 [scheduler.py:239] Chunked prefill is enabled with "
    "max_num_batched_tokens=32768.",
    "(EngineCore pid=199) INFO 05-21 21:10:12 [kv_cache_utils.py:1708] GPU KV cache size: 5,463,232 tokens",
]
MTP3 = ModelDefinition(
    id="m",
    served_name="m",
    model_path="m",
    speculative=SpeculativeDecoding(method="mtp", num_speculative_tokens=3),
    cudagraph_mode="FULL_AND_PIECEWISE",
    async_scheduling=True,
)
PLAIN = ModelDefinition(id="m", served_name="m", model_path="m")


def test_the_resolved_settings_are_read_from_the_log() -> None:
    notes = parse_runtime_log([*NOISE, ASYNC_ON, CONFIG_MTP, DOWNGRADE, SCHEDULED])

    assert notes.speculative == ("SpeculativeConfig(method='mtp', model='org/model', num_spec_tokens=3)")
    assert (notes.speculative_method, notes.speculative_tokens) == ("mtp", 3)
    assert notes.cudagraph_mode == "PIECEWISE"  # the downgrade after the config line wins
    assert notes.async_scheduling is True
    assert notes.max_num_scheduled_tokens == 8064
    assert notes.notices[1] == (
        "max_num_scheduled_tokens is set to 8064 based on the speculative decoding settings. "
        "This may lead to suboptimal performance."
    )
    assert notes.notices[0].startswith("CUDAGraphMode.FULL_AND_PIECEWISE is not supported")


def test_a_log_that_matches_the_request_reads_as_requested() -> None:
    notes = parse_runtime_log([*NOISE, ASYNC_ON, CONFIG_MTP])
    assert compare_with_request(notes, MTP3) == [AS_REQUESTED]
    plain = parse_runtime_log([CONFIG_PLAIN])
    assert plain.speculative == "None"
    assert compare_with_request(plain, PLAIN) == [AS_REQUESTED]


def test_what_differs_from_the_request_is_named() -> None:
    notes = parse_runtime_log([ASYNC_OFF, CONFIG_MTP, DOWNGRADE, SCHEDULED])
    found = compare_with_request(notes, MTP3)
    assert found[:2] == [
        "cudagraph_mode PIECEWISE (requested FULL_AND_PIECEWISE)",
        "async scheduling off (requested on)",
    ]
    assert any(note.startswith("max_num_scheduled_tokens is set to 8064") for note in found)
    fewer = MTP3.model_copy(
        update={"speculative": SpeculativeDecoding(method="mtp", num_speculative_tokens=2)}
    )
    assert "speculative tokens 3 (requested 2)" in compare_with_request(
        parse_runtime_log([CONFIG_MTP]), fewer
    )
    assert (
        compare_with_request(parse_runtime_log([CONFIG_PLAIN]), MTP3)[0] == "speculative off (requested on)"
    )
    assert compare_with_request(parse_runtime_log([CONFIG_MTP]), PLAIN)[0].startswith(
        "speculative SpeculativeConfig(method='mtp'"
    )


def test_a_log_without_the_lines_says_nothing_differs() -> None:
    notes = parse_runtime_log(NOISE)
    assert (notes.cudagraph_mode, notes.speculative, notes.async_scheduling) == (None, None, None)
    assert compare_with_request(notes, MTP3) == [AS_REQUESTED]


@given(st.lists(st.text(max_size=200), max_size=30))
def test_any_text_parses_without_raising(lines: list[str]) -> None:
    notes = parse_runtime_log(lines)
    assert compare_with_request(notes, MTP3)


def _fake_vllm_log(*flags: str) -> list[str]:
    """The start-up log of the fake vLLM with the simulator on, its batch refused so it exits at once."""
    env = {**os.environ, "FAKE_VLLM_SIM_STEP_S": "0.01", "FAKE_VLLM_SIM_BATCH_LIMIT": "1"}
    argv = [sys.executable, fake_vllm.__file__, "--model", "/models/sim", *flags]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=False)
    assert done.returncode == 1, done.stderr  # the refused batch: the notices come before it
    return done.stdout.splitlines()


def test_the_parser_reads_the_lines_the_fake_vllm_simulator_prints() -> None:
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 2})
    graphs = json.dumps({"cudagraph_mode": "FULL_AND_PIECEWISE"})
    flags = ["--max-num-seqs", "8", "--max-num-batched-tokens", "8192", "--speculative-config", spec]
    notes = parse_runtime_log(_fake_vllm_log(*flags, "--async-scheduling", "-cc", graphs))
    plain = parse_runtime_log(_fake_vllm_log("--no-async-scheduling"))
    asked = MTP3.model_copy(
        update={"speculative": SpeculativeDecoding(method="mtp", num_speculative_tokens=2), "max_num_seqs": 8}
    )

    assert (notes.speculative_method, notes.speculative_tokens) == ("mtp", 2)
    assert notes.cudagraph_mode == "PIECEWISE"  # started FULL_AND_PIECEWISE, downgraded after
    assert notes.async_scheduling is True
    assert notes.max_num_scheduled_tokens == 8192 - 8 * 2
    assert compare_with_request(notes, asked) == [
        "cudagraph_mode PIECEWISE (requested FULL_AND_PIECEWISE)",
        *notes.notices,
    ]
    assert notes.notices[0] == (
        "max_num_scheduled_tokens is set to 8176 based on the speculative decoding settings. "
        "This may lead to suboptimal performance."
    )
    assert notes.notices[1].startswith("CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode")
    assert (plain.speculative, plain.cudagraph_mode, plain.async_scheduling) == (
        "None",
        "FULL_AND_PIECEWISE",
        False,
    )
    assert plain.notices == ()


def test_vllm_0_32_s_warning_that_it_leaves_async_scheduling_off_is_read() -> None:
    # vllm/config/vllm.py of vLLM 0.32.0, as its logger prints it.
    line = (
        "(APIServer pid=1) WARNING 12-01 20:50:01 [vllm.py:1606] Async scheduling not supported with "
        "ngram-based speculative decoding and will be disabled."
    )
    notes = parse_runtime_log([line])
    assert notes.async_scheduling is False
    assert notes.notices == (
        "Async scheduling not supported with ngram-based speculative decoding and will be disabled.",
    )
    assert (
        parse_runtime_log(["Async scheduling is disabled because the V1 model runner …"]).async_scheduling
        is False
    )
