"""Sampling math for the torch backend, on tiny hand-made logits."""

from __future__ import annotations

import math

import pytest
import torch

from clawrl_app.engine.backends.sampling import (
    _top_p_by_sort,
    _top_p_filter,
    continuation_logprobs,
    logprob_temperature,
    sample_next,
)

# Probabilities [0.5, 0.3, 0.15, 0.05]; logits = their logs, so softmax(logits) == probs.
PROBS = [0.5, 0.3, 0.15, 0.05]
LOGITS_V = torch.tensor([math.log(p) for p in PROBS])


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_logprob_temperature() -> None:
    assert logprob_temperature(0.0) == 1.0
    assert logprob_temperature(-1.0) == 1.0
    assert logprob_temperature(0.7) == 0.7


def test_greedy_picks_argmax_and_records_t1_logprob() -> None:
    # logits [1, 3, 2]: argmax 1; log_softmax at T = 1:
    #   logsumexp = log(2.718282 + 20.085537 + 7.389056) = log(30.192875) = 3.40760596
    #   lp(1) = 3 - 3.40760596 = -0.40760596
    logits_BV = torch.tensor([[1.0, 3.0, 2.0]])
    ids, lps, tops = sample_next(logits_BV, [0.0], [1.0], [None])
    assert ids == [1]
    assert lps[0] == pytest.approx(-0.40760596, abs=1e-6)
    assert tops == [[]]


def test_a_vanishing_temperature_is_greedy_not_nan() -> None:
    """5e-127 (found by the route fuzzer) made logits / T overflow: the softmax was NaN
    and the request failed. Below MIN_TEMPERATURE sampling is greedy, and the log-probs,
    here and in the trainer's items, are taken under T = 1."""
    from clawrl_app.engine.chat.temperature import MIN_TEMPERATURE

    logits_BV = torch.tensor([[1.0, 3.0, 2.0]])
    for t in (5.4e-127, 1e-30, MIN_TEMPERATURE / 2):
        ids, lps, _ = sample_next(logits_BV, [t], [1e-12], [gen(0)])
        assert ids == [1] and lps[0] == pytest.approx(-0.40760596, abs=1e-6)
        assert logprob_temperature(t) == 1.0
    assert logprob_temperature(None) == 1.0 and logprob_temperature(MIN_TEMPERATURE) > 0


def test_greedy_ignores_generator_and_top_p() -> None:
    logits_BV = torch.tensor([[0.0, 5.0, 4.9, -1.0]])
    for seed in range(5):
        ids, _, _ = sample_next(logits_BV, [0.0], [0.1], [gen(seed)])
        assert ids == [1]


def test_temperature_logprob_is_log_softmax_of_scaled_logits() -> None:
    # T = 0.5 doubles the logits: [2, 6, 4];
    #   logsumexp = log(7.389056 + 403.428793 + 54.598150) = log(465.415999) = 6.14293163
    #   lp(0) = -4.14293163, lp(1) = -0.14293163, lp(2) = -2.14293163
    logits_BV = torch.tensor([[1.0, 3.0, 2.0]])
    expected = {0: -4.14293163, 1: -0.14293163, 2: -2.14293163}
    seen = set()
    g = gen(0)
    for _ in range(200):
        ids, lps, _ = sample_next(logits_BV, [0.5], [1.0], [g])
        assert lps[0] == pytest.approx(expected[ids[0]], abs=1e-5)
        seen.add(ids[0])
    assert seen == {0, 1, 2}  # it really samples


def test_top_p_keeps_smallest_set_reaching_p() -> None:
    # probs [0.5, 0.3, 0.15, 0.05], p = 0.75. Sorted cumulative mass before each token:
    #   [0.0, 0.5, 0.8, 0.95] -> keep while it is < 0.75 -> {0, 1} (0.5 + 0.3 = 0.8 >= 0.75;
    #   {0} alone, 0.5, would not reach p). Renormalized: [0.5/0.8, 0.3/0.8] = [0.625, 0.375].
    out = _top_p_filter(torch.tensor(PROBS), 0.75)
    assert out.tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0], abs=1e-6)


