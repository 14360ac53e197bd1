"""The GPU serving backend: an SGLang server (usually our child process) over HTTP.

Generation uses SGLang's native `POST /generate` with token ids in and token ids plus
per-token log-probs out, so the app owns the exact prompt ids, sampled ids and their
behaviour log-probs. Policy versions have never-reused names; `base` is the launch model.
A version is a LoRA adapter (selected per request by `lora_path`) or a full fine-tuning
checkpoint (config.json + *.safetensors, no adapter_config.json). SGLang serves ONE set of
full weights, so activating a full version replaces them in place: `pause_generation`
(retract) -> `update_weights_from_disk` -> `continue_generation`, a stall measured in
`last_weight_update_s` / `status()`. Consequences:
- Requests in flight at the pause are retracted (re-queued) by SGLang and FINISH ON THE
  NEW WEIGHTS under the label they were admitted with (each token keeps the log-prob it
  was sampled with). Requests arriving during the swap wait and get the new version.
- While a full checkpoint is served the base weights are gone: `score(version=None)` and
  requests pinned to `base` are refused (use `judge.teacher = "policy"`);
  `activate("base")` reloads the launch weights the same way.
- An adapter applies to the weights served when it is loaded (after a full update: over
  that checkpoint); adapters over replaced weights are refused, but can be unloaded.
- SGLang renames its served model to the checkpoint path; our `model_name` stays.

Streaming format (SGLang 0.5.23, `managers/tokenizer_manager.py` `_handle_batch_output`
and `_wait_one_response`, `entrypoints/http_server.py` `generate_request`): the reply is
`text/event-stream` with `data: {json}` events and a final `data: [DONE]`. Unless the
server runs with `--incremental-streaming-output` (default off; we never pass it), every
event is CUMULATIVE: `text`, `output_ids` and `meta_info.output_token_logprobs` (and
`output_top_logprobs`) hold everything generated so far, and when the client is slow
SGLang sends only the newest state, so one event can add several tokens. We therefore
emit only the suffix past what was already yielded. Errors raised before the first
token arrive as `data: {"error": {"message": ...}}`; aborts arrive as
`finish_reason: {"type": "abort", "status_code": ..., "message": ...}`.

Covered by contract tests against `tests/sglang_standin.py`; only a GPU run can confirm
that a real server accepts this exact launch argv, that `output_ids` include the matched
EOS/stop token, that scoring's first `input_token_logprobs` entry is the null one at
`logprob_start_len`, that `lora_path` by adapter name selects the adapter, and that a
disk update with `--enable-lora` keeps the loaded adapters and retracted requests resume.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from clawrl_app.engine.backends.base import (
    BackendError,
    BackendInfo,
    Finished,
    GenerationEvent,
    GenerationRequest,
    UnknownVersion,
)
from clawrl_app.engine.backends.sglang.admission import BASE_VERSION, Admitted
from clawrl_app.engine.backends.sglang.launch import SGLangServer
from clawrl_app.engine.backends.sglang.stream import (
    _excerpt,
    _finished,
    _parse_chunk,
    _raise_for_status,
    _response_logprobs,
    _sse_events,
)
from clawrl_app.engine.chat.repetition import repeating_tail

log = logging.getLogger("clawrl.sglang")
__all__ = ["BASE_VERSION", "SGLangBackend"]


class SGLangBackend:
    """Serve policy versions from an SGLang server through its native HTTP API."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        model_name: str,
        context_length: int,
        eos_token_ids: tuple[int, ...],
        server: SGLangServer | None = None,
        timeout_s: float = 600.0,
        admin_timeout_s: float = 300.0,
        unload_timeout_s: float = 60.0,
        abort_timeout_s: float = 5.0,
        weight_update_timeout_s: float = 300.0,
        seeded: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._seeded = seeded  # launched with --enable-deterministic-inference
        self._api_key = api_key
        self._model_name = model_name
        self._context_length = context_length
        self._eos = tuple(eos_token_ids)
        self._server = server
        self._timeout = httpx.Timeout(timeout_s, connect=10.0)
        self._admin_timeout_s = admin_timeout_s
        self._unload_timeout_s = unload_timeout_s
        self._abort_timeout_s = abort_timeout_s
        self._weight_update_timeout_s = weight_update_timeout_s
        self._client: httpx.AsyncClient | None = None
        self._active = BASE_VERSION
        self._loaded: dict[str, Path] = {}
        """LoRA adapters loaded into SGLang."""
        self._lora_base: dict[str, str] = {}
        """The full weights (`base` or a full version) each adapter was loaded over."""
        self._full: dict[str, Path] = {}
        """Full fine-tuning checkpoints: remembered at load, served in place at activate."""
        self._weights: str | None = BASE_VERSION
        """The full weights SGLang serves; None = unknown (a weight update timed out)."""
        self._launch_model_path: str | None = None
        self._used_names: set[str] = {BASE_VERSION}
        self._inflight: Counter[str] = Counter()
        self._background: set[asyncio.Task[None]] = set()
        self._swap_lock = asyncio.Lock()
        self._swap_idle = asyncio.Event()
        self._swap_idle.set()
        self._swaps = 0
        self.model_info: dict[str, Any] = {}
        """The reply of `GET /model_info` at start (model_path, weight_version, ...)."""
        self.last_weight_update_s: float | None = None
        """Seconds generation stalled (pause sent -> continue answered) in the last update."""
        self.last_weight_update_error: str | None = None
        self.weight_updates = 0
        """Successful full-weight updates."""
        self.retracted_requests = 0
        """Requests in flight at a pause: they finished on the weights served after it."""
        self.adapters_evicted = 0
        """Adapters SGLang had evicted (past --max-loaded-loras) when the app unloaded them:
        0 while the launch's limit covers what the app holds (`factory.ADAPTERS_HELD`)."""

    # -- lifecycle -------------------------------------------------------------------
    @property
    def active_version(self) -> str:
        return self._active

    def inflight(self, version: str) -> int:
        """Requests (generations and scorings) currently running on `version`."""
        return self._inflight[version]

    def info(self) -> BackendInfo:
        """`versions` lists what `activate` accepts: base, full versions, usable adapters."""
        usable = [v for v in self._loaded if self._lora_base[v] == self._weights]
        return BackendInfo(
            model_name=self._model_name,
            context_length=self._context_length,
            eos_token_ids=self._eos,
            versions=[BASE_VERSION, *self._full, *usable],
            seeded=self._seeded,
        )

    def health(self) -> str | None:
        """None while serving works; the reason when the SGLang server we launched has exited."""
        code = self._server.returncode if self._server is not None else None
        if code is not None:
            return f"the SGLang server exited with code {code}; see the app log"
        return None

    def status(self) -> dict[str, Any]:
        """What is served and how the last full-weight update went (for the UI)."""
        return {
            "active_version": self._active,
            "served_weights": self._weights,
            "weight_updates": self.weight_updates,
            "last_weight_update_s": self.last_weight_update_s,
            "last_weight_update_error": self.last_weight_update_error,
            "retracted_requests": self.retracted_requests,
        }

    async def start(self) -> None:
        """Launch the server (when we own one), then check `/model_info`."""
        try:
            if self._server is not None:
                await self._server.start()
            if self._client is None:
                headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
                self._client = httpx.AsyncClient(
                    base_url=self.base_url, headers=headers, timeout=self._timeout
                )
            reply = await self._request("GET", "/model_info", None, self._admin_timeout_s)
            if not isinstance(reply, dict) or reply.get("is_generation") is False:
                raise BackendError(f"SGLang at {self.base_url} does not serve a generation model")
        except BaseException:
            await self.stop()  # never leave a half-started child behind
            raise
        self.model_info = reply
        if self._launch_model_path is None:  # what `activate("base")` reloads
            self._launch_model_path = reply.get("model_path") or None

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._server is not None:
            await self._server.stop()

    # -- requests --------------------------------------------------------------------
    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Admit the request now on its version (raising UnknownVersion at once) and stream.

        During a weight swap, admission (and any UnknownVersion) waits for the swap to end:
        SGLang would hold the request and run it on the new weights anyway.
        """
        if not self._swap_idle.is_set():
            return Admitted(self, request, None)
        version = request.version or self._active
        self._require_servable(version)
        return Admitted(self, request, version)

    async def _stream(
        self, request: GenerationRequest, version: str
    ) -> AsyncGenerator[GenerationEvent, None]:
        payload = self._generate_payload(request, version)
        emitted = 0
        streaming = done = False
        loops = request.params.stop_on_repetition
        out: list[int] = []
        try:
            async with self._http().stream("POST", "/generate", json=payload) as response:
                if response.status_code >= 400:
                    await response.aread()
                    _raise_for_status("/generate", response)
                streaming = True
                async for chunk in _sse_events(response):
                    tokens, finish = _parse_chunk(chunk, emitted)
                    for token in tokens:
                        emitted += 1
                        yield token
                        out.append(token.token_id)
                        if loops and finish is None and repeating_tail(out):
                            # a loop would run to max_tokens: cut it off here, as the torch
                            # backend does, and free SGLang's slot
                            done = True
                            await self._abort(request.request_id)
                            yield Finished("length", version, len(request.prompt_ids), emitted)
                            return
                    if finish is not None:
                        done = True
                        yield _finished(finish, chunk, version, request, emitted)
                        return
            raise BackendError("SGLang /generate stream ended without a finish_reason")
        except httpx.TransportError as exc:
            raise BackendError(f"SGLang /generate failed: {exc!r}") from exc
        except (GeneratorExit, asyncio.CancelledError, BackendError):
            if streaming and not done:  # we stop reading mid-answer: free SGLang's slot
                await self._abort(request.request_id)
            raise

    def _generate_payload(self, request: GenerationRequest, version: str) -> dict[str, Any]:
        p = request.params
        sampling: dict[str, Any] = {
            "max_new_tokens": p.max_new_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
        }
        stop_ids = list(dict.fromkeys((*p.stop_token_ids, *self._eos)))
        if stop_ids:
            sampling["stop_token_ids"] = stop_ids
        if p.seed is not None and self._seeded:  # ignored by SGLang otherwise: never sent
            sampling["sampling_seed"] = p.seed
        if p.json_schema is not None:  # SGLang's constrained decoding (its grammar backend)
            sampling["json_schema"] = p.json_schema
        payload: dict[str, Any] = {
            "input_ids": list(request.prompt_ids),
            "sampling_params": sampling,
            "rid": request.request_id,
            "return_logprob": True,
            "stream": True,
        }
        if p.top_logprobs > 0:
            payload["top_logprobs_num"] = p.top_logprobs
        if version in self._loaded:  # base and full versions are the served weights
            payload["lora_path"] = version
        return payload

    async def _abort(self, rid: str) -> None:
        """Ask SGLang to drop a request whose reader went away (best effort)."""

        async def send() -> None:
            try:
                await self._request("POST", "/abort_request", {"rid": rid}, self._abort_timeout_s)
            except BackendError as exc:
                log.warning("could not abort SGLang request %s: %s", rid, exc)

        task = asyncio.ensure_future(send())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        await asyncio.shield(task)  # a second cancellation must not lose the abort

    async def score(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        version: str | None = None,
        *,
        urgent: bool = False,
    ) -> list[float]:
        """Log-probs of `response_ids` after `prompt_ids` from one prefill (no sampling).

        Limitation: `version=None` (base) cannot reach the base weights while a full
        checkpoint is served in their place; it then raises UnknownVersion (a
        BackendError) and a teacher needs `judge.teacher = "policy"`. A score overlapped
        by a weight swap raises too (SGLang would finish it on the new weights).
        """
        if not response_ids:
            return []
        if not prompt_ids:
            raise ValueError("scoring needs at least one prompt token")
        if len(prompt_ids) + len(response_ids) > self._context_length:
            raise BackendError("prompt + response exceed the model's context window")
        while not self._swap_idle.is_set():
            await self._swap_idle.wait()
        v = version or BASE_VERSION
        self._require_servable(v)
        swaps = self._swaps
        payload: dict[str, Any] = {
            "input_ids": [*prompt_ids, *response_ids],
            "sampling_params": {"max_new_tokens": 0},
            "rid": f"score-{uuid.uuid4().hex}",
            "return_logprob": True,
            "logprob_start_len": len(prompt_ids) - 1,
        }
        if v in self._loaded:
            payload["lora_path"] = v
        self._inflight[v] += 1
        try:
            reply = await self._request("POST", "/generate", payload, self._timeout.read)
        finally:
            self._inflight[v] -= 1
        if self._swaps != swaps:
            raise BackendError(f"the served weights changed while scoring on {v}; score again")
        return _response_logprobs(reply, response_ids)

    # -- versions --------------------------------------------------------------------
    async def load_adapter(self, version: str, path: Path) -> None:
        """Load a version under a name never used before (even after a failure).

        A full checkpoint (config.json, no adapter_config.json) is only checked and
        remembered; `activate` swaps its weights in. Anything else goes to
        `/load_lora_adapter` and applies to the weights served now: after a full update,
        over that checkpoint, not over the launch weights.
        """
        if version in self._used_names:
            raise BackendError(f"version name {version!r} is already used; never reuse one")
        self._used_names.add(version)
        if (path / "config.json").is_file() and not (path / "adapter_config.json").exists():
            if not any(path.glob("*.safetensors")):
                raise BackendError(f"full checkpoint {path} has a config.json but no *.safetensors")
            self._full[version] = path
            log.info("full checkpoint %s at %s: served in place once activated", version, path)
            return
        async with self._swap_lock:  # the adapter belongs to the weights served now
            if self._weights is None:
                raise BackendError(_UNKNOWN_WEIGHTS)
            body = {"lora_name": version, "lora_path": str(path)}
            await self._admin("/load_lora_adapter", body, self._admin_timeout_s)
            self._loaded[version] = path
            self._lora_base[version] = self._weights
        log.info("loaded adapter %s from %s", version, path)

    async def activate(self, version: str) -> None:
        """Route new requests to `version`; in-flight requests finish on their own version.

        Except for a full version (or `base` while a full checkpoint is served): its
        weights replace the served ones first, and requests in flight at that pause
        finish on the new weights under their old label (SGLang's retract mode).
        """
        async with self._swap_lock:
            full = version in self._full or version == BASE_VERSION
            if full and version != self._weights:
                await self._swap_weights(version)
            else:
                self._require_servable(version)
            self._active = version
        log.info("new requests now use %s", version)

    async def _swap_weights(self, version: str) -> None:
        """Serve `version`'s full weights (the launch weights for `base`) in place."""
        folder = str(self._full[version]) if version != BASE_VERSION else self._launch_model_path
        if not folder:
            raise BackendError("cannot reload the base weights: /model_info named no model_path")
        self._swap_idle.clear()  # new requests and scores wait for the new weights
        self._swaps += 1
        in_flight = sum(self._inflight.values())
        self.retracted_requests += in_flight
        failure: BaseException | None = None
        reported: str | None = None  # a failure SGLang reported although the swap took
        began = time.monotonic()
        try:
            await self._control("/pause_generation", {"mode": "retract"})
            body = {"model_path": folder, "weight_version": version, "flush_cache": True}
            try:
                await self._admin("/update_weights_from_disk", body, self._weight_update_timeout_s)
            except (_NoAnswer, asyncio.CancelledError):
                self._weights = None  # SGLang may still be loading them: nothing is known
                raise
            except BackendError as exc:  # answered "failed": the weights may be swapped anyway
                served = await self._served_weight_version()
                if served is None:
                    self._weights = None  # what SGLang serves cannot be read back
                if served != version:
                    raise
                reported = str(exc)
                log.warning("SGLang serves %s although the update reported: %s", version, exc)
            self._weights = self._active = version
            self.weight_updates += 1
        except BaseException as exc:
            failure = exc
            raise
        finally:
            try:
                await self._control("/continue_generation", {})
            except BackendError as exc:
                if failure is None:
                    failure = exc
                    raise
                raise BackendError(f"{failure}; then {exc}") from failure
            finally:
                self.last_weight_update_s = time.monotonic() - began
                self.last_weight_update_error = str(failure) if failure else reported
                self._swap_idle.set()
        stall, n = self.last_weight_update_s, in_flight
        log.info("serving %s from %s: stalled %.2f s, %d retracted", version, folder, stall, n)

    async def _served_weight_version(self) -> str | None:
        """The served `weight_version`, read back after a failed update (0.5.23 can swap the
        weights, then fail to flush its cache); None when it cannot be read."""
        try:
            info = await self._request("GET", "/model_info", None, self._admin_timeout_s)
            return str(info["weight_version"])
        except (BackendError, KeyError, TypeError) as exc:
            log.error("SGLang's served weights are unknown after a failed update: %s", exc)
            return None

    async def unload_adapter(self, version: str) -> None:
        """Stop admitting `version`, wait for its in-flight requests, then unload it.

        A full version that is not active is only forgotten. An unload that times out is
        logged, not raised: SGLang finishes it on its own (it has been reported to hang
        after n > 1 sampling, which we never send).
        """
        if version == BASE_VERSION:
            raise BackendError("the base version cannot be unloaded")
        if version not in self._loaded and version not in self._full:
            raise UnknownVersion(version)
        if version == self._active:
            raise BackendError(f"{version} is being served; activate another version first")
        if self._full.pop(version, None) is not None:
            log.info("forgot full checkpoint %s", version)
            return
        del self._loaded[version]  # no new admissions from here on
        self._lora_base.pop(version, None)
        while self._inflight[version] > 0:
            await asyncio.sleep(0.02)
        try:
            await self._admin(
                "/unload_lora_adapter", {"lora_name": version}, self._unload_timeout_s
            )
        except _AdminTimeout:
            log.warning(
                "SGLang did not confirm unloading %s within %g s; it stays loaded until it does",
                version,
                self._unload_timeout_s,
            )
            return
        except BackendError as exc:
            if "not loaded" not in str(exc):
                raise
            # SGLang evicted it (least recently used, past --max-loaded-loras): gone already
            self.adapters_evicted += 1
            log.warning("adapter %s was evicted by SGLang before its unload: %s", version, exc)
            return
        log.info("unloaded adapter %s", version)

    def _require_servable(self, version: str) -> None:
        """Raise unless a request for `version` would run on exactly its weights now."""
        if version in self._loaded:
            needs = self._lora_base[version]
        elif version in self._full or version == BASE_VERSION:
            needs = version
        else:
            raise UnknownVersion(version)
        if self._weights is None:
            raise BackendError(_UNKNOWN_WEIGHTS)
        if needs == self._weights:
            return
        if version == BASE_VERSION:
            raise UnknownVersion(
                f"the base weights are not served: the full checkpoint {self._weights} "
                'replaced them, so use judge.teacher = "policy" (or activate base again)'
            )
        if version in self._full:
            raise UnknownVersion(f"full checkpoint {version} is not served; activate it first")
        raise UnknownVersion(
            f"adapter {version} was loaded over {needs}, but SGLang serves {self._weights}"
            " now: its requests would run on other weights"
        )

    # -- HTTP ------------------------------------------------------------------------
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise BackendError("the SGLang backend is not started")
        return self._client

    async def _admin(self, route: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        reply = await self._request("POST", route, body, timeout_s)
        if not isinstance(reply, dict) or reply.get("success") is not True:
            raise BackendError(f"SGLang {route} failed: {_excerpt(json.dumps(reply))}")
        return reply

    async def _control(self, route: str, body: dict[str, Any]) -> None:
        """`/pause_generation` and `/continue_generation`: SGLang 0.5.23 answers them with
        `{"message": ..., "status": "ok"}` (no `success`); accept `success: true` too."""
        reply = await self._request("POST", route, body, self._admin_timeout_s)
        ok = isinstance(reply, dict) and reply.get("success", reply.get("status") == "ok")
        if ok is not True:
            raise BackendError(f"SGLang {route} failed: {_excerpt(json.dumps(reply))}")

    async def _request(
        self, method: str, route: str, body: dict[str, Any] | None, timeout_s: float | None
    ) -> Any:
        try:
            response = await self._http().request(method, route, json=body, timeout=timeout_s)
        except httpx.TimeoutException as exc:
            raise _AdminTimeout(f"SGLang {route} timed out after {timeout_s} s") from exc
        except httpx.TransportError as exc:
            raise _NoAnswer(f"SGLang {route} failed: {exc!r}") from exc
        _raise_for_status(route, response)
        if not response.content:
            return {}
        try:
            return response.json()
        except ValueError as exc:
            raise BackendError(
                f"SGLang {route} answered non-JSON: {_excerpt(response.text)}"
            ) from exc


_UNKNOWN_WEIGHTS = (
    "SGLang's served weights are unknown: a weight update got no answer (timeout or "
    "lost connection); activate a full version or base again"
)


class _NoAnswer(BackendError):
    """A call to SGLang got no answer: what it did with the call is unknown."""


class _AdminTimeout(_NoAnswer):
    """A call to SGLang got no answer within its client-side timeout."""
