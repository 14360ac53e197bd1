"""Which temperature a request really samples with (shared by the backend and the trainer).

A temperature of 0, or one so small that `logits / T` overflows (the API allows any value
in [0, 2]; 5e-127 made the softmax NaN and failed the request), means greedy decoding;
behaviour log-probs are then recorded, and trained, under T = 1.
"""

from __future__ import annotations

MIN_TEMPERATURE = 1e-3  # below: greedy (logits / 1e-3 stays far from float32 overflow)


def is_greedy(temperature: float) -> bool:
    return temperature < MIN_TEMPERATURE


def logprob_temperature(temperature: float | None) -> float:
    """The temperature under which behaviour log-probs are recorded (greedy, or not given
    -> 1.0)."""
    return 1.0 if temperature is None or is_greedy(temperature) else float(temperature)
