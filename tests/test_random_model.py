"""The random-model builder shared by tests/test_gpu.py and bench/gpu.py: sizes and shapes."""

from __future__ import annotations

import pytest

from tests.random_model import llama_shape, parse_size

VOCAB = 49152  # the embedded SmolLM2 tokenizer's


@pytest.mark.parametrize(
    ("text", "params"),
    [("30m", 30_000_000), ("0.5b", 500_000_000), ("1.5B", 1_500_000_000), ("2000", 2000)],
)
def test_sizes_parse(text: str, params: int) -> None:
    assert parse_size(text) == params


@pytest.mark.parametrize("text", ["", "1.5x", "b", "-3m", "0m"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="model size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["30m", "50m", "135m", "0.5b", "1.5b", "3b", "7b"])
def test_shapes_land_near_the_asked_size(text: str) -> None:
    target = parse_size(text)
    shape = llama_shape(target, VOCAB)
    assert abs(shape.params - target) / target < 0.1
    assert shape.heads * shape.head_dim == shape.hidden and shape.heads % shape.kv_heads == 0
    assert shape.layers >= 2 and shape.intermediate % 64 == 0


def test_a_1_5b_model_has_the_usual_proportions() -> None:
    # 2048 wide, 32 deep, 16 query heads of 128 over 4 KV heads: like Llama-3.2/Qwen2.5 models
    shape = llama_shape(parse_size("1.5b"), VOCAB)
    assert (shape.hidden, shape.layers, shape.heads, shape.kv_heads) == (2048, 32, 16, 4)


def test_below_the_embedding_size_the_narrowest_model_is_built() -> None:
    shape = llama_shape(parse_size("1m"), VOCAB)  # the embeddings alone are 6.3M at 128 wide
    assert (shape.hidden, shape.layers) == (128, 2)
