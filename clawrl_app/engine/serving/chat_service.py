"""One chat turn, independent of HTTP: session, prompt ids, generation, recording.

Used by the OpenAI endpoint and by the TUI's chat pane, so every conversation is
recorded the same way: prompt ids, the *sampled* response ids with their behaviour
log-probs (never re-tokenized), the policy version, latency and usage.

Privacy (issue #16): an incognito request (header or `privacy.incognito_*` rule) is answered
and forgotten: no session, turn, sample or event. Any other turn is redacted before the
write (`clawrl_app.privacy.redact`); a turn that had something redacted is stored without
its token ids and log-probs, since those encode the original text (see `NewTurn.redactions`).
Env rollouts (`env:` sources) are not redacted: their text is the app's own task data.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from clawrl_app.engine.backends.base import (
    Backend,
    BackendOverloaded,
    Finished,
    GenerationRequest,
    SamplingParams,
    TokenOut,
    UnknownVersion,
)
from clawrl_app.engine.chat.formatter import (
    TOOL_CLOSE,
    ChatFormatter,
    IncrementalText,
    ParsedAnswer,
    parse_answer,
)
from clawrl_app.engine.chat.openai_schema import (
    ApiError,
    ChatRequest,
    TokenLogprob,
    parse_chat_request,
)
from clawrl_app.engine.chat.temperature import is_greedy
from clawrl_app.engine.chat.tool_constraint import check_enforceable, forced_call_schema
from clawrl_app.engine.core.cpu_share import ServingActivity
from clawrl_app.engine.core.events import EventSink, SessionClosed, TurnRecorded
from clawrl_app.engine.core.held_out import is_held_out
from clawrl_app.engine.serving.sampling_defaults import OPENAI_DEFAULTS, SamplingDefaults
from clawrl_app.engine.serving.sessions import (
    SessionDecision,
    SessionMeta,
    SessionTracker,
    pop_session_fields,
)
from clawrl_app.engine.store import ENV_SOURCE_PREFIX, NewTurn, Store, StoreError
from clawrl_app.privacy.policy import PrivacyPolicy

log = logging.getLogger("clawrl.chat")


@dataclass(frozen=True)
class ChatDelta:
    """Streamable piece of the answer."""

    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class ChatResult:
    """The finished answer and what was recorded."""

    content: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    policy_version: str
    prompt_tokens: int
    completion_tokens: int
    logprobs: list[TokenLogprob]
    session_id: str
    turn_type: str
    turn_id: int | None


@dataclass
class PreparedChat:
    """A validated request, rendered and routed, ready to generate."""

    request: ChatRequest
    record: dict[str, Any]
    messages: list[dict[str, Any]]
    prompt_ids: list[int]
    params: SamplingParams
    version: str
    model_name: str
    decision: SessionDecision
    tools_offered: bool
    answer_prefix: str = ""
    """A forced call's opening, already at the end of `prompt_ids` (see `_forced_answer`)."""
    incognito: str | None = None
    """Why nothing of this request is recorded (the header or a rule); None: recorded."""


