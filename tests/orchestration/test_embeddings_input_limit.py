"""The longest embeddings input an instance takes, read from its launch arguments (issue 24 item 2)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.benchmarks import InputLimit, embedding_input_limit

_sizes = st.integers(min_value=1, max_value=1 << 20)


def _flag(names: tuple[str, str], value: int, style: int) -> list[str]:
    """One flag in any of the forms llama-server takes: long or short, spaced or with '='."""
    name = names[style % 2]
    return [f"{name}={value}"] if style >= 2 else [name, str(value)]


@given(
    ctx=st.none() | _sizes,
    slots=st.none() | st.integers(min_value=1, max_value=64),
    batch=st.none() | _sizes,
    ubatch=st.none() | _sizes,
    max_model_len=st.none() | _sizes,
    styles=st.lists(st.integers(min_value=0, max_value=3), min_size=4, max_size=4),
)
def test_llamacpp_takes_the_smaller_of_the_physical_batch_and_a_slots_context(
    ctx: int | None,
    slots: int | None,
    batch: int | None,
    ubatch: int | None,
    max_model_len: int | None,
    styles: list[int],
) -> None:
    argv = ["--model", "m.gguf", "--embeddings"]
    for names, value, style in (
        (("--ctx-size", "-c"), ctx, styles[0]),
        (("--parallel", "-np"), slots, styles[1]),
        (("--batch-size", "-b"), batch, styles[2]),
        (("--ubatch-size", "-ub"), ubatch, styles[3]),
    ):
        if value is not None:
            argv += _flag(names, value, style)

    limit = embedding_input_limit("llamacpp", argv, max_model_len)

    physical = min(ubatch or 512, batch or 2048)
    per_slot = ctx // (slots or 1) if ctx else max_model_len
    expected = min(physical, per_slot) if per_slot else physical
    assert limit is not None
    assert limit.tokens == expected
    # On a tie the batch is named: it is the setting a pooling model's input must fit in one pass.
    assert ("--ubatch-size" in limit.reason) == (not per_slot or physical <= per_slot)


def test_the_readme_embedding_example_is_limited_by_its_slot_context() -> None:
    argv = ["--model", "tiny/tiny-llama.gguf", "--ctx-size", "512", "--parallel", "2", "--embeddings"]

    assert embedding_input_limit("llamacpp", argv, 256) == InputLimit(
        256, "the context of 256 tokens per sequence"
    )


def test_vllm_takes_its_context_and_an_unknown_one_is_no_limit() -> None:
    assert embedding_input_limit("vllm", ["--max-model-len", "8192"], None) == InputLimit(
        8192, "the context of 8192 tokens"
    )
    assert embedding_input_limit("vllm", [], 4096) == InputLimit(4096, "the context of 4096 tokens")
    assert embedding_input_limit("mlx", [], None) is None
