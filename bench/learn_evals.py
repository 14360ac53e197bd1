"""The greedy evaluations of bench/learn.py: held-out compliance, form on open prompts and on
the user's form pool, every version through `POST /admin/compare`, the general score.

Every answer is a side turn (`learn_drive.SIDE`: not recorded, not trained on), temperature 0.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from learn_drive import SIDE, post_chat
from learn_personas import OPEN_PROMPTS, Persona, form_pool

from clawrl_app.degeneration import Degeneration
from clawrl_app.degeneration import score as degeneration
from clawrl_app.engine.judging.prompts import teacher_messages
from clawrl_app.general_eval import GeneralItem, score_answers

GENERAL_MAX_TOKENS = 48
OPEN_MAX_TOKENS = 128


def _ask(url: str, prompt: str, max_tokens: int, hint: str | None = None) -> dict[str, Any]:
    messages = [{"role": "user", "content": prompt}]
    if hint is not None:  # what the app's teacher is given: the hint appended to the prompt
        messages = teacher_messages(messages, hint)
    with httpx.Client(timeout=600) as client:
        return post_chat(
            client, url, messages, max_tokens=max_tokens, temperature=0.0, headers=SIDE
        )


def _texts(js: list[dict[str, Any]]) -> list[str]:
    return [j["choices"][0]["message"]["content"] or "" for j in js]


def _rates(forms: list[Degeneration]) -> tuple[float, float]:
    """Shares of `forms` that are degenerate and that loop (a 3-word phrase >= 3 times)."""
    n = len(forms)
    return sum(f.degenerate for f in forms) / n, sum(f.max_phrase_repeats >= 3 for f in forms) / n


def _answers(
    url: str, prompts: list[str], max_tokens: int, workers: int, hint: str | None = None
) -> list[dict[str, Any]]:
    """Greedy side-turn answers, `workers` at a time (the backend batches concurrent ones)."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda p: _ask(url, p, max_tokens, hint), prompts))


def heldout(
    url: str, persona: Persona, max_tokens: int, workers: int, hint: str | None = None
) -> dict[str, Any]:
    """Held-out compliance: the persona's held-out prompts, greedy, checked by its code.
    With `hint`: the teacher's compliance (each prompt with the hint appended, as the app's
    teacher sees it): how far distillation from that teacher can lead."""
    t0 = time.time()
    rows = []
    for p, j in zip(
        persona.heldout_prompts,
        _answers(url, list(persona.heldout_prompts), max_tokens, workers, hint),
        strict=True,
    ):
        text = j["choices"][0]["message"]["content"] or ""
        form = degeneration(text)
        rows.append(
            {
                "prompt": p,
                "answer": text,
                # compliant by looping is not compliant
                "ok": persona.complies(text) and not form.degenerate,
                "degenerate": form.degenerate,
                "looping": form.max_phrase_repeats >= 3,
                "words": form.words,
                "model": j["model"],
            }
        )
    n = len(rows)
    return {
        "compliance": sum(r["ok"] for r in rows) / n,
        "degenerate": sum(r["degenerate"] for r in rows) / n,
        "looping": sum(r["looping"] for r in rows) / n,
        "words": sum(r["words"] for r in rows) / n,
        "models": sorted({r["model"] for r in rows}),
        "eval_s": time.time() - t0,
        "heldout": rows,
    }


def open_form(url: str, workers: int) -> dict[str, Any]:
    """Form at length: open prompts answered greedily at 128 tokens (loops show here first)."""
    texts = _texts(_answers(url, list(OPEN_PROMPTS), OPEN_MAX_TOKENS, workers))
    degenerate, looping = _rates([degeneration(t) for t in texts])
    return {"degenerate": degenerate, "looping": looping, "answers": texts}


