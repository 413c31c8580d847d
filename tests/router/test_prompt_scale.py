"""The prompt tokens per body byte a model shows, learned from the usage it reports."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mirbad_router import PromptScale


def test_a_quarter_until_a_model_shows_more_then_its_highest_ratio_per_model() -> None:
    scale = PromptScale()
    assert scale.tokens_per_byte("a") == 0.25
    scale.learn("a", 100, 10)  # finer than a quarter: nothing to learn
    assert scale.tokens_per_byte("a") == 0.25
    scale.learn("a", 100, 40)
    scale.learn("a", 100, 30)
    assert scale.tokens_per_byte("a") == 0.4
    assert scale.tokens_per_byte("b") == 0.25


@given(st.lists(st.tuples(st.integers(-5, 10_000), st.integers(-5, 100_000)), max_size=20))
def test_the_ratio_stays_between_a_quarter_and_one(observations: list[tuple[int, int]]) -> None:
    scale = PromptScale()
    for body_bytes, prompt_tokens in observations:
        scale.learn("m", body_bytes, prompt_tokens)
    assert 0.25 <= scale.tokens_per_byte("m") <= 1.0
