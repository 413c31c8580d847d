"""The Overview's memory per model: the lines built from telemetry, and the page in NiceGUI's simulation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nicegui import ui
from tests._support.polling import eventually
from tests.master._stack import running_master
from tests.master.test_ui_pages import TINY, _ready, portal_user

from mirbad_master.ui._model_memory import (
    ModelMemoryLine,
    ServiceMemoryLine,
    gpu_memory_text,
    model_memory_lines,
    service_memory_lines,
    with_gaps,
)
from mirbad_master.ui._overview import DARK_CHART, model_memory_chart_options
from mirbad_protocol import ModelMetrics
from mirbad_protocol.agent import HostGpuSample, ServiceGpuMemory

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
GIB = 1024**3


def sample(
    seconds: int, *, ram: int | None = None, gpu: int | None = None, source: str | None = None
) -> ModelMetrics:
    return ModelMetrics(
        model_id="m",
        at=T0 + timedelta(seconds=seconds),
        memory_bytes=ram,
        gpu_memory_bytes=gpu,
        gpu_memory_source=source,
    )


class History:
    def __init__(self, samples: dict[str, list[ModelMetrics]]) -> None:
        self.samples = samples

    def history(self, model_id: str) -> list[ModelMetrics]:
        return self.samples.get(model_id, [])


def test_gpu_figures_and_the_runtimes_measure_go_on_separate_lines() -> None:
    history = History(
        {
            "vllm": [
                sample(0, ram=GIB, gpu=30 * GIB, source="hostd"),
                sample(5, ram=GIB),  # hostd and nvidia-smi both failed this pass: the runtime's measure
                sample(10, ram=GIB, gpu=31 * GIB, source="nvidia-smi"),
                sample(15, gpu=None, source="hostd"),  # [N/A] and no measure: nothing to draw
            ],
            "llama": [sample(0, ram=GIB // 2)],
            "cold": [sample(0)],
        }
    )
    lines = model_memory_lines(history, ["vllm", "llama", "cold", "unknown"])
    assert lines == [
        ModelMemoryLine("vllm", "GPU", [(T0, 30.0), (T0 + timedelta(seconds=10), 31.0)]),
        ModelMemoryLine("vllm", "RAM", [(T0 + timedelta(seconds=5), 1.0)]),
        ModelMemoryLine("llama", "RAM", [(T0, 0.5)]),
    ]
    options = model_memory_chart_options(lines, dark=True)
    assert [series["name"] for series in options["series"]] == ["vllm · GPU", "vllm · RAM", "llama · RAM"]
    assert options["series"][0]["data"] == [
        [int(T0.timestamp() * 1000), 30.0],
        [int(T0.timestamp() * 1000) + 10_000, 31.0],
    ]
    assert options["legend"]["textStyle"]["color"] == DARK_CHART.text
    # A lone sample shows as a dot; a few MiB still read (three decimals of a GiB).
    assert [series["showSymbol"] for series in options["series"]] == [False, True, True]
    small = model_memory_chart_options([ModelMemoryLine("tiny", "RAM", [(T0, 21 / 1024)])])
    assert small["series"][0]["data"] == [[int(T0.timestamp() * 1000), 0.021]]
    # ECharts spread a lone sample's time axis over two days, labelled by the hour: it spans a minute.
    start = int(T0.timestamp() * 1000)
    assert (small["xAxis"]["min"], small["xAxis"]["max"]) == (start, start + 60_000)
    assert (options["xAxis"]["min"], options["xAxis"]["max"]) == (start, start + 60_000)
    assert "min" not in model_memory_chart_options([])["xAxis"]


def test_a_budget_sent_in_place_of_the_gpus_figure_gets_a_dashed_line_of_its_own() -> None:
    history = History(
        {
            "vllm": [
                sample(0, ram=GIB, gpu=30 * GIB, source="hostd"),
                sample(5, ram=GIB, gpu=24 * GIB, source="budget"),  # hostd failed, the node has a GPU
                sample(10, ram=GIB, gpu=31 * GIB, source="hostd"),
            ],
        }
    )
    lines = model_memory_lines(history, ["vllm"])
    # The budget never joins the measured GPU line, and its sample's RAM is not drawn either.
    assert lines == [
        ModelMemoryLine("vllm", "GPU", [(T0, 30.0), (T0 + timedelta(seconds=10), 31.0)]),
        ModelMemoryLine("vllm", "budget", [(T0 + timedelta(seconds=5), 24.0)]),
    ]
    series = model_memory_chart_options(lines)["series"]
    assert [(s["name"], s.get("lineStyle")) for s in series] == [
        ("vllm · GPU", None),
        ("vllm · budget", {"type": "dashed"}),
    ]
    assert gpu_memory_text(sample(5, gpu=24 * GIB, source="budget")) == "24.0 GiB (budget)"


def test_the_tables_gpu_cell_says_the_size_and_its_source() -> None:
    assert gpu_memory_text(sample(0, gpu=3 * GIB + GIB // 5, source="hostd")) == "3.2 GiB (hostd)"
    assert gpu_memory_text(sample(0, gpu=512 * 1024**2, source="nvidia-smi")) == "512 MiB (nvidia-smi)"
    assert gpu_memory_text(sample(0, gpu=None, source="hostd")) == "not reported (hostd)"
    assert gpu_memory_text(sample(0, ram=GIB)) == "—"
    assert gpu_memory_text(None) == "—"


@pytest.mark.anyio
async def test_the_overview_plots_each_models_gpu_memory(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json=TINY)
        await _ready(master, "tiny")
        now = datetime.now(UTC)
        master.local.telemetry["tiny"] = [
            ModelMetrics(model_id="tiny", at=now - timedelta(seconds=10), memory_bytes=GIB // 4),
            ModelMetrics(
                model_id="tiny",
                at=now,
                memory_bytes=GIB // 4,
                gpu_memory_bytes=2 * GIB,
                gpu_memory_source="hostd",
            ),
        ]
        await eventually(lambda: master.services.telemetry.latest("tiny") is not None, timeout_s=10)
        await eventually(lambda: len(master.services.telemetry.history("tiny")) == 2, timeout_s=10)
        await user.open("/")
        (chart,) = user.find(marker="model-memory-chart").elements
        assert isinstance(chart, ui.echart)
        lines = {series["name"]: [point[1] for point in series["data"]] for series in chart.options["series"]}
        assert lines == {"tiny · GPU": [2.0], "tiny · RAM": [0.25]}
        (table,) = user.find(marker="overview-models").elements
        assert isinstance(table, ui.table)
        (row,) = [row for row in table.rows if row["model"] == "tiny"]
        assert row["gpu"] == "2.0 GiB (hostd)"
        await user.should_see("Memory per model")


def host(seconds: int, **services: int | None) -> HostGpuSample:
    return HostGpuSample(
        at=T0 + timedelta(seconds=seconds),
        source="hostd",
        services=[
            ServiceGpuMemory(unit=f"{name.lower()}.service", name=name, gpu_memory_bytes=used)
            for name, used in services.items()
        ],
    )


def test_host_services_get_lines_of_their_own_named_by_node_only_when_several() -> None:
    one = {"node-1": [host(0, Ollama=4 * GIB), host(5), host(10, Ollama=2 * GIB, Comfy=None)]}
    lines = service_memory_lines(one)
    # Absent from a reading: 0 then; present without a size: no point.
    assert lines == [
        ServiceMemoryLine("Comfy", None, [(T0, 0.0), (T0 + timedelta(seconds=5), 0.0)]),
        ServiceMemoryLine(
            "Ollama", None, [(T0, 4.0), (T0 + timedelta(seconds=5), 0.0), (T0 + timedelta(seconds=10), 2.0)]
        ),
    ]
    assert [line.name for line in lines] == ["svc · Comfy", "svc · Ollama"]
    two = one | {"node-2": [host(0, Ollama=GIB)], "cpu": [host(0)]}
    assert [line.name for line in service_memory_lines(two)] == [
        "svc · Comfy · node-1",
        "svc · Ollama · node-1",
        "svc · Ollama · node-2",
    ]
    options = model_memory_chart_options(service_memory_lines(one))
    assert options["series"][1]["data"][0] == [int(T0.timestamp() * 1000), 4.0]


@pytest.mark.anyio
async def test_the_overview_plots_host_services_beside_the_models(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json=TINY)
        await _ready(master, "tiny")
        now = datetime.now(UTC)
        budget = ModelMetrics(model_id="tiny", at=now, gpu_memory_bytes=GIB, gpu_memory_source="budget")
        master.local.telemetry["tiny"] = [budget]
        master.local.host_samples = [
            HostGpuSample(
                at=now,
                source="hostd",
                services=[ServiceGpuMemory(unit="ollama.service", name="Ollama", gpu_memory_bytes=3 * GIB)],
            )
        ]
        await eventually(lambda: bool(master.services.telemetry.host_histories()), timeout_s=10)
        await eventually(lambda: master.services.telemetry.latest("tiny") is not None, timeout_s=10)
        await user.open("/")
        (chart,) = user.find(marker="model-memory-chart").elements
        assert isinstance(chart, ui.echart)
        lines = {series["name"]: [point[1] for point in series["data"]] for series in chart.options["series"]}
        assert lines == {"tiny · budget": [1.0], "svc · Ollama": [3.0]}
        dashed = [s["name"] for s in chart.options["series"] if s.get("lineStyle") == {"type": "dashed"}]
        assert dashed == ["tiny · budget"]
        await user.should_see("svc: a host service's GPU processes.")


def test_a_models_line_breaks_where_it_was_stopped_instead_of_bridging_the_stop() -> None:
    # Sampled every 5 s, stopped from 20 s to 300 s: no samples then.
    running = [sample(seconds, ram=GIB) for seconds in (0, 5, 10, 15, 20, 300, 305, 310)]
    (line,) = model_memory_lines(History({"m": running}), ["m"])

    drawn = with_gaps(line.points)
    data = model_memory_chart_options([line])["series"][0]["data"]

    assert [value for _, value in drawn] == [1.0] * 5 + [None] + [1.0] * 3
    assert drawn[5][0] == T0 + timedelta(seconds=160)  # the break lies inside the silence
    assert [value for _, value in data].count(None) == 1  # ECharts does not join across a null
    assert with_gaps(line.points[:5]) == line.points[:5]  # a steady line is drawn as it is
