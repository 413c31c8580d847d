"""The model registry: validation, atomic saves, concurrency, seeding and fail-closed loading."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration.exceptions import (
    DuplicateServedNameError,
    RegistryError,
    UnknownModelError,
    UnreadableFlagError,
)
from mirbad_orchestration.registry import SEED_MODEL, ModelRegistry
from mirbad_protocol import InvalidFieldError, ModelDefinition

pytestmark = pytest.mark.anyio


def keep(definition: ModelDefinition) -> ModelDefinition:
    """A normalizer that changes nothing, so these tests do not depend on the runtime normalizers."""
    return definition


def lift_max_num_seqs(definition: ModelDefinition) -> ModelDefinition:
    """A small stand-in for the vLLM normalizer: lifts ``--max-num-seqs N`` into its typed field."""
    rest: list[str] = []
    seqs = definition.max_num_seqs
    args = iter(definition.extra_args)
    for arg in args:
        if arg != "--max-num-seqs":
            rest.append(arg)
            continue
        value = next(args, "")
        if not value.isdigit():
            raise UnreadableFlagError("--max-num-seqs", f"{value!r} is not a whole number")
        seqs = int(value)
    return definition.model_copy(update={"max_num_seqs": seqs, "extra_args": rest})


def model(model_id: str, served_name: str | None = None, **fields: Any) -> ModelDefinition:
    wire = {"id": model_id, "servedName": served_name or model_id, "modelPath": model_id, **fields}
    return ModelDefinition.from_wire(wire)


def entry(model_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": model_id, "servedName": model_id, "modelPath": model_id, **fields}


def write_document(data_dir: Path, document: object) -> bytes:
    raw = json.dumps(document).encode()
    (data_dir / "models.json").write_bytes(raw)
    return raw


def stored(data_dir: Path) -> Any:
    return json.loads((data_dir / "models.json").read_text(encoding="utf-8"))


def listing(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def registry(data_dir: Path, **kwargs: Any) -> ModelRegistry:
    kwargs.setdefault("normalize", keep)
    return ModelRegistry(data_dir, **kwargs)


class SimulatedCrashError(Exception):
    """The process dies between writing the temporary file and replacing models.json."""


# ---------------------------------------------------------------- seeding


async def test_first_run_seeds_one_stopped_example(tmp_path: Path, snapshot_json: SnapshotAssertion) -> None:
    data_dir = tmp_path / "data"  # not created yet: the registry creates it
    models = await registry(data_dir).list()
    assert [m.id for m in models] == ["ornith-9b-fp8"]
    assert models[0] == SEED_MODEL
    assert not models[0].auto_start
    assert stored(data_dir) == snapshot_json
    if os.name == "posix":
        assert stat.S_IMODE((data_dir / "models.json").stat().st_mode) == 0o644


async def test_seed_is_not_restored_after_it_is_deleted(tmp_path: Path) -> None:
    first = registry(tmp_path)
    removed = await first.delete("ornith-9b-fp8")
    assert removed.id == "ornith-9b-fp8"
    assert stored(tmp_path) == {"schemaVersion": 1, "models": []}
    assert await registry(tmp_path).list() == []


# ---------------------------------------------------------------- CRUD


async def test_upsert_get_list_delete(tmp_path: Path) -> None:
    write_document(tmp_path, {"schemaVersion": 1, "models": []})
    reg = registry(tmp_path)
    a = await reg.upsert(model("a", tags=["Chat", "long context", "chat"]))
    await reg.upsert(model("b"))
    assert a.tags == ["chat", "long-context"]
    assert await reg.get("a") == a
    changed = await reg.upsert(model("a", "a-renamed", maxNumSeqs=64))
    assert [m.id for m in await reg.list()] == ["a", "b"]  # replaced in place, order kept
    assert (await reg.get("a")).served_name == "a-renamed"
    assert await registry(tmp_path).get("a") == changed
    assert (await reg.delete("b")).id == "b"
    with pytest.raises(UnknownModelError):
        await reg.get("b")
    with pytest.raises(UnknownModelError):
        await reg.delete("b")


async def test_every_field_survives_a_round_trip_through_the_file(tmp_path: Path) -> None:
    full = model(
        "full",
        "Full-Model",
        image="vllm/vllm-openai:v0.11.0",
        quantization="fp8",
        maxNumBatchedTokens=8192,
        memoryBudgetGiB=48.5,
        speculative={"method": "mtp", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1},
        compilationConfig={"mode": 3},
        cudaGraphMode="FULL_AND_PIECEWISE",
        enablePrefixCaching=False,
        extraArgs=["--trust-remote-code"],
        sources=[{"repoId": "org/full", "folder": "full", "allowPatterns": ["*.safetensors"]}],
        placement={"nodeId": "spark-1", "gpuUuids": ["GPU-1"]},
        autoStartOnRequest=True,
    )
    saved = await registry(tmp_path).upsert(full)
    assert await registry(tmp_path).get("full") == saved == full
    # Defaults are written out too, so a later change of a default never changes a stored model.
    [on_disk] = [m for m in stored(tmp_path)["models"] if m["id"] == "full"]
    assert on_disk["maxModelLen"] == 8192
    assert on_disk["autoStart"] is False
    assert "reasoningParser" not in on_disk


async def test_find_by_served_name_ignores_case(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    await reg.upsert(model("a", "Qwen3-8B"))
    found = await reg.find_by_served_name("qwen3-8b")
    assert found is not None
    assert found.id == "a"
    assert await reg.find_by_served_name("qwen3") is None


async def test_unplace_clears_the_placement_of_a_nodes_models_in_one_write(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    await reg.upsert(model("a", placement={"nodeId": "gpu-1"}))
    await reg.upsert(model("b", placement={"nodeId": "gpu-2"}))
    await reg.upsert(model("c", placement={"nodeId": "gpu-1", "gpuUuids": ["GPU-1"]}))

    placed = [m.id for m in await reg.placed_on("gpu-1")]
    unplaced = [m.id for m in await reg.unplace("gpu-1")]

    assert placed == unplaced == ["a", "c"]
    assert await reg.placed_on("gpu-1") == []
    by_id = {m["id"]: m for m in stored(tmp_path)["models"]}
    assert "placement" not in by_id["a"]
    assert "placement" not in by_id["c"]
    assert by_id["b"]["placement"]["nodeId"] == "gpu-2"
    assert await reg.unplace("gpu-1") == []


async def test_a_bare_array_reads_and_becomes_the_object_form_at_the_next_save(tmp_path: Path) -> None:
    write_document(tmp_path, [entry("hand-written")])
    reg = registry(tmp_path)
    assert [m.id for m in await reg.list()] == ["hand-written"]
    await reg.upsert(model("b"))
    assert stored(tmp_path)["schemaVersion"] == 1
    assert [m["id"] for m in stored(tmp_path)["models"]] == ["hand-written", "b"]


# ---------------------------------------------------------------- validation


async def test_an_id_that_bypassed_pydantic_is_still_refused(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    for bad in ["Upper", "-dash-first", "a" * 41, "has space", ""]:
        sneaky = model("ok").model_copy(update={"id": bad})  # model_copy does not validate
        with pytest.raises(InvalidFieldError) as caught:
            await reg.upsert(sneaky)
        assert caught.value.field == "id"
    assert [m.id for m in await reg.list()] == ["ornith-9b-fp8"]


async def test_served_names_are_unique_case_insensitively(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    await reg.upsert(model("a", "Shared-Name"))
    with pytest.raises(DuplicateServedNameError) as caught:
        await reg.upsert(model("b", "shared-NAME"))
    assert caught.value.field == "servedName"
    assert caught.value.owner_id == "a"
    assert isinstance(caught.value, ValueError)
    await reg.upsert(model("a", "SHARED-name"))  # a model may change the case of its own name
    with pytest.raises(UnknownModelError):
        await reg.get("b")


async def test_invalid_tags_name_the_tag(tmp_path: Path) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        await registry(tmp_path).upsert(model("a", tags=["chat", "c++"]))
    assert caught.value.field == "tags[1]"


@pytest.mark.parametrize(
    ("sources", "field"),
    [
        ([{"repoId": "o/a", "folder": "a"}, {"repoId": "o/b", "folder": "a"}], "sources[1].folder"),
        (
            [
                {"repoId": "o/a", "folder": "x"},
                {"repoId": "o/b", "folder": "y"},
                {"repoId": "o/c", "folder": "X"},
            ],
            "sources[2].folder",
        ),
    ],
)
async def test_duplicate_source_folders_are_refused(tmp_path: Path, sources: list[Any], field: str) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        await registry(tmp_path).upsert(model("a", sources=sources))
    assert caught.value.field == field


async def test_a_primary_checkpoint_and_extra_folders_are_fine(tmp_path: Path) -> None:
    sources = [{"repoId": "org/main", "folder": "main"}, {"repoId": "org/draft", "folder": "draft"}]
    saved = await registry(tmp_path).upsert(model("main", sources=sources))
    assert [s.folder for s in saved.sources] == ["main", "draft"]


async def test_an_unreadable_owned_flag_is_refused_on_upsert(tmp_path: Path) -> None:
    reg = registry(tmp_path, normalize=lift_max_num_seqs)
    with pytest.raises(UnreadableFlagError) as caught:
        await reg.upsert(model("a", extraArgs=["--max-num-seqs", "many"]))
    assert caught.value.field == "--max-num-seqs"
    saved = await reg.upsert(model("a", extraArgs=["--max-num-seqs", "48", "--trust-remote-code"]))
    assert (saved.max_num_seqs, saved.extra_args) == (48, ["--trust-remote-code"])


# ---------------------------------------------------------------- migration


async def test_owned_flags_are_migrated_on_load_and_persisted_at_the_next_save(tmp_path: Path) -> None:
    raw = write_document(
        tmp_path, {"schemaVersion": 1, "models": [entry("old", extraArgs=["--max-num-seqs", "32"])]}
    )
    reg = registry(tmp_path, normalize=lift_max_num_seqs)
    old = await reg.get("old")
    assert (old.max_num_seqs, old.extra_args) == (32, [])
    assert (tmp_path / "models.json").read_bytes() == raw  # loading never writes
    await reg.upsert(model("other"))
    [migrated, _] = stored(tmp_path)["models"]
    assert migrated["maxNumSeqs"] == 32
    assert "extraArgs" not in migrated


async def test_the_seed_is_already_canonical_for_the_default_normalizer(tmp_path: Path) -> None:
    assert await ModelRegistry(tmp_path).list() == [SEED_MODEL]


async def test_the_default_normalizer_migrates_a_stored_model(tmp_path: Path) -> None:
    extra = ["--max-num-seqs", "32", "--enable-prefix-caching", "--trust-remote-code"]
    raw = write_document(tmp_path, {"schemaVersion": 1, "models": [entry("old", extraArgs=extra)]})
    reg = ModelRegistry(tmp_path)
    old = await reg.get("old")
    assert (old.max_num_seqs, old.enable_prefix_caching, old.extra_args) == (
        32,
        True,
        ["--trust-remote-code"],
    )
    assert (tmp_path / "models.json").read_bytes() == raw
    await reg.upsert(model("other"))
    reloaded = await ModelRegistry(tmp_path).get("old")
    assert reloaded == old
    assert stored(tmp_path)["models"][0]["extraArgs"] == ["--trust-remote-code"]


# ---------------------------------------------------------------- concurrency


async def test_concurrent_upserts_lose_nothing(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(reg.upsert, model(f"model-{i}"))
    ids = {m.id for m in await registry(tmp_path).list()}
    assert ids == {"ornith-9b-fp8"} | {f"model-{i}" for i in range(50)}


async def test_concurrent_upserts_of_one_served_name_have_exactly_one_winner(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    winners: list[str] = []
    losers: list[str] = []

    async def claim(i: int) -> None:
        try:
            await reg.upsert(model(f"claimant-{i}", "Contested" if i % 2 else "contested"))
        except DuplicateServedNameError:
            losers.append(f"claimant-{i}")
        else:
            winners.append(f"claimant-{i}")

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(claim, i)
    assert len(winners) == 1
    assert len(losers) == 19
    holders = [m.id for m in await registry(tmp_path).list() if m.served_name.lower() == "contested"]
    assert holders == winners


# ---------------------------------------------------------------- crash safety


async def test_a_crash_between_temp_write_and_replace_keeps_the_old_file(tmp_path: Path) -> None:
    armed = False

    def crash(temp: Path) -> None:
        if armed:
            raise SimulatedCrashError(temp.name)

    reg = registry(tmp_path, before_replace=crash)
    await reg.upsert(model("a"))
    before = (tmp_path / "models.json").read_bytes()
    armed = True
    with pytest.raises(SimulatedCrashError):
        await reg.upsert(model("b"))
    assert (tmp_path / "models.json").read_bytes() == before
    assert listing(tmp_path) == ["models.json"]
    with pytest.raises(UnknownModelError):
        await reg.get("b")  # memory still matches the file
    assert [m.id for m in await registry(tmp_path).list()] == ["ornith-9b-fp8", "a"]


async def test_a_failed_write_is_a_registry_error_and_changes_nothing(tmp_path: Path) -> None:
    def disk_full(temp: Path) -> None:
        raise OSError(28, "No space left on device")

    reg = registry(tmp_path)
    await reg.list()
    failing = registry(tmp_path, before_replace=disk_full)
    with pytest.raises(RegistryError, match="No space left") as refused:
        await failing.delete("ornith-9b-fp8")
    assert refused.value.disk_full  # the admin API answers 507 for it
    assert [m.id for m in await failing.list()] == ["ornith-9b-fp8"]
    assert [m.id for m in await registry(tmp_path).list()] == ["ornith-9b-fp8"]


async def test_a_stale_temp_file_from_a_crash_does_not_break_load_or_save(tmp_path: Path) -> None:
    write_document(tmp_path, {"schemaVersion": 1, "models": [entry("a")]})
    stale = tmp_path / ".models.json.x1y2z3.tmp"
    stale.write_text('{"schemaVersion": 1, "models": [{"id": "tru')
    reg = registry(tmp_path)
    assert [m.id for m in await reg.list()] == ["a"]
    assert not stale.exists()
    await reg.upsert(model("b"))
    assert [m.id for m in await registry(tmp_path).list()] == ["a", "b"]


# ---------------------------------------------------------------- fail closed

BAD_DOCUMENTS: list[tuple[str, bytes, str]] = [
    ("truncated", b'{"schemaVersion": 1, "models": [', "not valid JSON"),
    ("empty", b"", "not valid JSON"),
    ("binary", b"\xff\xfe\x00garbage", "not valid JSON"),
    ("number", b"42", "expected an object"),
    ("newer schema", b'{"schemaVersion": 2, "models": []}', "schemaVersion 2"),
    ("models not a list", b'{"schemaVersion": 1, "models": {}}', "'models' must be an array"),
    ("entry not an object", b'{"models": [7]}', "models[0]"),
    ("bad id", json.dumps([entry("ok"), entry("Bad_Id")]).encode(), "models[1].id"),
    ("missing served name", json.dumps([{"id": "a", "modelPath": "a"}]).encode(), "models[0].servedName"),
    ("bad tag", json.dumps([entry("a", tags=["ok", "no way!"])]).encode(), "models[0].tags[1]"),
    (
        "bad source repo",
        json.dumps([entry("a", sources=[{"repoId": "x", "folder": "a"}])]).encode(),
        "models[0].sources[0].repoId",
    ),
    (
        "duplicate folder",
        json.dumps(
            [entry("a", sources=[{"repoId": "o/a", "folder": "a"}, {"repoId": "o/b", "folder": "a"}])]
        ).encode(),
        "models[0].sources[1].folder",
    ),
    (
        "duplicate id",
        json.dumps([entry("a"), entry("b"), entry("a", servedName="z")]).encode(),
        "models[2].id",
    ),
    (
        "duplicate served name",
        json.dumps([entry("a"), entry("b", servedName="A")]).encode(),
        "models[1].servedName",
    ),
    (
        "unreadable owned flag",
        json.dumps([entry("a", extraArgs=["--max-num-seqs", "x"])]).encode(),
        "models[0].extraArgs (--max-num-seqs)",
    ),
]


@pytest.mark.parametrize(("raw", "reason"), [c[1:] for c in BAD_DOCUMENTS], ids=[c[0] for c in BAD_DOCUMENTS])
async def test_an_unreadable_file_is_never_overwritten(tmp_path: Path, raw: bytes, reason: str) -> None:
    (tmp_path / "models.json").write_bytes(raw)
    reg = registry(tmp_path, normalize=lift_max_num_seqs)
    with pytest.raises(RegistryError) as caught:
        await reg.list()
    assert reason in str(caught.value)
    assert str(tmp_path / "models.json") in str(caught.value)
    with pytest.raises(RegistryError):
        await reg.upsert(model("new"))
    with pytest.raises(RegistryError):
        await reg.delete("a")
    assert (tmp_path / "models.json").read_bytes() == raw
    assert listing(tmp_path) == ["models.json"]


async def test_a_fixed_file_is_read_without_a_restart(tmp_path: Path) -> None:
    (tmp_path / "models.json").write_bytes(b"{oops")
    reg = registry(tmp_path)
    with pytest.raises(RegistryError):
        await reg.list()
    write_document(tmp_path, [entry("fixed")])
    assert [m.id for m in await reg.list()] == ["fixed"]


async def test_a_folder_in_place_of_the_file_is_a_registry_error(tmp_path: Path) -> None:
    (tmp_path / "models.json").mkdir()
    with pytest.raises(RegistryError, match="cannot read"):
        await registry(tmp_path).list()
    assert (tmp_path / "models.json").is_dir()


class ManualClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_find_by_served_name_follows_every_write_of_the_registry(tmp_path: Path) -> None:
    clock = ManualClock()  # never advances: only the registry's own writes can change the answer
    reg = registry(tmp_path, clock=clock)
    await reg.upsert(model("a", "First"))
    assert (await reg.find_by_served_name("first")) == await reg.get("a")
    await reg.upsert(model("a", "Renamed"))
    assert await reg.find_by_served_name("first") is None
    found = await reg.find_by_served_name("RENAMED")
    assert found is not None
    assert found.id == "a"
    await reg.delete("a")
    assert await reg.find_by_served_name("renamed") is None


async def test_find_by_served_name_sees_the_file_replaced_under_it_at_the_next_check(tmp_path: Path) -> None:
    clock = ManualClock()
    write_document(tmp_path, {"schemaVersion": 1, "models": [entry("a")]})
    reg = registry(tmp_path, clock=clock)
    assert await reg.find_by_served_name("a") is not None

    edited = tmp_path / "edited.json"  # an editor's save: a new file renamed over the old one
    edited.write_text(json.dumps({"schemaVersion": 1, "models": [entry("b")]}), encoding="utf-8")
    os.replace(edited, tmp_path / "models.json")
    assert await reg.find_by_served_name("a") is not None  # within the interval: the index answers

    clock.now += 1.0
    assert await reg.find_by_served_name("a") is None
    found = await reg.find_by_served_name("b")
    assert found is not None
    assert found.id == "b"
    assert [m.id for m in await reg.list()] == ["b"]


async def test_find_by_served_name_sees_the_file_edited_in_place(tmp_path: Path) -> None:
    clock = ManualClock()
    write_document(tmp_path, {"schemaVersion": 1, "models": [entry("a")]})
    reg = registry(tmp_path, clock=clock)
    assert await reg.find_by_served_name("a") is not None
    write_document(tmp_path, {"schemaVersion": 1, "models": [entry("a"), entry("longer-name")]})
    clock.now += 1.0
    assert await reg.find_by_served_name("longer-name") is not None


async def test_an_invalid_file_written_under_the_registry_fails_closed(tmp_path: Path) -> None:
    clock = ManualClock()
    write_document(tmp_path, {"schemaVersion": 1, "models": [entry("a")]})
    reg = registry(tmp_path, clock=clock)
    assert await reg.find_by_served_name("a") is not None
    (tmp_path / "models.json").write_text("{not json", encoding="utf-8")
    clock.now += 1.0
    with pytest.raises(RegistryError, match="not valid JSON"):
        await reg.find_by_served_name("a")
    with pytest.raises(RegistryError):
        await reg.list()
    write_document(tmp_path, {"schemaVersion": 1, "models": [entry("c")]})
    assert await reg.find_by_served_name("c") is not None


async def test_a_file_removed_under_the_registry_keeps_the_models_in_memory(tmp_path: Path) -> None:
    clock = ManualClock()
    reg = registry(tmp_path, clock=clock)
    await reg.upsert(model("a"))
    (tmp_path / "models.json").unlink()
    clock.now += 1.0
    assert await reg.find_by_served_name("a") is not None  # not seeded again over the models in memory
    assert not (tmp_path / "models.json").exists()