def test_top_p_keeps_the_top_token_even_for_tiny_p() -> None:
    # cumulative mass before the top token is 0 < p, so it stays: [1, 0, 0, 0]
    out = _top_p_filter(torch.tensor(PROBS), 0.01)
    assert out.tolist() == pytest.approx([1.0, 0.0, 0.0, 0.0])


def test_top_p_handles_unsorted_vocab() -> None:
    # same mass, shuffled: [0.15, 0.5, 0.05, 0.3], p = 0.75 keeps ids 1 and 3.
    out = _top_p_filter(torch.tensor([0.15, 0.5, 0.05, 0.3]), 0.75)
    assert out.tolist() == pytest.approx([0.0, 0.625, 0.0, 0.375], abs=1e-6)


def _top_p_by_full_sort(probs_V: torch.Tensor, top_p: float) -> torch.Tensor:
    """The definition: sort the whole vocabulary, keep until the mass before reaches p."""
    sorted_p, order = torch.sort(probs_V, descending=True)
    drop = (torch.cumsum(sorted_p, 0) - sorted_p) >= top_p
    out = torch.zeros_like(probs_V).scatter(0, order, sorted_p.masked_fill(drop, 0.0))
    return out / out.sum()


@pytest.mark.parametrize("spread", [0.5, 3.0, 12.0])  # flat (nucleus of thousands) .. peaky
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99])
def test_top_p_over_a_large_vocab_keeps_what_a_full_sort_keeps(spread: float, top_p: float) -> None:
    # the filter searches the nucleus among the top 64, 512, ... tokens instead of sorting
    # 49k probabilities: the same tokens must survive, with the same renormalised mass
    g = torch.Generator().manual_seed(int(spread * 100 + top_p * 10))
    probs_V = torch.softmax(torch.randn(49152, generator=g) * spread, dim=0)
    fast, slow = _top_p_filter(probs_V, top_p), _top_p_by_full_sort(probs_V, top_p)
    assert torch.equal(fast > 0, slow > 0)
    assert torch.allclose(fast, slow, atol=1e-7)
    assert int((fast > 0).sum()) >= 1


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99])
def test_the_gpu_nucleus_by_sort_keeps_what_the_cpu_search_keeps(top_p: float) -> None:
    """Off the CPU the filter sorts (no read-back); both ways keep the same tokens."""
    g = torch.Generator().manual_seed(int(top_p * 100))
    probs_V = torch.softmax(torch.randn(49152, generator=g) * 3.0, dim=0)
    by_sort, by_search = _top_p_by_sort(probs_V, top_p), _top_p_filter(probs_V, top_p)
    assert torch.equal(by_sort > 0, by_search > 0)
    assert torch.allclose(by_sort, by_search, atol=1e-7)
    assert torch.allclose(by_sort, _top_p_by_full_sort(probs_V, top_p), atol=1e-7)


def test_top_p_one_is_identity() -> None:
    probs = torch.tensor(PROBS)
    assert torch.equal(_top_p_filter(probs, 1.0), probs)


def test_top_p_only_narrows_sampling_not_logprobs() -> None:
    # With p = 0.75 only ids 0 and 1 can be drawn; their recorded log-probs are the
    # untruncated ones at T = 1: log 0.5 and log 0.3 (not log 0.625 / log 0.375).
    logits_BV = LOGITS_V.unsqueeze(0)
    g = gen(1)
    seen = set()
    for _ in range(300):
        ids, lps, _ = sample_next(logits_BV, [1.0], [0.75], [g])
        assert ids[0] in (0, 1)
        assert lps[0] == pytest.approx(math.log(PROBS[ids[0]]), abs=1e-5)
        seen.add(ids[0])
    assert seen == {0, 1}


def draw(logits_BV: torch.Tensor, seeds: list[int], steps: int) -> list[list[int]]:
    gens: list[torch.Generator | None] = [gen(s) for s in seeds]
    rows = len(seeds)
    out: list[list[int]] = [[] for _ in range(rows)]
    for _ in range(steps):
        ids, _, _ = sample_next(logits_BV, [1.0] * rows, [1.0] * rows, gens)
        for b, t in enumerate(ids):
            out[b].append(t)
    return out


