"""Pure sampling math for the torch backend: next-token choice and behaviour log-probs.

Convention (shared with the trainer): the behaviour log-prob of a token is taken under
`softmax(logits / T)` with the request's temperature T, before any top-p truncation;
greedy requests (T = 0) record log-probs under T = 1. top-p only narrows what is sampled.
Logits masked to -inf (constrained decoding, `grammar.py`) are part of that distribution:
the log-probs are the masked distribution's, and masked tokens never appear as alternatives.
"""

from __future__ import annotations

import math

import torch

from clawrl_app.engine.chat.temperature import is_greedy, logprob_temperature

__all__ = ["continuation_logprobs", "logprob_temperature", "sample_next"]


def sample_next(
    logits_BV: torch.Tensor,
    temperatures: list[float],
    top_ps: list[float],
    generators: list[torch.Generator | None],
    top_k_logprobs: int = 0,
) -> tuple[list[int], list[float], list[list[tuple[int, float]]]]:
    """Pick one token per row; return (token ids, their log-probs, top-k alternatives per row).

    Rows are sampled independently so each request keeps its own seed and settings. A
    seeded row's generator must live on the logits' device (CUDA sampling with a CPU
    generator fails): it is checked here so the mistake shows on every machine.

    The whole batch is read back to the host once (one `.tolist()`): per-row reads would
    each wait for the GPU, B to 4B times per decode step. Top-p on a CPU keeps its cheaper
    search, which reads the nucleus mass (a read costs nothing there).
    """
    for gen in generators:
        if gen is not None and not _same_device(gen.device, logits_BV.device):
            raise ValueError(
                f"sampling generator on {gen.device}, logits on {logits_BV.device}: "
                "create it with torch.Generator(device=logits.device)"
            )
    logits_BV = logits_BV.float()
    rows = logits_BV.shape[0]
    temps_B1 = torch.tensor(
        [logprob_temperature(t) for t in temperatures],
        dtype=logits_BV.dtype,
        device=logits_BV.device,
    ).unsqueeze(1)  # (B, 1)
    logp_BV = torch.log_softmax(logits_BV / temps_B1, dim=-1)  # (B, V)
    ids_B = torch.argmax(logits_BV, dim=-1)  # (B,) the greedy rows' picks
    if not all(is_greedy(t) for t in temperatures):
        picks = [
            ids_B[b : b + 1]
            if is_greedy(temperatures[b])
            else _draw(_top_p_filter(logp_BV[b].exp(), top_ps[b]), generators[b])
            for b in range(rows)
        ]
        ids_B = torch.cat(picks)
    columns = [ids_B.unsqueeze(1), logp_BV.gather(1, ids_B.unsqueeze(1))]  # (B, 1) each
    if top_k_logprobs > 0:
        vals_BK, idx_BK = torch.topk(logp_BV, top_k_logprobs, dim=-1)
        columns += [idx_BK, vals_BK]
    # float64 holds every token id and float32 log-prob exactly: one read for all of it
    host = torch.cat([c.to(torch.float64) for c in columns], dim=1).tolist()  # (B, 2 + 2K)
    ids = [int(r[0]) for r in host]
    lps = [r[1] for r in host]
    k = top_k_logprobs
    tops = [
        [(int(i), v) for i, v in zip(r[2 : 2 + k], r[2 + k :], strict=True) if math.isfinite(v)]
        for r in host
    ]
    return ids, lps, tops


def _draw(probs_V: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token (a (1,) tensor on the device) drawn from `probs_V` (unnormalised, zeros
    never drawn) by inverting its CDF with one uniform number: ~20x cheaper than
    `torch.multinomial` over a 49k vocabulary, which costs ~1 ms a row on a CPU (it
    dominated llama.cpp's decode step)."""
    cdf_V = torch.cumsum(probs_V.double(), dim=0)  # (V,) float64: no drift over the tail
    u_1 = torch.rand(1, generator=generator, dtype=torch.float64, device=probs_V.device)
    idx = torch.searchsorted(cdf_V, u_1 * cdf_V[-1], right=True)  # first cdf > u
    return idx.clamp(max=probs_V.shape[0] - 1)


def _top_p_filter(probs_V: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero out the tail beyond cumulative probability `top_p` (the top token always stays).

    The nucleus is found among the k most likely tokens (k = 64, then x8 until their mass
    reaches `top_p`): the same tokens a sort of the whole vocabulary keeps, without sorting
    49k probabilities per row (~4 ms a row on a CPU: it was a third of a decode step)."""
    if top_p >= 1.0:
        return probs_V
    if probs_V.device.type != "cpu":  # the search reads the mass back; a sort never waits
        return _top_p_by_sort(probs_V, top_p)
    size = probs_V.shape[0]
    k = min(size, _NUCLEUS_FIRST_K)
    while True:
        vals_K, idx_K = torch.topk(probs_V, k)  # (K,), sorted descending
        cum_K = torch.cumsum(vals_K, dim=-1)
        # enough once the mass of the k kept so far reaches top_p: token k+1 is dropped
        if k == size or float(cum_K[-1]) >= top_p:
            break
        k = min(size, k * 8)
    keep_K = (cum_K - vals_K) < top_p  # keep tokens until the mass before them reaches top_p
    out = torch.zeros_like(probs_V).scatter(0, idx_K[keep_K], vals_K[keep_K])
    return out / out.sum()


_NUCLEUS_FIRST_K = 64


def _top_p_by_sort(probs_V: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus by a sort of the whole vocabulary: no read-back (for GPUs, where a sort
    of 49k values is cheap and a host read waits for every queued kernel)."""
    sorted_V, order_V = torch.sort(probs_V, descending=True)
    drop_V = (torch.cumsum(sorted_V, dim=0) - sorted_V) >= top_p
    out = torch.zeros_like(probs_V).scatter(0, order_V, sorted_V.masked_fill(drop_V, 0.0))
    return out / out.sum()


def continuation_logprobs(logits_TV: torch.Tensor, target_ids: list[int]) -> list[float]:
    """Log-probs (T = 1) of `target_ids` given logits at the positions that predict them."""
    logp_TV = torch.log_softmax(logits_TV.float(), dim=-1)  # (T, V)
    idx = torch.tensor(target_ids, dtype=torch.long, device=logp_TV.device).unsqueeze(-1)  # (T, 1)
    return logp_TV.gather(-1, idx).squeeze(-1).tolist()


def _same_device(a: torch.device, b: torch.device) -> bool:
    """`cuda` and `cuda:0` are the same card when one of them names no index."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)
