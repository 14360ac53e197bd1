"""The canary: log-probs of a fixed response to fixed prompts, kept with each checkpoint so
that the publisher can tell the weights it loads are the weights the trainer wrote."""

from __future__ import annotations

from typing import Any

import torch

from clawrl_app.engine.training.policy_forward import response_logprobs
from clawrl_app.engine.training.train_data import TrainItem

CANARY_PROMPTS = ["What is the capital of France?", "Write one sentence about the sea."]
CANARY_RESPONSE = "Paris is the capital of France, and the sea is calm."


def canary_logprobs(model: Any, tokenizer: Any, device: Any) -> list[dict[str, Any]]:
    """Log-probs of CANARY_RESPONSE after each of CANARY_PROMPTS under `model` (eval mode for
    the passes, train mode after, also on failure)."""
    from clawrl_app.engine.chat.formatter import ChatFormatter

    fmt = ChatFormatter(tokenizer)
    resp = list(tokenizer(CANARY_RESPONSE, add_special_tokens=False)["input_ids"])
    out = []
    model.eval()
    try:
        with torch.no_grad():
            for q in CANARY_PROMPTS:
                prompt = fmt.render([{"role": "user", "content": q}])
                item = TrainItem(0, "", prompt, resp, [0.0] * len(resp), 1.0, 0.0, False, None, "")
                lps = response_logprobs(model, [item], device).logprobs_BT[0]
                out.append({"prompt_ids": prompt, "response_ids": resp, "logprobs": lps.tolist()})
    finally:
        model.train()
    return out
