"""The Hugging Face cache folder of a drafter given as a hub id (the node facts' second lookup)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.tuning import hub_cache_folder

_PART = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True)


def test_a_hub_id_names_its_cache_folder() -> None:
    assert hub_cache_folder("z-lab/Qwen3-8B-DFlash-b16") == "models--z-lab--Qwen3-8B-DFlash-b16"
    assert hub_cache_folder("drafts/small/v2") is None  # a path under a root, not a hub id
    assert hub_cache_folder("/models/drafter") is None
    assert hub_cache_folder("drafter") is None


@given(_PART, _PART)
def test_every_hub_id_maps_to_the_cache_layout(org: str, name: str) -> None:
    assert hub_cache_folder(f"{org}/{name}") == f"models--{org}--{name}"


@given(st.text(max_size=40))
def test_anything_else_is_not_read_as_a_hub_id(text: str) -> None:
    found = hub_cache_folder(text)
    if found is not None:
        org, name = text.split("/")
        assert found == f"models--{org}--{name}"
        # One folder under a root, never a climb.
        assert "/" not in found
        assert ".." not in (org, name)