def pool_form(url: str, persona: Persona, max_tokens: int, workers: int) -> dict[str, Any]:
    """Degeneration on the user's form pool (`form_pool`: ~50 prompts no user trains on,
    greedy, at the user's max_tokens): the rates the issue's bar (<= base + 0.05) is read on,
    and per prompt whether the answer was degenerate / looping (to pair versions)."""
    t0 = time.time()
    texts = _texts(_answers(url, list(form_pool(persona)), max_tokens, workers))
    forms = [degeneration(t) for t in texts]
    degenerate, looping = _rates(forms)
    return {
        "n": len(forms),
        "degenerate": degenerate,
        "looping": looping,
        "flags": [[f.degenerate, f.max_phrase_repeats >= 3] for f in forms],
        "answers": texts,
        "eval_s": time.time() - t0,
    }


COMPARE_MAX_PROMPTS = 50
"""Prompts per `POST /admin/compare` request (the route's limit)."""


def every_version(
    client: httpx.Client, url: str, store: Any, persona: Persona, max_tokens: int
) -> list[dict[str, Any]]:
    """Every checkpoint the run made, the guard's refused ones included, answering the
    user's form pool greedily (its held-out prompts first; `POST /admin/compare` loads each
    one that is not loaded, two at a time): compliance on the held-out prompts, degeneration
    on them and on the whole pool: whether the guard refused what loops and passed what
    does not."""
    base = url.removesuffix("/v1")
    versions = [
        c for c in store.list_checkpoints() if c.status in ("ready", "published", "refused")
    ]
    pool = form_pool(persona)
    held = len([p for p in persona.heldout_prompts if p not in persona.train_prompts])
    prompts = [[{"role": "user", "content": q}] for q in pool]
    out = []
    for k in range(0, len(versions), 2):
        a, b = versions[k], versions[k + 1] if k + 1 < len(versions) else None
        items, error = [], None
        for i in range(0, len(prompts), COMPARE_MAX_PROMPTS):  # the route takes 50 at a time
            body = {"a": a.version, "b": b.version if b else "base",
                    "prompts": prompts[i : i + COMPARE_MAX_PROMPTS], "max_tokens": max_tokens}  # fmt: skip
            r = client.post(f"{base}/admin/compare", json=body, timeout=1800)
            if r.status_code != 200:
                error = r.text[:300]
                break
            items += r.json()["items"]
        if error is not None:
            out.append({"version": a.version, "status": a.status, "error": error})
            continue
        for side, c in (("a", a), ("b", b)):
            if c is None:
                continue
            every = [item[side] for item in items]
            pool_forms = [degeneration(t) for t in every]
            texts, forms = every[:held], pool_forms[:held]
            (degenerate, looping), pool_rates = _rates(forms), _rates(pool_forms)
            out.append({
                "version": c.version, "status": c.status,
                "compliance": sum(persona.complies(t) and not f.degenerate
                                  for t, f in zip(texts, forms, strict=True)) / len(texts),
                "degenerate": degenerate, "looping": looping,
                "pool_degenerate": pool_rates[0], "pool_looping": pool_rates[1],
                "pool_flags": [f.degenerate for f in pool_forms], "pool_answers": every,
            })  # fmt: skip
    return out


def general(url: str, items: list[GeneralItem], workers: int) -> dict[str, Any]:
    """The general score: every item of the general set, greedy, scored by code."""
    t0 = time.time()
    texts = _texts(_answers(url, [i.question for i in items], GENERAL_MAX_TOKENS, workers))
    degenerate = [degeneration(t).degenerate for t in texts]
    # facts count only in answers that are not degenerate (as the regression guard scores)
    s = score_answers(items, ["" if d else t for t, d in zip(texts, degenerate, strict=True)])
    return {
        "degenerate": sum(degenerate) / len(texts),
        "score": s.score,
        "correct": s.correct,
        "total": s.total,
        "eval_s": time.time() - t0,
        "answers": [
            {"id": i.id, "answer": t, "ok": s.passed[i.id]}
            for i, t in zip(items, texts, strict=True)
        ],
    }
