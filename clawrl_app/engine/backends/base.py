"""The serving backend protocol shared by the torch (embedded) and SGLang backends.

The endpoint applies the chat template itself and hands the backend token ids, so the
app always owns the exact prompt ids, the *sampled* response ids and their log-probs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one answer. temperature 0 means greedy."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    top_logprobs: int = 0
    """How many alternatives per position to return (0 = none)."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end the answer (the backend always stops at the model's EOS)."""
    stop_on_repetition: bool = False
    """End the answer as cut off (`length`) once it is stuck in a loop (`repetition.py`)."""
    json_schema: str | None = None
    """Constrain the answer to JSON valid against this JSON schema (JSON text), then EOS: a
    forced tool call (`tool_constraint.py`). Behaviour log-probs are then those of the
    masked distribution the tokens were sampled from."""


@dataclass(frozen=True)
class GenerationRequest:
    """One answer to produce from `prompt_ids`."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    version: str | None = None
    """Policy version to sample from; None = whatever is active at admission."""
    background: bool = False
    """Judge and other internal work: never slows user requests down (served when idle)."""


@dataclass(frozen=True)
class TokenOut:
    """One sampled token with its behaviour log-prob (under the sampling distribution)."""

    token_id: int
    logprob: float
    top_logprobs: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Finished:
    """The last event of a generation stream."""

    reason: FinishReason
    policy_version: str
    """The version that produced every token of this answer."""
    prompt_tokens: int = 0
    completion_tokens: int = 0


GenerationEvent = TokenOut | Finished


class BackendError(RuntimeError):
    """The backend could not serve the request (not the client's fault)."""


class BackendOverloaded(BackendError):
    """The request queue is full: the endpoint answers 503 with Retry-After."""


class UnknownVersion(BackendError):
    """The requested policy version is not loaded."""


@dataclass
class BackendInfo:
    """What the endpoint needs to know about the served model."""

    model_name: str
    context_length: int
    eos_token_ids: tuple[int, ...]
    versions: list[str] = field(default_factory=list)
    seeded: bool = True
    """A request's `seed` makes its sampling repeatable (False: the seed is ignored)."""


@runtime_checkable
class Backend(Protocol):
    """A serving backend. All methods are safe to call from the asyncio loop."""

    @property
    def active_version(self) -> str:
        """The version new requests are routed to (e.g. `base`, `v12`)."""
        ...

    def info(self) -> BackendInfo: ...

    def health(self) -> str | None:
        """None while the backend can serve; otherwise why not (shown by /readyz)."""
        ...

    async def start(self) -> None:
        """Load the model / launch the server; returns when ready to generate."""
        ...

    async def stop(self) -> None: ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Stream the answer token by token, then one `Finished`.

        Closing the iterator early (client disconnect) cancels the generation.
        The stream includes the terminating EOS/stop token when the model produced one.
        """
        ...

    async def score(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        version: str | None = None,
        *,
        urgent: bool = False,
    ) -> list[float]:
        """Log-probs of `response_ids` given `prompt_ids` (one forward pass, no sampling).

        version None = the base model with no adapter (the default teacher / judge).
        urgent: publishing's canary check, run before queued judge work (a backend with no
        lanes may ignore it).
        """
        ...

    async def load_adapter(self, version: str, path: Path) -> None:
        """Load a LoRA adapter under a new, never reused version name."""
        ...

    async def activate(self, version: str) -> None:
        """Route new requests to `version`; in-flight requests finish on their own version."""
        ...

    async def unload_adapter(self, version: str) -> None:
        """Drop a version once its in-flight requests are done."""
        ...
