"""The builder, the flag tables and the fake vLLM against the pinned vLLM's own ``vllm serve`` parser.

No container: vLLM's parser runs in the vLLM virtualenv as a child process, one batch per test. A
refusal is a failure: every golden command line, every example, the registry's seed and a bounded
hypothesis sample of definitions must be command lines the real vLLM accepts, and Mirbad's reading of
a raw definition (typed fields plus extra arguments as written) must be what vLLM itself makes of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from tests._support.vllm_strategies import accepted_definitions
from tests.fakes.fake_vllm import build_parser as fake_parser
from tests.vllm.conftest import Parsed, VllmParser

from mirbad_orchestration.commandline import build_vllm_args, check_vllm_values
from mirbad_orchestration.commandline._vllm_flags import CHOICES, OWNED_SCALARS, OWNED_SWITCHES
from mirbad_orchestration.registry import SEED_MODEL
from mirbad_protocol import InvalidFieldError, ModelDefinition

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = ROOT / "tests" / "orchestration" / "__snapshots__" / "test_vllm_args"
UTILIZATION = "0.5000"
SAMPLE_SIZE = 40
# A base argv for one-off spellings: the builder's output for a plain model.
PLAIN = ModelDefinition(id="p", served_name="p", model_path="p")


def _refusals(parsed: list[Parsed], names: list[str]) -> dict[str, list[str]]:
    return {name: result.error for name, result in zip(names, parsed, strict=True) if not result.ok}


def _built(definition: ModelDefinition) -> list[str]:
    return build_vllm_args(definition, utilization=UTILIZATION)


def _raw(definition: ModelDefinition) -> list[str]:
    """The typed fields as the builder writes them, then ``extraArgs`` exactly as the user wrote them."""
    return [*_built(definition.model_copy(update={"extra_args": []})), *definition.extra_args]


def test_every_golden_vllm_command_line_parses(vllm_parser: VllmParser) -> None:
    goldens = {path.name: json.loads(path.read_text()) for path in sorted(GOLDEN_DIR.glob("*.json"))}
    assert len(goldens) >= 40
    assert _refusals(vllm_parser.parse(list(goldens.values())), list(goldens)) == {}


def test_the_examples_the_seed_and_the_documented_spellings_parse(vllm_parser: VllmParser) -> None:
    examples = {
        path.name: ModelDefinition.from_wire_json(path.read_text())
        for path in sorted((ROOT / "examples").glob("*.json"))
    }
    argvs = {name: _built(model) for name, model in examples.items() if model.runtime == "vllm"}
    argvs["seed"] = _built(SEED_MODEL)
    # The spellings docs/command-lines.md shows, each after a plain model's command line.
    for spelling in DOCUMENTED_SPELLINGS:
        argvs[" ".join(spelling)] = [*_built(PLAIN), *spelling]
    assert {"vllm-qwen3.json", "seed"} <= set(argvs)
    assert _refusals(vllm_parser.parse(list(argvs.values())), list(argvs)) == {}


DOCUMENTED_SPELLINGS = [
    ["--max-num-seqs", "32"],
    ["--max-num-seqs=32"],
    ["--max_num_seqs", "32"],
    ["--speculative_config", '{"method":"mtp"}'],
    ["--no_enable_prefix_caching"],
    ["-cc", '{"mode":3}'],
    ["--speculative-config.num_speculative_tokens=3"],
    ["--speculative_config.model", "/models/d"],
    ["-cc.cudagraph_mode=FULL"],
    ["--compilation-config.pass_config.fuse_norm_quant=true"],
    ["--compilation-config.cudagraph_capture_sizes+=1,2"],
    ["--async-scheduling"],
    ["--no-async-scheduling"],
    ["-O3"],
]


def _sample() -> list[ModelDefinition]:
    drawn: list[ModelDefinition] = []

    @settings(
        max_examples=SAMPLE_SIZE,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(accepted_definitions())
    def collect(model: ModelDefinition) -> None:
        drawn.append(model)

    collect()
    return drawn


def test_a_sample_of_definitions_parses_and_means_what_its_raw_form_means(vllm_parser: VllmParser) -> None:
    models = _sample()
    assert len(models) >= SAMPLE_SIZE // 2
    normalized = [_built(model) for model in models]
    raw = [_raw(model) for model in models]
    parsed = vllm_parser.parse([*normalized, *raw])
    built, written = parsed[: len(models)], parsed[len(models) :]
    names = [f"{index}: {argv}" for index, argv in enumerate(normalized)]
    assert _refusals(built, names) == {}
    assert _refusals(written, [f"{index}: {argv}" for index, argv in enumerate(raw)]) == {}
    for index, (ours, theirs) in enumerate(zip(built, written, strict=True)):
        assert ours.settings is not None
        assert theirs.settings is not None
        differing = {key for key in ours.settings if ours.settings[key] != theirs.settings.get(key)}
        assert differing == set(), f"{index}: raw {raw[index]} vs normalized {normalized[index]}"


def test_the_fake_vllm_knows_only_flags_the_real_parser_has(vllm_parser: VllmParser) -> None:
    real = vllm_parser.flags
    fake = {option: action for action in fake_parser()._actions for option in action.option_strings}
    fake.pop("-h")
    fake.pop("--help")
    assert sorted(set(fake) - set(real)) == []
    takes_value = {option: action.nargs != 0 for option, action in fake.items()}
    assert takes_value == {option: real[option]["takesValue"] for option in fake}
    # Every flag the builder emits is one the fake parses, so a fast test sees what the real one would.
    example = ModelDefinition.from_wire_json((ROOT / "examples" / "vllm-qwen3.json").read_text())
    emitted = {arg for arg in _built(example.model_copy(update={"extra_args": []})) if arg.startswith("-")}
    assert emitted <= set(fake)


def test_the_owned_flags_and_the_choices_table_match_the_pinned_vllm(vllm_parser: VllmParser) -> None:
    real = vllm_parser.flags
    assert set(OWNED_SCALARS) | set(OWNED_SWITCHES) <= set(real)
    assert {"--speculative-config", "--compilation-config", "-cc"} <= set(real)
    assert {flag: sorted(allowed) for flag, (_, allowed) in CHOICES.items()} == {
        flag: real[flag]["choices"] for flag in CHOICES
    }


REFUSED_AT_SAVE = {
    "kvCacheDtype": PLAIN.model_copy(update={"kv_cache_dtype": "fp4"}),
    "mambaCacheMode": PLAIN.model_copy(update={"mamba_cache_mode": "all"}),
    "compilationConfig": PLAIN.model_copy(update={"compilation_config": {"level": 3}}),
    "extraArgs": PLAIN.model_copy(update={"extra_args": ["--dtype", "bf16"]}),
}


@pytest.mark.parametrize("field", REFUSED_AT_SAVE)
def test_what_the_save_time_check_refuses_vllm_refuses(vllm_parser: VllmParser, field: str) -> None:
    model = REFUSED_AT_SAVE[field]
    with pytest.raises(InvalidFieldError) as refused:
        check_vllm_values(model)
    assert refused.value.field == field
    [parsed] = vllm_parser.parse([_built(model)])
    assert not parsed.ok
    assert parsed.error
