"""One typed settings object, layered: defaults < TOML file < env vars < CLI flags.

Every field has a docstring (shown by `clawrl-app config show`). Env vars are
`CLAWRL_<SECTION>__<KEY>` (e.g. `CLAWRL_TRAIN__BATCH_SIZE=8`) plus the upstream names
listed in `UPSTREAM_ENV`. Invalid values fail at start with the key, the source and the
allowed values; `load_settings` records where each effective value came from.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from clawrl_app.config_base import _Section
from clawrl_app.config_guard import EnvsSettings, GuardSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s]+")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    """Bind address. Anything but loopback requires an API key."""
    port: int = 30000
    """TCP port of the OpenAI-compatible endpoint (0 = pick a free port)."""
    model_alias: str = "clawrl"
    """Stable model name clients configure; it always means the current policy."""
    require_api_key: bool = False
    """Require `Authorization: Bearer <key>` even on loopback (always on for other binds)."""
    max_body_bytes: int = 8 * 1024 * 1024
    """Largest accepted request body; bigger bodies get 413."""
    max_queue: int = 64
    """Requests waiting for the backend before new ones get 429 with Retry-After."""
    max_concurrent: int = 64
    """Answers in progress at once (queued or generating) before new ones get 429."""
    request_timeout_s: float = 600.0
    """Longest one answer may take (wall clock); past it the request fails with 504."""
    session_idle_s: float = 900.0
    """A session with no request for this long is closed (its last turn gets no next state)."""
    default_max_tokens: int = 512
    """Answer length when the request sets neither max_tokens nor max_completion_tokens."""
    sampling_defaults: Literal["model", "openai"] = "model"
    """temperature/top_p for requests that omit them: `model` = the model's recommended
    values (its generation_config.json; the embedded model: its card's 0.2 / 0.9), as
    other servers do; `openai` = the API's own defaults (1.0 / 1.0)."""
    stop_repetition: bool = True
    """End an answer as cut off (`length`) once it is stuck in a loop, instead of letting
    it run to max_tokens (torch backend)."""
    prefix_cache_mb: int | None = Field(default=None, ge=0)
    """Memory (MiB) for the KV of earlier prompts + answers that later prompts repeat (an
    agent re-sends its whole prompt every turn): only the new part is prefilled (torch
    backend; SGLang has its own). Empty = the hardware plan's default; 0 = off."""
    allowed_hosts: list[str] = []
    """More names clients may use in the Host header, e.g. ["mybox.lan"] (DNS-rebinding
    protection). localhost, any IP address and `host` always pass; "*" turns the check off.
    In the environment: JSON or comma-separated."""
    allowed_origins: list[str] = []
    """Web pages allowed to call the endpoint from a browser, as origins such as
    "http://localhost:5173" (they get CORS headers); requests from any other page get 403.
    Empty = no browser page. In the environment: JSON or comma-separated."""

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _list_text(cls, value: Any) -> Any:
        if isinstance(value, str):  # from CLAWRL_SERVER__ALLOWED_*
            if value.lstrip().startswith("["):
                try:
                    return json.loads(value)
                except ValueError:
                    raise ValueError('expected a JSON list such as ["a", "b"]') from None
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        out = []
        for origin in value:
            norm = origin.strip().lower().rstrip("/")
            if not _ORIGIN.fullmatch(norm):  # browsers send scheme://host[:port], nothing more
                raise ValueError(
                    f"{origin!r} is not an origin: write scheme://host[:port] with no path, "
                    'e.g. "http://localhost:5173" ("*" is not accepted)'
                )
            out.append(norm)
        return out


class ModelSettings(_Section):
    path: str | None = None
    """Policy model: a local HF dir, a hub id, a .gguf file; empty = the embedded SmolLM2-135M."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype for the torch backend (auto: float32 on CPU, bfloat16 on GPU)."""
    max_batch: int = 8
    """Most concurrent requests the torch backend decodes together in one batch."""


class HardwareSettings(_Section):
    backend: Literal["auto", "torch", "sglang", "llamacpp"] = "auto"
    """Serving backend; auto picks sglang when GPUs and the sglang package exist, and on a
    CPU llamacpp when llama-cpp-python is installed and the model is a GGUF (the embedded
    one is), else torch."""
    llamacpp_weights: Literal["f16", "gguf"] = "f16"
    """llama.cpp backend: serve an F16 copy of the GGUF (made once; log-probs within ~0.005
    of the trainer's) or the GGUF file as it is (quantized kernels: log-probs ~0.1 apart)."""
    cpu_threads: int | None = None
    """llama.cpp backend: threads for serving (empty = every core this process may use)."""
    num_gpus: int | None = None
    """Use at most this many GPUs (upstream NUM_GPUS)."""
    actor_gpus: int | None = None
    """GPUs for the trainer (upstream ACTOR_GPUS)."""
    rollout_gpus: int | None = None
    """GPUs for serving (upstream ROLLOUT_GPUS)."""
    prm_gpus: int | None = None
    """GPUs for the judge (upstream PRM_GPUS); 0 = judge shares the serving engine."""
    sglang_python: str | None = None
    """Python interpreter that has sglang installed (it pins its own torch)."""
    sglang_mem_fraction: float | None = None
    """Override the plan's --mem-fraction-static for SGLang."""
    sglang_deterministic: bool = False
    """Launch SGLang with --enable-deterministic-inference: a request's `seed` then repeats
    its answer (SGLang ignores seeds otherwise; the endpoint then says so in the header
    X-Clawrl-Seed). Off by default: SGLang supports it with the FlashInfer, FA3 and Triton
    attention backends only, and batch-invariant kernels cost throughput."""


class JudgeSettings(_Section):
    backend: Literal["auto", "policy", "openai", "heuristic"] = "auto"
    """Who scores turns: auto picks heuristic for small policies, policy for capable ones."""
    model_path: str | None = None
    """Upstream's PRM_MODEL_PATH, accepted so its settings load; not used: the judge and the
    OPD teacher run on the served model (the plan says so). Another judge: backend = openai."""
    votes: int = 3
    """PRM votes per turn (majority vote)."""
    temperature: float = 0.6
    """Sampling temperature of judge votes."""
    max_tokens: int = 1024
    """Judge answer budget; a vote that runs out fails instead of blocking."""
    openai_url: str | None = None
    """Base URL of an OpenAI-compatible judge when backend = openai."""
    openai_model: str | None = None
    """Model name at that judge endpoint."""
    openai_api_key: str | None = None
    """API key for that judge endpoint (prefer the env var CLAWRL_JUDGE__OPENAI_API_KEY)."""
    teacher: Literal["base", "policy"] = "base"
    """OPD teacher: the frozen base model (adapter off) or the current policy (self-distillation)."""
    teacher_check_prompts: int = Field(default=12, ge=0, le=64)
    """Before a hint teaches, the teacher answers this many of your prompts (the turn's own
    and your newest) with the hint and without it; a hint it loops with more often trains
    by reward only (0 = off; fewer than 4 prompts so far: the hint is trusted)."""
    teacher_check_max_rise: float = Field(default=0.25, ge=0.0, le=1.0)
    """How much more often the teacher's answers may be degenerate with the hint than
    without it (0.25: three more of 12 prompts); see docs/learning.md for the figures."""
    teacher_check_max_tokens: int = Field(default=160, ge=1)
    """Longest answer of that check (each prompt at the budget its request set, at most this)."""
    teacher_answers: bool = True
    """The teacher also answers each hinted turn (greedy); one that ends on its own and does
    not loop trains as a +1 sample of the turn beside the policy's own answer. On by default
    since 2026-11-29: the three length users reached 0.90 / 0.70 / 0.90 compliant with it
    (0.70 / 0.00-0.80 / 0.00 without), nothing degenerate served (docs/benchmarks/learning.md)."""
    teacher_tries: int = Field(default=0, ge=0, le=16)
    """When the teacher's greedy answer is not kept, up to this many sampled answers are
    tried (at teacher_temperature); the first kept one trains (0: greedy only). Off by
    default: the greedy teacher kept an answer for 5 of 16 of u15's prompts and one of 4
    more tries for all 16, but end to end (brevity/u15, 4 tries at 1.0) the first three
    versions were refused for new loops at the user's length and a lower general score,
    and nothing was served in 24 turns (docs/learning.md)."""
    teacher_temperature: float = Field(default=1.0, gt=0.0, le=2.0)
    """Temperature of those further tries."""
    teacher_cue: bool = False
    """The teacher reads a request for less that states a small limit with a cue in words a
    small model follows ("... at most 15 words." + " One short sentence."; at most 45 words
    or two sentences: " Two short sentences."); its answer is still held to the request's
    own limits. Off by default (docs/benchmarks/learning.md)."""
    teacher_cut: bool = False
    """For a hint that asks for less ("shorter", "at most 15 words"), the policy's own answer
    cut at the first sentence end where the teacher reading the hint would stop trains as a
    +1 sample beside the whole answer (when no teacher answer is kept). Experimental: on the
    embedded model it taught short but empty answers (docs/learning.md)."""
    custom_reward_path: str | None = None
    """A Python file defining reward(turn, next_state, context); it replaces the judge."""


class TrainSettings(_Section):
    enabled: bool = True
    """Run the background trainer (off = serve, record and judge only)."""
    method: Literal["rl", "opd", "combine", "topk-opd", "combine-topk", "combine-stop"] = "combine"
    """Objective: binary RL, on-policy distillation, their combination, top-k OPD, binary
    RL + top-k OPD (combine-topk), or binary RL + the teacher's "stop here" alone
    (combine-stop: for users who want shorter answers; docs/learning.md)."""
    w_rl: float = Field(default=1.0, ge=0.0)
    """Weight of the reward term (binary RL) in combine and combine-topk (upstream 1)."""
    w_opd: float = Field(default=1.0, ge=0.0)
    """Weight of the teacher term (OPD, or the top-k KL of combine-topk) in the same."""
    kl_coef: float = Field(default=0.0, ge=0.0)
    """Weight of a KL anchor to the base model (k3 on the sampled tokens; the base is the
    adapter turned off, so LoRA and QLoRA only): keeps the policy near what it was."""
    anchor_coef: float = Field(default=2.5, ge=0.0)
    """Weight of the anchor: KL(base || policy) over the whole vocabulary on the base
    model's own answers to general prompts you never ask (`assets/anchor_prompts.jsonl`),
    held each step: what you teach on your prompts does not turn other kinds of answer
    into loops (LoRA and QLoRA only; 0 = off; docs/learning.md). The KL is a mean over the
    answers' positions: 2.5 on 128-token answers holds each position about as hard as 1.0
    did on 48 (1.0 on 128 let brevity/dozen's form pool reach 0.18)."""
    anchor_items: int = Field(default=8, ge=1, le=32)
    """Anchor answers per step."""
    anchor_tokens: int = Field(default=128, ge=8, le=256)
    """Length of the base model's anchor answers (tokens): the anchor holds nothing after
    them, and a user who lets answers run to 100 tokens sees what comes there (48 held
    brevity/w20 and tips25 back into loops at 96-100 tokens)."""
    anchor_free_stop: bool = True
    """The anchor leaves where to stop free: the end-of-turn tokens are left out of its KL,
    so a request for shorter answers is not held back on the anchor prompts, while what the
    answers say stays the base's."""
    signal_norm: float = Field(default=0.25, ge=0.0)
    """A step whose gradient norm is under this moves at lr * norm / this: a batch that says
    little moves the weights little (Adam alone moves them ~lr either way; 0 = off)."""
    repeat_ngram: int = Field(default=4, ge=0)
    """A token that completes a phrase of this many tokens said earlier in the same answer
    is never pushed up, and is pushed down by `repeat_penalty`: feedback cannot reinforce a
    loop (0 = off)."""
    repeat_penalty: float = Field(default=0.5, ge=0.0)
    """The advantage of such a repeating token: min(A, 0) - this."""
    mode: Literal["auto", "lora", "qlora", "full"] = "auto"
    """LoRA, 4-bit base + LoRA (CUDA only), or full fine-tuning; auto follows the plan."""
    batch_size: int | None = None
    """Samples per optimizer step; empty = 16 on GPU, 4 for the embedded CPU model."""
    lr: float | None = None
    """AdamW learning rate; empty = 1e-5 full, 1e-4 LoRA on GPUs, 5e-4 LoRA on the CPU."""
    updates_per_batch: int = Field(default=1, ge=1, le=16)
    """Optimizer updates per batch (PPO epochs); one checkpoint per batch (upstream: 1)."""
    lora_rank: int = 16
    """LoRA rank r."""
    lora_alpha: int = 32
    """LoRA alpha."""
    schedule: str = "always"
    """`always`, or a cron expression (e.g. `0 1 * * *`) for when training may run."""
    when_idle_s: float = 0.0
    """Train only after this many seconds without user requests (0 = any time)."""
    yield_to_serving_s: float = 30.0
    """CPU-only machines: a training step pauses while the endpoint answers, at most this
    many seconds per step (0 = never pause; the step then competes with chat for the cores)."""
    max_staleness: int = 8
    """Skip samples answered by a policy more than this many training steps behind the
    trainer's weights (versions refused or left behind do not count)."""
    baseline: Literal["ema", "batch_mean", "none"] = "batch_mean"
    """Reward baseline for binary RL: batch_mean (a batch of equal rewards does not push),
    ema (a moving mean of past rewards) or none (upstream's A = r)."""
    credit_accepted: bool = False
    """batch_mean: a batch in which every answer was accepted (+1), after answers that fared
    worse, trains at A = r - max(0, the moving mean of earlier rewards) instead of being
    skipped for want of contrast; a batch of rejections only still does not push. Off: not
    yet measured end to end (docs/learning.md)."""
    replay_demos: int = Field(default=0, ge=0, le=16)
    """Each step also trains up to this many of the teacher's answers of earlier steps
    again (the newest first; `judge.teacher_answers`), beside its new samples: the teacher
    keeps an answer for about one rejected turn in four, and each was trained once. 0 = off
    (docs/learning.md)."""
    replay_uses: int = Field(default=2, ge=1, le=8)
    """How many more times each such answer may train (`replay_demos`)."""
    opd_baseline: Literal["batch_mean", "none"] = "none"
    """Baseline of the teacher term (OPD, combine): batch_mean subtracts the batch's mean
    teacher gap (none = upstream)."""
    behaviour_correction: Literal["auto", "tis", "off"] = "auto"
    """When the serving engine's log-probs differ from the trainer's (llama.cpp kernels):
    truncated importance sampling (tis); auto = tis under the llama.cpp backend."""
    tis_cap: float = 2.0
    """Truncation of the importance weights min(π_trainer/π_served, cap) (>= 1)."""
    token_budget: int = 4096
    """Most padded tokens per micro-batch (gradient accumulation splits larger batches)."""
    gradient_checkpointing: Literal["auto", "on", "off"] = "auto"
    """Recompute each decoder layer in backward instead of keeping its activations: less
    memory for about one more forward per step. auto = only where a micro-batch's
    activations would not fit otherwise (`clawrl-app doctor` shows the choice and why)."""
    keep_last: int = 5
    """Checkpoints kept by retention: the newest N ..."""
    keep_every: int = 10
    """... plus every K-th step (and pinned and served ones); 0 = no periodic keep."""
    prune_every_min: float = 10.0
    """How often retention runs (minutes)."""
    custom_loss_path: str | None = None
    """A Python file defining loss(batch, cfg, adv_B) -> LossResult; replaces the objective."""


class ReviewSettings(_Section):
    mode: Literal["auto", "manual"] = "auto"
    """auto: samples become eligible after grace_s unless excluded; manual: approved only."""
    grace_s: float = 60.0
    """Seconds between a judgment and its sample becoming trainable in auto mode."""


class UiSettings(_Section):
    keys: dict[str, str] = {}
    """Remap terminal-UI keys by binding id, e.g. `keys = { "sessions.exclude" = "e" }`
    (ids are listed in the README; a JSON object in the environment variable)."""

    @field_validator("keys", mode="before")
    @classmethod
    def _json_text(cls, value: Any) -> Any:
        if isinstance(value, str):  # from CLAWRL_UI__KEYS
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError(
                    'expected a JSON object such as {"sessions.exclude": "e"}'
                ) from None
        return value


def _pattern_list(value: Any) -> Any:
    """Env-var text for a list of regexes: a JSON list, else one pattern (never split on
    commas: a regex may contain them)."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError('expected a JSON list such as ["ACME-\\\\d+"]') from None
        return [value]
    return value


class PrivacySettings(_Section):
    redact: bool = True
    """Replace secrets and personal data (API keys and tokens, passwords in URLs, e-mail
    addresses, phone and card numbers) with markers such as `[REDACTED:email]` before a
    turn is stored, judged or trained on. The client still gets its answer unchanged."""
    redact_patterns: list[str] = []
    """More regular expressions to redact (marker `[REDACTED:custom]`), e.g.
    ["ACME-\\d{6}", "(?i)project falcon"]. In the environment: a JSON list or one pattern."""
    incognito_patterns: list[str] = []
    """Regular expressions searched in a request's first user message: a request that
    matches is answered but nothing of it is stored (like `X-Session-Incognito: true`)."""
    incognito_sources: list[str] = []
    """Regular expressions searched in the `User-Agent` and `X-Session-Source` headers: a
    matching client is answered but never recorded, e.g. ["^my-scratch-tool"]."""

    @field_validator("redact_patterns", "incognito_patterns", "incognito_sources", mode="before")
    @classmethod
    def _env_list(cls, value: Any) -> Any:
        return _pattern_list(value)

    @field_validator("redact_patterns", "incognito_patterns", "incognito_sources")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        from clawrl_app.privacy.redact import compile_patterns

        compile_patterns(value)  # InvalidPattern (a ValueError) names the bad pattern
        return value


class HealthSettings(_Section):
    """Judge health (Dashboard panel, `clawrl-app doctor`): when to warn that the rewards
    may be teaching the wrong thing."""

    ratings: int = 50
    """How many of your newest explicit ratings the judge's agreement is measured over."""
    min_ratings: int = 10
    """Fewest ratings before a low agreement warns (fewer say too little)."""
    min_agreement: float = 0.7
    """Warn when the judge gave your rating's score on fewer than this share of turns."""
    judgments: int = 200
    """How many of the newest judgments the reward balance (+1 / 0 / -1) is measured over."""
    min_judgments: int = 20
    """Fewest judgments before a one-sided reward balance warns."""
    max_sign_share: float = 0.8
    """Warn when one reward sign (+, 0 or -) is more than this share of recent judgments."""
    length_window: int = 2000
    """How many of the newest main turns the answer length per version is measured over."""
    min_turns_per_version: int = 10
    """Fewest main turns of both the newest version and base before length drift warns."""
    max_length_drift: float = 0.5
    """Warn when the newest version's mean answer length differs from base's by more than
    this fraction (0.5 = 50 % longer or shorter)."""


class Settings(_Section):
    """The effective configuration of one run."""

    server: ServerSettings = ServerSettings()
    """The OpenAI-compatible endpoint."""
    model: ModelSettings = ModelSettings()
    """The policy model."""
    hardware: HardwareSettings = HardwareSettings()
    """GPU partition and serving backend."""
    judge: JudgeSettings = JudgeSettings()
    """The process reward model."""
    train: TrainSettings = TrainSettings()
    """The background trainer."""
    review: ReviewSettings = ReviewSettings()
    """The review gate before training."""
    ui: UiSettings = UiSettings()
    """The terminal UI."""
    privacy: PrivacySettings = PrivacySettings()
    """Redaction and incognito traffic (what is recorded at all)."""
    health: HealthSettings = HealthSettings()
    """Judge health: agreement with your ratings, reward balance, answer-length drift."""
    guard: GuardSettings = GuardSettings()
    """The personal regression guard (held-out prompts + a general set, before serving)."""
    envs: EnvsSettings = EnvsSettings()
    """Agentic environments: how their turns ask for actions."""


UPSTREAM_ENV: dict[str, tuple[str, str]] = {
    "MODEL_PATH": ("model", "path"),
    "PRM_MODEL_PATH": ("judge", "model_path"),
    "NUM_GPUS": ("hardware", "num_gpus"),
    "ACTOR_GPUS": ("hardware", "actor_gpus"),
    "ROLLOUT_GPUS": ("hardware", "rollout_gpus"),
    "PRM_GPUS": ("hardware", "prm_gpus"),
    "PORT": ("server", "port"),
}
ENV_PREFIX = "CLAWRL_"


class ConfigError(ValueError):
    """A setting is invalid; the message names the key, its source and what is allowed."""


@dataclass
class LoadedSettings:
    """Settings plus where each non-default value came from (`section.key` -> source)."""

    settings: Settings
    sources: dict[str, str] = field(default_factory=dict)

    def source_of(self, dotted: str) -> str:
        return self.sources.get(dotted, "default")


def _sections() -> dict[str, type[_Section]]:
    return {
        name: f.annotation  # type: ignore[misc]
        for name, f in Settings.model_fields.items()
    }


def _put(
    layers: dict[str, dict[str, Any]],
    sources: dict[str, str],
    section: str,
    key: str,
    value: Any,
    source: str,
) -> None:
    sections = _sections()
    if section not in sections:
        raise ConfigError(
            f"Unknown config section '{section}' (from {source}). "
            f"Allowed sections: {', '.join(sections)}."
        )
    if key not in sections[section].model_fields:
        allowed = ", ".join(sections[section].model_fields)
        raise ConfigError(
            f"Unknown setting '{section}.{key}' (from {source}). Allowed keys: {allowed}."
        )
    layers.setdefault(section, {})[key] = value
    sources[f"{section}.{key}"] = source


def _from_toml(path: Path, layers: dict[str, dict[str, Any]], sources: dict[str, str]) -> None:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}. Fix or remove the file.") from exc
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f"'{section}' in {path} must be a [section] table, e.g. [{section}] key = value."
            )
        for key, value in table.items():
            _put(layers, sources, section, key, value, f"file {path}")


