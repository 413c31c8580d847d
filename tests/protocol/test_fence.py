"""The fencing headers: what a master sends reads back as sent, and anything else is refused by name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.agent import (
    MASTER_EPOCH_HEADER,
    MASTER_ID_HEADER,
    MAX_MASTER_EPOCH,
    MasterFence,
    fence_headers,
    parse_fence_headers,
)

_IDS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=200)
_EPOCHS = st.integers(min_value=0, max_value=MAX_MASTER_EPOCH)


@given(instance_id=_IDS, epoch=_EPOCHS)
def test_what_a_master_sends_reads_back_as_sent(instance_id: str, epoch: int) -> None:
    fence = MasterFence(instance_id=instance_id, epoch=epoch)
    assert parse_fence_headers(fence_headers(fence)) == fence


def test_no_fence_at_all_is_none() -> None:
    assert parse_fence_headers({}) is None


@given(instance_id=_IDS, epoch=_EPOCHS)
def test_one_header_without_the_other_names_the_missing_one(instance_id: str, epoch: int) -> None:
    with pytest.raises(InvalidFieldError) as only_id:
        parse_fence_headers({MASTER_ID_HEADER: instance_id})
    assert only_id.value.field == MASTER_EPOCH_HEADER
    with pytest.raises(InvalidFieldError) as only_epoch:
        parse_fence_headers({MASTER_EPOCH_HEADER: str(epoch)})
    assert only_epoch.value.field == MASTER_ID_HEADER


@given(epoch=st.text(max_size=30))
def test_an_epoch_is_a_plain_decimal_integer_in_range_or_refused_by_name(epoch: str) -> None:
    headers = {MASTER_ID_HEADER: "m-1", MASTER_EPOCH_HEADER: epoch}
    plain = epoch.isascii() and epoch.isdigit() and 0 < len(epoch) <= 19 and int(epoch) <= MAX_MASTER_EPOCH
    if plain:
        parsed = parse_fence_headers(headers)
        assert parsed is not None
        assert parsed.epoch == int(epoch)
        return
    with pytest.raises(InvalidFieldError) as refused:
        parse_fence_headers(headers)
    assert refused.value.field == MASTER_EPOCH_HEADER


@pytest.mark.parametrize(
    "epoch", ["-1", "+1", " 1", "1 ", "1.0", "0x1", "\u0661", str(MAX_MASTER_EPOCH + 1), "9" * 20]
)
def test_signs_spaces_other_digits_and_overflow_are_refused(epoch: str) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        parse_fence_headers({MASTER_ID_HEADER: "m-1", MASTER_EPOCH_HEADER: epoch})
    assert refused.value.field == MASTER_EPOCH_HEADER


@given(instance_id=st.text(max_size=250))
def test_an_instance_id_is_visible_ascii_up_to_200_or_refused_by_name(instance_id: str) -> None:
    headers = {MASTER_ID_HEADER: instance_id, MASTER_EPOCH_HEADER: "3"}
    visible = 0 < len(instance_id) <= 200 and all(0x21 <= ord(c) <= 0x7E for c in instance_id)
    if visible:
        assert parse_fence_headers(headers) == MasterFence(instance_id=instance_id, epoch=3)
        return
    with pytest.raises(InvalidFieldError) as refused:
        parse_fence_headers(headers)
    assert refused.value.field == MASTER_ID_HEADER
