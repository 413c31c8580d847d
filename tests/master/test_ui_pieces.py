"""The portal's small pure parts: memory history, snippets, formats, the key form, labels."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_master._views import ModelView, SettingChangeView
from mirbad_master.keys._snippets import KEY_PLACEHOLDER, snippets
from mirbad_master.keys.page import key_request, snippet_model, usage_line, usage_totals
from mirbad_master.models._editor import models_url, saved_url
from mirbad_master.models.page import tags_query
from mirbad_master.models.panels import change_line
from mirbad_master.nodes.page import runtime_text
from mirbad_master.nodes.views import catalogue_hint, lacks_llama_server
from mirbad_master.ui._fleet import ModelRow
from mirbad_master.ui._format import ago, gib, memory_in_use, per_second, percent
from mirbad_master.ui._memory_history import FLEET, MemoryHistory
from mirbad_master.ui._overview import DARK_CHART, LIGHT_CHART, _model_row, history_chart_options
from mirbad_master.ui._playground import MAX_TOKENS_CAP, default_max_tokens
from mirbad_orchestration.fleet import NodeState
from mirbad_protocol import (
    ExecutableRef,
    MemorySnapshot,
    ModelDefinition,
    ModelMetrics,
    ModelState,
    ModelStatus,
    RouterModelStats,
)
from mirbad_protocol.admin import MAX_KEY_RATE_LIMIT, KeyUsage
from mirbad_protocol.agent import AgentInfo, ContainerRuntimeInfo, ProcessRuntimeInfo

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def node(node_id: str, used: float, total: float, *, at: datetime, reachable: bool = True) -> NodeState:
    memory = MemorySnapshot(total_gib=total, available_gib=total - used, taken_at=at)
    return NodeState(node_id, reachable=reachable, memory=memory)


def test_the_memory_history_keeps_each_node_and_the_fleet_sum() -> None:
    now = iter([T0, T0 + timedelta(seconds=5), T0 + timedelta(seconds=10)])
    history = MemoryHistory(capacity=2, clock=lambda: next(now))

    history.sample([node("a", 10, 64, at=T0), node("b", 4, 32, at=T0)])
    history.sample(
        [node("a", 12, 64, at=T0 + timedelta(seconds=5)), node("b", 4, 32, at=T0, reachable=False)]
    )
    history.sample([node("a", 12, 64, at=T0 + timedelta(seconds=5))])  # not read again: not sampled again

    assert history.names() == ["a", "b"]
    # b missed one poll: it keeps counting with its last value, the fleet line does not dip.
    assert [(s.at, s.used_gib, s.total_gib) for s in history.series(FLEET)] == [
        (T0, 14, 96),
        (T0 + timedelta(seconds=5), 16, 96),
    ]
    assert [s.used_gib for s in history.series("a")] == [10, 12]
    assert [s.used_gib for s in history.series("b")] == [4]
    options = history_chart_options(history)
    assert [series["name"] for series in options["series"]] == ["Fleet", "a", "b"]
    assert options["series"][1]["data"][0] == [int(T0.timestamp() * 1000), 10]


def test_a_node_silent_for_longer_than_the_carry_leaves_the_fleet_sum() -> None:
    history = MemoryHistory(carry_s=30)
    history.sample([node("a", 10, 64, at=T0), node("b", 4, 32, at=T0)])
    history.sample([node("a", 10, 64, at=T0 + timedelta(seconds=35)), node("b", 4, 32, at=T0)])

    assert [(s.used_gib, s.total_gib) for s in history.series(FLEET)] == [(14, 96), (10, 64)]


@st.composite
def _misaligned_polls(draw: st.DrawFn) -> tuple[list[float], list[list[NodeState]]]:
    """Nodes with steady memory, read at their own offsets, each missing some polls (never two in a row)."""
    used = draw(st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=4))
    offsets = draw(st.lists(st.floats(0, 4.9), min_size=len(used), max_size=len(used)))
    polls: list[list[NodeState]] = []
    missed = [False] * len(used)
    for tick in range(draw(st.integers(min_value=2, max_value=12))):
        states = []
        for index, value in enumerate(used):
            miss = tick > 0 and not missed[index] and draw(st.booleans())
            missed[index] = miss
            at = T0 + timedelta(seconds=tick * 5 + offsets[index])
            states.append(node(f"n{index}", value, 64, at=at, reachable=not miss))
        polls.append(states)
    return [float(value) for value in used], polls


@given(_misaligned_polls())
def test_the_fleet_line_is_flat_when_every_node_is_steady(
    case: tuple[list[float], list[list[NodeState]]],
) -> None:
    used, polls = case
    history = MemoryHistory()
    for states in polls:
        history.sample(states)

    assert {sample.used_gib for sample in history.series(FLEET)} == {sum(used)}


def test_snippets_name_the_endpoint_and_model_and_never_a_stored_secret() -> None:
    code = snippets("http://gpu.lan:8080/v1/", "qwen3")

    assert code["curl"].startswith("curl --max-time 60 http://gpu.lan:8080/v1/chat/completions")
    assert f"Bearer {KEY_PLACEHOLDER}" in code["curl"]
    assert 'base_url="http://gpu.lan:8080/v1"' in code["python"]
    assert 'os.environ["MIRBAD_API_KEY"]' in code["python"]
    assert 'baseURL: "http://gpu.lan:8080/v1"' in code["javascript"]
    assert '"qwen3"' in code["javascript"]
    ast.parse(code["python"])
    assert "api_key='mb-x'" in snippets("http://h/v1", "m", key="mb-x")["python"]


def test_the_snippets_are_for_a_ready_model_when_there_is_one() -> None:
    assert snippet_model(["alpha", "beta", "gamma"], ready=["gamma", "beta"]) == "beta"
    assert snippet_model(["alpha", "beta"], ready=[]) == "alpha"
    assert snippet_model([], ready=[]) == "my-model"


def test_the_key_form_turns_days_and_limits_into_a_create_request() -> None:
    values = {"name": " notebook ", "allowedModels": ["qwen"], "expiresAt": 2, "requestsPerMinute": 60.0}

    request, errors = key_request(values, T0)

    assert errors == {}
    assert request is not None
    assert (request.name, request.allowed_models) == ("notebook", ("qwen",))
    assert request.expires_at == T0 + timedelta(days=2)
    assert (request.requests_per_minute, request.tokens_per_minute) == (60, None)


def test_the_key_form_reports_each_invalid_input() -> None:
    request, errors = key_request({"name": "", "expiresAt": 0, "tokensPerMinute": 1.5}, T0)

    assert request is None
    assert set(errors) == {"name", "expiresAt", "tokensPerMinute"}


def test_usage_is_summed_per_key() -> None:
    usage = [
        KeyUsage(key_id="k1", served_name="a", prompt_tokens=10, completion_tokens=5, requests=2),
        KeyUsage(key_id="k1", served_name="b", prompt_tokens=1, completion_tokens=1, requests=1),
        KeyUsage(key_id="k2", served_name="a", prompt_tokens=0, completion_tokens=0, requests=4),
    ]

    assert usage_totals(usage) == {"k1": (3, 17), "k2": (4, 0)}


def test_a_keys_usage_line_agrees_in_number() -> None:
    assert usage_line(1, 1) == "1 request · 1 token"
    assert usage_line(0, 2) == "0 requests · 2 tokens"


@pytest.mark.parametrize(
    ("selected", "toggled", "url"),
    [
        ([], "chat", "/models?tags=chat"),
        (["chat"], "tools", "/models?tags=chat,tools"),
        (["chat", "tools"], "chat", "/models?tags=tools"),
        (["chat"], "chat", "/models"),
    ],
)
def test_a_tag_chip_adds_or_removes_its_tag_from_the_url(selected: list[str], toggled: str, url: str) -> None:
    assert tags_query(selected, toggled) == url


@pytest.mark.parametrize(
    ("tags", "saved", "cancelled"),
    [
        ([], "/models?focus=tiny", "/models"),
        (["chat"], "/models?tags=chat&focus=tiny", "/models?tags=chat"),
        (["chat", "a b"], "/models?tags=chat,a%20b&focus=tiny", "/models?tags=chat,a%20b"),
    ],
)
def test_the_editor_goes_back_to_the_filter_it_was_opened_from(
    tags: list[str], saved: str, cancelled: str
) -> None:
    assert (saved_url("tiny", tags), models_url(tags)) == (saved, cancelled)


def test_a_changed_setting_reads_old_to_new() -> None:
    change = SettingChangeView(field="maxNumSeqs", old=16, new=32, needs_restart=True)
    assert change_line(change) == "maxNumSeqs: 16 -> 32"
    assert change_line(change.model_copy(update={"old": None, "new": "fp8"})) == 'maxNumSeqs: null -> "fp8"'


def test_runtimes_are_described_with_their_executables() -> None:
    process = ProcessRuntimeInfo(
        runtime="llamacpp", executables=[ExecutableRef(name="llama-server", version="b6000")]
    )
    assert runtime_text(process) == "llamacpp (process: llama-server@b6000)"
    assert runtime_text(ContainerRuntimeInfo(runtime="vllm", network="mirbad")) == (
        "vllm (container, network mirbad)"
    )


def test_numbers_and_times_read_the_same_everywhere() -> None:
    assert gib(12.345) == "12.3 GiB"
    assert gib(None) == "—"
    assert per_second(None) == "—"
    assert per_second(41.96) == "42.0 tok/s"
    assert percent(5, 0) == 0.0
    assert percent(150, 100) == 1.0
    assert ago(None, T0) == "never"
    assert ago(T0 - timedelta(seconds=5), T0) == "5 s ago"
    assert ago(T0 - timedelta(minutes=5), T0) == "5 min ago"
    assert ago(T0 - timedelta(hours=5), T0) == "5 h ago"
    assert ago(T0 - timedelta(days=5), T0) == "5 d ago"


def test_a_models_memory_reads_measured_where_reported_else_its_budget() -> None:
    assert memory_in_use(312 * 1024**2, 0.5) == "312 MiB measured"
    assert memory_in_use(int(9.44 * 1024**3), 24) == "9.4 GiB measured"
    assert memory_in_use(None, 0.5) == "budget 512 MiB"
    assert memory_in_use(None, 24) == "budget 24.0 GiB"
    assert memory_in_use(None, None) == "—"


def test_the_overview_row_says_which_memory_it_shows() -> None:
    definition = ModelDefinition(id="tiny", served_name="tiny", model_path="tiny", memory_budget_gib=0.5)
    status = ModelStatus(id="tiny", served_name="tiny", state=ModelState.READY, budget_gib=0.5)
    view = ModelView(definition=definition, status=status)
    router = RouterModelStats(served_name="tiny")
    measured = ModelMetrics(model_id="tiny", at=T0, memory_bytes=312 * 1024**2)
    unmeasured = ModelMetrics(model_id="tiny", at=T0)

    assert _model_row(ModelRow(view, measured, router))["memory"] == "312 MiB measured"
    assert _model_row(ModelRow(view, unmeasured, router))["memory"] == "budget 512 MiB"
    assert _model_row(ModelRow(view, None, router))["memory"] == "budget 512 MiB"


def test_the_playground_answer_is_a_quarter_of_a_small_context() -> None:
    assert default_max_tokens(256) == 64
    assert default_max_tokens(32_768) == MAX_TOKENS_CAP
    assert default_max_tokens(2) == 1
    assert default_max_tokens(None) == MAX_TOKENS_CAP


@given(st.integers(min_value=1, max_value=10_000_000))
def test_the_default_answer_leaves_the_prompt_most_of_the_context(context: int) -> None:
    tokens = default_max_tokens(context)
    assert 1 <= tokens <= MAX_TOKENS_CAP
    assert tokens * 4 <= max(context, 4)


def test_a_node_lacks_a_llama_server_only_when_its_catalogue_is_known_and_empty() -> None:
    def info(*runtimes: ContainerRuntimeInfo | ProcessRuntimeInfo) -> AgentInfo:
        return AgentInfo(node_name="n", version="1", runtimes=list(runtimes))

    server = ExecutableRef(name="llama-server", version="b6000")
    assert lacks_llama_server(info(ProcessRuntimeInfo(runtime="llamacpp", executables=[])))
    assert lacks_llama_server(info(ContainerRuntimeInfo(runtime="vllm")))
    assert not lacks_llama_server(info(ProcessRuntimeInfo(runtime="llamacpp", executables=[server])))
    assert not lacks_llama_server(None)
    assert "mirbad-agent executables add PATH" in catalogue_hint("gpu-1")
    assert "mirbad up" in catalogue_hint("gpu-1")


def _luminance(color: str) -> float:
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    light, dark = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize(("dark", "card"), [(False, "#ffffff"), (True, "#1d1d1d")])
def test_every_text_of_the_memory_chart_is_readable_on_its_theme(dark: bool, card: str) -> None:
    options = history_chart_options(MemoryHistory(), dark=dark)
    colors = DARK_CHART if dark else LIGHT_CHART

    texts = [
        options["legend"]["textStyle"],
        options["xAxis"]["axisLabel"],
        options["yAxis"]["axisLabel"],
        options["yAxis"]["nameTextStyle"],
        options["tooltip"]["textStyle"],
    ]
    assert {text["color"] for text in texts} == {colors.text}
    assert _contrast(colors.text, card) >= 4.5  # WCAG AA for normal text
    assert _contrast(colors.text, colors.tooltip) >= 4.5
    grid = options["yAxis"]["splitLine"]["lineStyle"]["color"]
    assert 1.1 < _contrast(grid, card) < 2  # seen, but fainter than the data


def test_samples_within_one_bucket_make_one_fleet_point_at_the_newest_sample() -> None:
    history = MemoryHistory(bucket_s=5)
    history.sample([node("a", 10, 64, at=T0 + timedelta(seconds=1))])
    history.sample([node("a", 11, 64, at=T0 + timedelta(seconds=3))])
    history.sample([node("a", 12, 64, at=T0 + timedelta(seconds=6))])

    assert [(s.at, s.used_gib) for s in history.series(FLEET)] == [
        (T0 + timedelta(seconds=3), 11),
        (T0 + timedelta(seconds=6), 12),
    ]


def test_the_key_form_holds_rate_limits_to_the_apis_user_input_limit() -> None:
    request, errors = key_request({"name": "big", "tokensPerMinute": MAX_KEY_RATE_LIMIT + 1}, T0)
    fits, none = key_request({"name": "big", "tokensPerMinute": MAX_KEY_RATE_LIMIT}, T0)

    assert (request, set(errors)) == (None, {"tokensPerMinute"})
    assert (fits is not None, none) == (True, {})