def _from_env(
    env: Mapping[str, str], layers: dict[str, dict[str, Any]], sources: dict[str, str]
) -> None:
    for name, (section, key) in UPSTREAM_ENV.items():
        if env.get(name, "") != "":  # an empty variable counts as unset
            _put(layers, sources, section, key, env[name], f"env {name}")
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        if value == "":
            continue
        section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
        _put(layers, sources, section, key, value, f"env {name}")


def load_settings(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    cli: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> LoadedSettings:
    """Build the effective settings; raise ConfigError naming key, source and allowed values.

    `cli` maps dotted keys (`server.port`) to values; None values are ignored.
    `flag_names` maps dotted keys to the flag that set them (`model.path` -> `--model`).
    """
    layers: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}
    if config_file is not None and config_file.exists():
        _from_toml(config_file, layers, sources)
    _from_env(os.environ if env is None else env, layers, sources)
    for dotted, value in (cli or {}).items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        flag = (flag_names or {}).get(dotted, f"--{key.replace('_', '-')}")
        _put(layers, sources, section, key, value, f"flag {flag}")
    try:
        settings = Settings.model_validate(layers)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, layers, sources)) from None
    return LoadedSettings(settings, sources)


def _explain(
    exc: ValidationError, layers: dict[str, dict[str, Any]], sources: dict[str, str]
) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"][:2]]
        dotted = ".".join(loc)
        value = layers.get(loc[0], {}).get(loc[1]) if len(loc) == 2 else None
        src = sources.get(dotted, "default")
        allowed = _allowed(loc)
        lines.append(
            f"Invalid setting {dotted} = {value!r} (from {src}): {err['msg']}."
            + (f" Allowed: {allowed}." if allowed else "")
        )
    return (
        "\n".join(lines) + "\nFix the value, or run `clawrl-app config show` to see every setting."
    )


def _allowed(loc: list[str]) -> str:
    if len(loc) != 2 or loc[0] not in _sections():
        return ""
    f = _sections()[loc[0]].model_fields.get(loc[1])
    if f is None:
        return ""
    ann = str(f.annotation).replace("typing.", "")
    return ann.replace("<class '", "").replace("'>", "")


def describe(loaded: LoadedSettings) -> list[tuple[str, Any, str, str]]:
    """Rows of (dotted key, effective value, source, docstring) for `config show`."""
    rows = []
    for section_name in Settings.model_fields:
        section = getattr(loaded.settings, section_name)
        for key, f in type(section).model_fields.items():
            dotted = f"{section_name}.{key}"
            rows.append(
                (dotted, getattr(section, key), loaded.source_of(dotted), f.description or "")
            )
    return rows