class ChatService:
    """Prepares, runs and records chat turns against a backend."""

    def __init__(
        self,
        backend: Backend,
        formatter: ChatFormatter,
        store: Store,
        *,
        alias: str = "clawrl",
        default_max_tokens: int = 512,
        events: EventSink | None = None,
        tracker: SessionTracker | None = None,
        activity: ServingActivity | None = None,
        max_concurrent: int = 64,
        request_timeout_s: float = 600.0,
        sampling_defaults: SamplingDefaults = OPENAI_DEFAULTS,
        stop_repetition: bool = False,
        privacy: PrivacyPolicy | None = None,
        holdout_share: float = 0.0,
    ) -> None:
        self.backend = backend
        self.formatter = formatter
        self.store = store
        self.alias = alias
        self.default_max_tokens = default_max_tokens
        self.events: EventSink = events or (lambda e: None)
        self.tracker = tracker or SessionTracker()
        self.last_user_request = time.monotonic()
        self.activity = activity
        """Raised while answers are generated (a CPU-sharing trainer pauses then)."""
        self.max_concurrent = max_concurrent
        self.request_timeout_s = request_timeout_s
        self.sampling_defaults = sampling_defaults
        """temperature/top_p for requests that omit them (the model's recommended values)."""
        self.stop_repetition = stop_repetition
        self.active = 0
        """Answers started and not yet finished or abandoned (each holds one slot)."""
        self.unrecorded_turns = 0
        """Turns answered but not recorded because the store failed (since start-up)."""
        self.privacy = privacy if privacy is not None else PrivacyPolicy()
        """The redactor and the incognito rules (`[privacy]` settings)."""
        self.incognito_turns = 0
        """Turns answered and deliberately not recorded (incognito), since start-up."""
        self.holdout_share = holdout_share
        """Share of main turns held out for the regression guard (`guard.holdout_share`)."""

    # -- names -----------------------------------------------------------------------
    def model_name(self, version: str) -> str:
        """The public name of a policy version, e.g. `clawrl-v12`."""
        return f"{self.alias}-{version}"

    def model_names(self) -> list[str]:
        """The alias first, then every loaded version."""
        return [self.alias, *(self.model_name(v) for v in self.backend.info().versions)]

    def resolve_version(self, model: str) -> str:
        """Alias -> the active version; `alias-vN` -> vN; anything else is a 404."""
        if model == self.alias:
            return self.backend.active_version
        prefix = f"{self.alias}-"
        if model.startswith(prefix) and model[len(prefix) :] in self.backend.info().versions:
            return model[len(prefix) :]
        raise ApiError(
            404,
            f"The model '{model}' does not exist. Use '{self.alias}' (the current policy) "
            f"or one of: {', '.join(self.model_names())}.",
            code="model_not_found",
            param="model",
        )

    # -- prepare ---------------------------------------------------------------------
    def prepare(
        self,
        payload: Any,
        header_session: str | None = None,
        header_turn_type: str | None = None,
        header_done: bool = False,
        source_hint: str | None = None,
        incognito: bool = False,
        client_sources: Sequence[str | None] = (),
    ) -> PreparedChat:
        """Validate, pick session and version, render the prompt; raise ApiError on bad input.

        `incognito` (the `X-Session-Incognito` header) or an incognito rule matching the
        messages or `client_sources` (User-Agent, X-Session-Source) keeps the turn unrecorded."""
        if isinstance(payload, dict):
            payload = dict(payload)
            body_sid, body_type, body_done = pop_session_fields(payload)
        else:
            body_sid, body_type, body_done = None, None, False
        req = parse_chat_request(payload)
        version = self.resolve_version(req.model)
        messages = [m.model_dump(exclude_none=True) for m in req.messages]
        tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
        if req.tool_choice == "none":
            tools = None
        call_schema = forced_call_schema(tools, req.tool_choice)  # None unless forced
        if call_schema is not None:
            check_enforceable(call_schema)
        prompt_ids = self.formatter.render(messages, tools, req.tool_choice)
        ctx = self.backend.info().context_length
        limit = req.answer_limit
        if limit is None:
            limit = min(self.default_max_tokens, ctx - len(prompt_ids))
        if len(prompt_ids) + max(limit, 1) > ctx:
            raise ApiError(
                400,
                f"This model's maximum context length is {ctx} tokens. However, you requested "
                f"{len(prompt_ids) + limit} tokens ({len(prompt_ids)} in the messages, {limit} in "
                "the completion). Please reduce the length of the messages or completion.",
                code="context_length_exceeded",
                param="messages",
            )
        meta = SessionMeta(
            session_id=header_session or body_sid,
            turn_type=header_turn_type or body_type,
            done=header_done or body_done,
            max_tokens=req.answer_limit,
            has_tools=bool(tools),
            source_hint=source_hint,
        )
        decision = self.tracker.decide(messages, meta)
        defaults = self.sampling_defaults
        temperature = defaults.temperature if req.temperature is None else req.temperature
        if is_greedy(temperature):  # 5e-127 would overflow logits / T: greedy, everywhere
            temperature = 0.0
        params = SamplingParams(
            max_new_tokens=limit,
            temperature=temperature,
            top_p=defaults.top_p if req.top_p is None else req.top_p,
            seed=req.seed,
            stop_on_repetition=self.stop_repetition,
            top_logprobs=(req.top_logprobs or 0) if req.logprobs else 0,
            json_schema=None if call_schema is None else json.dumps(call_schema),
        )
        record = {
            "messages": messages,
            "tools": tools,
            "tool_choice": req.tool_choice,
            "temperature": temperature,
            "top_p": params.top_p,
            "max_tokens": limit,
            "stop": req.stop_list,
            "seed": req.seed,
        }
        why = "X-Session-Incognito" if incognito else None
        return PreparedChat(
            req,
            record,
            messages,
            prompt_ids,
            params,
            version,
            self.model_name(version),
            decision,
            bool(tools),
            self.formatter.answer_prefix(tools, req.tool_choice),
            why or self.privacy.incognito_reason(messages, client_sources),
        )

    # -- run -------------------------------------------------------------------------
    def start(self, prep: PreparedChat) -> AsyncIterator[ChatDelta | ChatResult]:
        """Take a slot and queue the generation now (too many -> ApiError 429) and stream it.

        The slot is released exactly once: when the stream ends, fails, or is closed, also
        when it is closed before its first read (a client that went away at once)."""
        if self.active >= self.max_concurrent:
            raise _busy(
                f"{self.active} answers are in progress (server.max_concurrent = "
                f"{self.max_concurrent})"
            )
        if prep.decision.turn_type == "main":
            self.last_user_request = time.monotonic()
        gen_req = GenerationRequest(
            request_id=f"req-{uuid.uuid4().hex[:16]}",
            prompt_ids=prep.prompt_ids,
            params=prep.params,
            version=prep.version,
        )
        try:
            stream = self.backend.generate(gen_req)
        except BackendOverloaded as exc:
            raise _busy(f"{exc}; server.max_queue") from None
        except UnknownVersion:
            raise ApiError(
                404,
                f"Version {prep.version} was just unloaded; use '{self.alias}'.",
                code="model_not_found",
                param="model",
            ) from None
        self.active += 1
        return _Slot(self._run(prep, stream), stream, self._release)

    def _release(self) -> None:
        self.active -= 1

    async def _next_event(self, it: AsyncIterator[Any], deadline: float) -> Any:
        """The backend's next event; fails the answer once server.request_timeout_s is spent
        (StopAsyncIteration at the end of the stream)."""
        try:
            return await asyncio.wait_for(it.__anext__(), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise ApiError(
                504,
                f"The answer took longer than {self.request_timeout_s:g} s "
                "(server.request_timeout_s); ask for fewer tokens or raise the limit.",
                type="server_error",
                code="timeout",
            ) from None

    async def _run(
        self, prep: PreparedChat, stream: AsyncIterator[Any]
    ) -> AsyncIterator[ChatDelta | ChatResult]:
        t0 = time.monotonic()
        forced = bool(prep.answer_prefix)
        stop = [] if forced else prep.request.stop_list  # a stop string must not cut a call
        text = IncrementalText(self.formatter, stop, prep.tools_offered, prep.answer_prefix)
        want_lp = bool(prep.request.logprobs)
        ids: list[int] = []
        lps: list[float] = []
        token_lps: list[TokenLogprob] = []
        finished: Finished | None = None
        if self.activity is not None:
            self.activity.begin()
        try:
            it = stream.__aiter__()
            deadline = t0 + self.request_timeout_s
            while True:
                try:
                    ev = await self._next_event(it, deadline)
                except StopAsyncIteration:
                    break
                if isinstance(ev, Finished):
                    finished = ev
                    break
                assert isinstance(ev, TokenOut)
                ids.append(ev.token_id)
                lps.append(ev.logprob)
                delta = text.push(ev.token_id)
                tl = [self._token_logprob(ev)] if want_lp else []
                token_lps.extend(tl)
                if delta or tl:
                    yield ChatDelta(delta, tl)
                if text.stopped:
                    break
        finally:
            if self.activity is not None:
                self.activity.end()
            await _close(stream)
        reason: str = "stop" if (text.stopped or finished is None) else finished.reason
        tail = text.finish()
        if tail:
            yield ChatDelta(tail)
        full_text = text.text
        if forced:
            answer, reason = _forced_answer(full_text, reason)
            full_text += TOOL_CLOSE if answer.tool_calls else ""
        else:
            answer = parse_answer(full_text, prep.tools_offered)
        if answer.tool_calls:
            reason = "tool_calls"
        version = finished.policy_version if finished else prep.version
        latency_ms = (time.monotonic() - t0) * 1000
        turn_id = await self._record(
            prep, answer.message(), full_text, ids, lps, version, reason, latency_ms
        )
        yield ChatResult(
            answer.content,
            answer.tool_calls,
            reason,
            version,
            len(prep.prompt_ids),
            len(ids),
            token_lps,
            prep.decision.session_id,
            prep.decision.turn_type,
            turn_id,
        )

    def _token_logprob(self, ev: TokenOut) -> TokenLogprob:
        fmt = self.formatter
        return TokenLogprob(
            fmt.token_str(ev.token_id),
            ev.logprob,
            tuple((fmt.token_str(t), lp) for t, lp in ev.top_logprobs),
        )

    async def _record(
        self,
        prep: PreparedChat,
        answer: dict[str, Any],
        text: str,
        ids: list[int],
        lps: list[float],
        version: str,
        reason: str,
        latency_ms: float,
    ) -> int | None:
        d = prep.decision
        if prep.incognito is not None:  # answered, never recorded nor remembered
            self.incognito_turns += 1
            return None
        turn = NewTurn(
            session_id=d.session_id,
            type=d.turn_type,
            request=prep.record,
            response_text=text,
            response={"message": answer, "finish_reason": reason},
            prompt_ids=prep.prompt_ids,
            response_ids=ids,
            logprobs=lps,
            policy_version=version,
            latency_ms=latency_ms,
            prompt_tokens=len(prep.prompt_ids),
            completion_tokens=len(ids),
            finish_reason=reason,
            holdout=self._held_out(prep, d.source, d.session_id),
        )
        if d.turn_type == "main":
            self.tracker.remember(d.session_id, prep.messages, answer)
        try:
            row = await asyncio.to_thread(self._write_turn, d.source, turn, d.done)
        except Exception as exc:  # the client still gets its answer
            self.unrecorded_turns += 1
            if isinstance(exc, StoreError) and exc.is_fault:
                # the store reports the fault once (StoreFailed); one line per lost turn here
                log.warning("turn of session %s answered but not recorded: %s", d.session_id, exc)
            else:
                log.exception("recording a turn failed")
            return None
        self.events(TurnRecorded(d.session_id, row, d.turn_type, version, len(ids), latency_ms))
        if d.done:
            self.tracker.close(d.session_id)
            self.events(SessionClosed(d.session_id, "done"))
        return row

    def _held_out(self, prep: PreparedChat, source: str, session_id: str) -> bool:
        """Whether this main turn joins the guard's personal set (chosen now, by a fixed
        hash of the session and the turn's position); env rollouts never do."""
        if prep.decision.turn_type != "main" or source.startswith(ENV_SOURCE_PREFIX):
            return False
        return is_held_out(f"{session_id}:{len(prep.messages)}", self.holdout_share)

    def redact_turn(self, source: str, turn: NewTurn) -> NewTurn:
        """The turn as it may be stored: text redacted; with any finding, no token ids and
        no log-probs (they would decode to the original text). Env sessions stay as sent."""
        redactor = self.privacy.redactor
        if redactor is None or source.startswith(ENV_SOURCE_PREFIX):
            return turn
        request, counts = redactor.redact_value(turn.request)
        response, more = redactor.redact_value(turn.response)
        text = redactor.redact(turn.response_text)
        for kind, n in [*more.items(), *text.counts.items()]:
            counts[kind] = counts.get(kind, 0) + n
        if not counts:
            return turn
        return replace(
            turn,
            request=request,
            response=response,
            response_text=text.text,
            prompt_ids=[],
            response_ids=[],
            logprobs=[],
            redactions=counts,
            holdout=False,  # without its token ids it cannot be scored
        )

    def _write_turn(self, source: str, turn: NewTurn, done: bool) -> int:
        turn = self.redact_turn(source, turn)  # here: off the event loop
        return self.store.append_turn(turn, source, done)  # one transaction

    def close_idle_sessions(self, idle_s: float) -> list[str]:
        """Close sessions without a request for `idle_s` seconds; returns their ids."""
        closed = []
        for s in self.store.idle_sessions(time.time() - idle_s):
            self.store.close_session(s.id, "idle")
            self.tracker.close(s.id)
            self.events(SessionClosed(s.id, "idle"))
            closed.append(s.id)
        return closed


def _forced_answer(text: str, reason: str) -> tuple[ParsedAnswer, str]:
    """The answer to a forced call: `text` is the opening plus the constrained JSON.

    Complete JSON is one valid call (the grammar allowed nothing else). JSON still open
    when the answer ended (`max_tokens`, or a loop cut off by `server.stop_repetition`)
    cannot be a valid call: the answer is then empty, with `finish_reason` "length", never
    a malformed call. The partial JSON is still recorded as the turn's response text."""
    answer = parse_answer(text + TOOL_CLOSE, tools_offered=True)
    if len(answer.tool_calls) == 1:
        return ParsedAnswer("", answer.tool_calls), reason
    if reason == "stop":  # the grammar ended the answer without a call: not expected
        log.warning("forced tool call ended without a complete call: %r", text[-200:])
    return ParsedAnswer(""), reason


def _busy(why: str) -> ApiError:
    return ApiError(
        429,
        f"The server is busy ({why}); retry shortly.",
        type="server_error",
        code="overloaded",
        headers={"Retry-After": "1"},
    )


class _Slot:
    """An answer stream holding one of the service's slots until it ends or is closed."""

    def __init__(
        self, run: AsyncIterator[Any], backend_stream: AsyncIterator[Any], release: Any
    ) -> None:
        self._run = run
        self._backend_stream = backend_stream
        self._release = release
        self._held = True

    def _free(self) -> None:
        if self._held:
            self._held = False
            self._release()

    def __aiter__(self) -> _Slot:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._run.__anext__()
        except BaseException:  # the end (StopAsyncIteration), an error or a cancellation
            self._free()
            raise

    async def aclose(self) -> None:
        try:
            await _close(self._run)
            await _close(self._backend_stream)  # never started: cancel the queued request
        finally:
            self._free()


async def _close(stream: AsyncIterator[Any]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