def test_seeded_generators_reproduce() -> None:
    logits_BV = torch.zeros(1, 50)  # uniform: many possible sequences
    a = draw(logits_BV, [1234], 30)
    b = draw(logits_BV, [1234], 30)
    c = draw(logits_BV, [4321], 30)
    assert a == b
    assert a != c


def test_each_row_keeps_its_own_seed_whatever_the_batch() -> None:
    alone = draw(torch.zeros(1, 50), [7], 20)[0]
    batched = draw(torch.zeros(3, 50), [99, 7, 5], 20)
    assert batched[1] == alone
    assert batched[0] != batched[1]


def test_top_k_alternatives_sorted_descending() -> None:
    logits_BV = torch.stack([LOGITS_V, LOGITS_V.flip(0)])
    _, _, tops = sample_next(logits_BV, [0.0, 0.0], [1.0, 1.0], [None, None], top_k_logprobs=3)
    assert [i for i, _ in tops[0]] == [0, 1, 2]
    assert [i for i, _ in tops[1]] == [3, 2, 1]
    for row in tops:
        values = [v for _, v in row]
        assert values == sorted(values, reverse=True)
    assert [v for _, v in tops[0]] == pytest.approx([math.log(p) for p in PROBS[:3]], abs=1e-6)


def test_top_k_logprobs_use_request_temperature() -> None:
    # T = 2 halves the logits: [0.5, 1.5, 1.0];
    #   logsumexp = log(1.648721 + 4.481689 + 2.718282) = log(8.848692) = 2.18026967
    logits_BV = torch.tensor([[1.0, 3.0, 2.0]])
    _, _, tops = sample_next(logits_BV, [2.0], [1.0], [gen(0)], top_k_logprobs=2)
    assert tops[0][0][0] == 1
    assert tops[0][0][1] == pytest.approx(1.5 - 2.18026967, abs=1e-5)
    assert tops[0][1][0] == 2
    assert tops[0][1][1] == pytest.approx(1.0 - 2.18026967, abs=1e-5)


def test_half_precision_logits_are_accepted() -> None:
    ids, lps, _ = sample_next(
        torch.tensor([[1.0, 3.0, 2.0]], dtype=torch.float16), [0.0], [1.0], [None]
    )
    assert ids == [1]
    assert lps[0] == pytest.approx(-0.40760596, abs=1e-3)


def test_continuation_logprobs_gathers_targets() -> None:
    # row 0: logits [0, 0] -> p = [0.5, 0.5]; rows 1, 2: logits [ln 3, 0] -> p = [0.75, 0.25]
    logits_TV = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0], [math.log(3.0), 0.0]])
    lps = continuation_logprobs(logits_TV, [1, 0, 1])
    assert lps == pytest.approx([math.log(0.5), math.log(0.75), math.log(0.25)], abs=1e-6)


def test_continuation_logprobs_match_log_softmax_rows() -> None:
    logits_TV = torch.randn(5, 11, generator=gen(3))
    targets = [10, 0, 4, 4, 7]
    lps = continuation_logprobs(logits_TV, targets)
    full = torch.log_softmax(logits_TV, dim=-1)
    assert lps == pytest.approx([full[t, i].item() for t, i in enumerate(targets)], abs=1e-6)


def test_draws_follow_the_distribution_and_never_pick_masked_tokens() -> None:
    """The inverse-CDF draw: frequencies match softmax(logits / T); -inf (grammar-masked)
    tokens, also between allowed ones and at the end of the vocabulary, never come out."""
    logits = torch.tensor([[0.0, float("-inf"), 1.0, 2.0, float("-inf")]])
    gen = torch.Generator().manual_seed(7)
    counts = torch.zeros(5)
    for _ in range(6000):
        ids, _, _ = sample_next(logits, [1.0], [1.0], [gen])
        counts[ids[0]] += 1
    expected = torch.softmax(logits[0], dim=-1)
    assert counts[1] == 0 and counts[4] == 0
    assert torch.allclose(counts / counts.sum(), expected, atol=0.02), (counts, expected)
