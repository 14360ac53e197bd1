"""A stand-in for SGLang 0.5.23's HTTP server: its routes and payload shapes, fake tokens.

SGLang needs a GPU, so the contract tests run against this. It answers the routes the
SGLang backend uses, with the shapes read from SGLang's source (`entrypoints/
http_server.py`, `managers/tokenizer_manager.py`, `managers/io_struct.py`,
`sampling/sampling_params.py`), and is stricter than SGLang where that catches our
mistakes (unknown top-level keys are a 400 here; SGLang ignores them).

Publishing full weights: `/pause_generation` (modes abort / retract / in_place) stops
generation: running streams stop producing tokens (abort mode finishes them with
`abort`), new `/generate` requests wait until `/continue_generation` (SGLang's
`is_pause_cond` in `TokenizerManager.generate_request`), and `/health*` answer 503 while
`/ping` stays 200. Both reply `{"message": ..., "status": "ok"}` with no `success` field,
as SGLang does. `/update_weights_from_disk` answers `{"success", "message",
"num_paused_requests"}` (400 on failure) and, on success, serves the checkpoint: the
"model" then salts its tokens with the checkpoint path, retracted streams resume on those
weights, and `/model_info` names the path as SGLang's rename does.

The "model" is deterministic: the next token is a hash of the last ids and the adapter
name, and its log-prob a function of the context, so scoring an answer gives back
exactly the log-probs it was generated with. Importable (`create_app`, `StandinState`,
`StandinThread`) and runnable (`python tests/sglang_standin.py --port P ...`, accepting
the flags of `python -m sglang.launch_server` that the backend passes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

VOCAB_SIZE = 1000
OPEN_ROUTES = {"/health", "/health_generate", "/ping", "/ready", "/metrics"}
# SamplingParams' API fields in SGLang 0.5.23 (sampling/sampling_params.py).
SAMPLING_KEYS = {
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens",
    "n", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "custom_params", "stream_interval",
    "logit_bias", "sampling_seed",
}  # fmt: skip
# The GenerateReqInput fields the backend may send (io_struct.py has many more).
GENERATE_KEYS = {
    "text", "input_ids", "sampling_params", "rid", "return_logprob", "logprob_start_len",
    "top_logprobs_num", "token_ids_logprob", "return_text_in_logprobs", "stream", "lora_path",
}  # fmt: skip


# UpdateWeightFromDiskReqInput's fields (io_struct.py as read; BaseReq adds rid). The
# backend sends only model_path, weight_version and flush_cache.
UPDATE_FROM_DISK_KEYS = {
    "rid", "model_path", "load_format", "abort_all_requests", "weight_version", "is_async",
    "torch_empty_cache", "keep_pause", "recapture_cuda_graph", "token_step", "flush_cache",
    "manifest",
}  # fmt: skip
PAUSE_MODES = ("abort", "retract", "in_place")


def adapter_salt(adapter: str | None, weights: str | None = None) -> int:
    """The adapter's (and the full checkpoint's, once one is served) effect on the model."""
    salt = sum(ord(c) for c in adapter) if adapter else 0
    return salt + (3 * sum(ord(c) for c in weights) if weights else 0)


def next_token(ids: list[int], adapter: str | None = None, weights: str | None = None) -> int:
    """The stand-in model's (greedy) next token after `ids`; `weights` = checkpoint path."""
    tail = ids[-4:]
    h = sum((i + 1) * 7919 * t for i, t in enumerate(tail)) + 31 * len(ids)
    return (h + adapter_salt(adapter, weights)) % VOCAB_SIZE


def token_logprob(
    context: list[int], token: int, adapter: str | None = None, weights: str | None = None
) -> float:
    """The stand-in model's log-prob of `token` after `context`."""
    h = sum(context[-3:]) * 13 + token * 7 + len(context) + adapter_salt(adapter, weights)
    return -0.05 - (h % 97) / 20.0


def top_candidates(
    context: list[int], token: int, k: int, adapter: str | None, weights: str | None = None
) -> list[list[Any]]:
    """`k` `[logprob, id, null]` alternatives, the sampled token first."""
    first = token_logprob(context, token, adapter, weights)
    return [[first - 0.5 * j, (token + j) % VOCAB_SIZE, None] for j in range(k)]


@dataclass
class StandinState:
    """What the stand-in serves and what it received (tests read and tweak it)."""

    api_key: str | None = None
    model_path: str = "standin/model"
    served_name: str = "standin"
    ready_at: float = 0.0
    """`/health_generate` answers 503 before this time.monotonic() value."""
    token_delay_s: float = 0.0
    tokens_per_chunk: int = 1
    """Tokens per event: > 1 mimics SGLang coalescing cumulative chunks for a slow reader."""
    incremental: bool = False
    """Mimic `--incremental-streaming-output` (deltas instead of cumulative events)."""
    overloaded: bool = False
    unload_delay_s: float = 0.0
    adapters: dict[str, str] = field(default_factory=dict)
    received: list[tuple[str, Any]] = field(default_factory=list)
    auth_headers: list[tuple[str, str | None]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    running: dict[str, str | None] = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)
    paused: bool = False
    update_delay_s: float = 0.0
    update_failure: str | None = None
    """When set, `/update_weights_from_disk` fails with this message (weights unchanged)."""
    flush_failure: str | None = None
    """When set, `/update_weights_from_disk` swaps the weights (and their version) and then
    fails with this message, as SGLang 0.5.23 does when its cache flush fails after a load."""
    weights: str | None = None
    """The checkpoint served in place of the launch weights (None = launch weights)."""
    weight_version: str = "default"
    deterministic: bool = False
    """Launched with --enable-deterministic-inference: only then does SGLang use a request's
    `sampling_seed`; without it the seed is silently ignored (recorded in `ignored_seeds`)."""
    ignored_seeds: list[int] = field(default_factory=list)
    model_info_fails: bool = False
    """When set, `GET /model_info` answers 500 (what SGLang serves cannot be read back)."""
    loop_period: int = 0
    """> 0: the model is stuck in a loop, repeating its first `loop_period` tokens forever."""
    max_loaded_loras: int | None = None
    """`--max-loaded-loras`: loading past it evicts the least recently used adapter, which
    the next request naming it reloads from its folder (an error once the folder is gone);
    unloading an evicted adapter answers "not loaded", as SGLang 0.5.23 does."""
    evicted: dict[str, str] = field(default_factory=dict)
    """Adapters evicted and not reloaded yet: name -> folder."""
    evictions: list[str] = field(default_factory=list)
    reloads: list[str] = field(default_factory=list)
    lora_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """SGLang serialises load and unload under one lock: a load waits behind an unload that
    waits for its adapter's requests."""

    def use(self, name: str) -> None:
        """`name` was just used: the most recently used adapter (dict order is the LRU)."""
        self.adapters[name] = self.adapters.pop(name)

    def make_room(self) -> None:
        """Evict least recently used adapters (none running) until one more fits."""
        if self.max_loaded_loras is None:
            return
        for name in list(self.adapters):
            if len(self.adapters) < self.max_loaded_loras:
                return
            if name not in self.running.values():
                self.evicted[name] = self.adapters.pop(name)
                self.evictions.append(name)

    def reset(self) -> None:
        """Forget adapters, recordings and knobs; keep the key and the model's names."""
        fresh = StandinState(self.api_key, self.model_path, self.served_name)
        self.__dict__.update(fresh.__dict__)

    def bodies(self, route: str) -> list[Any]:
        """The JSON bodies received on `route`, oldest first."""
        return [body for r, body in self.received if r == route]


def create_app(state: StandinState) -> FastAPI:
    """The stand-in's FastAPI app over `state`."""
    app = FastAPI()

    @app.middleware("http")
    async def check_key(request: Request, call_next: Any) -> Response:
        path = request.url.path
        if path not in OPEN_ROUTES:
            header = request.headers.get("authorization")
            state.auth_headers.append((path, header))
            if state.api_key and header != f"Bearer {state.api_key}":
                return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return await call_next(request)

    async def read_body(request: Request, route: str) -> Any:
        raw = await request.body()
        body = json.loads(raw) if raw else {}
        state.received.append((route, body))
        return body

    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> Response:
        healthy = time.monotonic() >= state.ready_at and not state.paused
        return Response(status_code=200 if healthy else 503)

    @app.get("/ping")
    async def ping() -> Response:
        return Response(status_code=200)

    @app.get("/model_info")
    async def model_info() -> dict[str, Any]:
        if state.model_info_fails:
            return _error("model_info is unavailable", 500)  # type: ignore[return-value]
        return {
            "model_path": state.weights or state.model_path,  # SGLang renames on update
            "tokenizer_path": state.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": state.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
        }

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        body = await read_body(request, "/generate")
        problem = _validate_generate(body)
        if problem:
            return _error(problem, 400)
        while state.paused:  # SGLang holds new requests until continue_generation
            await asyncio.sleep(0.005)
        if state.overloaded:
            return _error("The server is overloaded; the request queue is full.", 503)
        seed = (body.get("sampling_params") or {}).get("sampling_seed")
        if seed is not None and not state.deterministic:
            state.ignored_seeds.append(seed)
        adapter = body.get("lora_path")
        if adapter in state.evicted and os.path.exists(state.evicted[adapter]):
            state.make_room()  # a request naming an evicted adapter reloads it from disk
            state.adapters[adapter] = state.evicted.pop(adapter)
            state.reloads.append(adapter)
        elif adapter in state.adapters:
            state.use(adapter)
        missing = adapter is not None and adapter not in state.adapters
        message = f"The following requested LoRA adapters are not loaded: {adapter}"
        if not body.get("stream"):
            return _error(message, 400) if missing else JSONResponse(_run_to_end(state, body))
        if missing:
            return StreamingResponse(_error_events(message), media_type="text/event-stream")
        return StreamingResponse(_stream(state, body), media_type="text/event-stream")

    @app.post("/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> JSONResponse:
        body = await read_body(request, "/load_lora_adapter")
        name, path = body.get("lora_name"), body.get("lora_path")
        if set(body) - {"lora_name", "lora_path", "pinned"} or not name or not path:
            return _lora_reply(False, f"invalid load_lora_adapter body: {body}")
        async with state.lora_lock:
            if name in state.adapters:
                return _lora_reply(False, f"LoRA adapter {name} is already loaded")
            if not os.path.exists(path):
                return _lora_reply(False, f"LoRA path {path} does not exist")
            state.make_room()
            state.evicted.pop(name, None)
            state.adapters[name] = path
            return _lora_reply(True, None, state.adapters)

    @app.post("/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> JSONResponse:
        body = await read_body(request, "/unload_lora_adapter")
        name = body.get("lora_name")
        async with state.lora_lock:
            if set(body) != {"lora_name"} or name not in state.adapters:
                state.evicted.pop(name, None)  # an evicted one is not loaded: the same answer
                return _lora_reply(False, f"LoRA adapter {name} is not loaded")
            while name in state.running.values():  # SGLang waits for the adapter's requests
                await asyncio.sleep(0.01)
            await asyncio.sleep(state.unload_delay_s)
            del state.adapters[name]
            return _lora_reply(True, None, state.adapters)

    @app.post("/pause_generation")
    async def pause_generation(request: Request) -> JSONResponse:
        body = await read_body(request, "/pause_generation")
        mode = body.get("mode", "abort") if isinstance(body, dict) else None
        if not isinstance(body, dict) or set(body) - {"mode"} or mode not in PAUSE_MODES:
            return _error(f"invalid pause_generation body: {body}", 400)
        state.paused = True
        if mode == "abort":
            state.aborted.extend(state.running)
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    @app.post("/continue_generation")
    async def continue_generation(request: Request) -> JSONResponse:
        body = await read_body(request, "/continue_generation")
        if not isinstance(body, dict) or set(body) - {"torch_empty_cache"}:
            return _error(f"invalid continue_generation body: {body}", 400)
        state.paused = False
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> JSONResponse:
        body = await read_body(request, "/update_weights_from_disk")
        path = body.get("model_path") if isinstance(body, dict) else None
        if not isinstance(path, str) or set(body) - UPDATE_FROM_DISK_KEYS:
            return _error(f"invalid update_weights_from_disk body: {body}", 400)
        await asyncio.sleep(state.update_delay_s)
        launch = path == state.model_path  # the stand-in "has" its launch model
        if state.update_failure or not (launch or os.path.isfile(f"{path}/config.json")):
            message = state.update_failure or f"Failed to get weights iterator: {path} not found."
            reply = {"success": False, "message": message, "num_paused_requests": 0}
            return JSONResponse(reply, status_code=400)
        state.weights = None if launch else path
        message = "Succeeded to update model weights."
        if body.get("weight_version") is not None:
            state.weight_version = body["weight_version"]
            message += f" Weight version updated to {state.weight_version}."
        if state.flush_failure:  # loaded, then the flush failed: reported as a failure
            reply = {"success": False, "message": state.flush_failure, "num_paused_requests": 0}
            return JSONResponse(reply, status_code=400)
        return JSONResponse({"success": True, "message": message, "num_paused_requests": 0})

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        body = await read_body(request, "/abort_request")
        if body.get("abort_all"):
            state.aborted.extend(state.running)
        elif body.get("rid"):
            state.aborted.append(body["rid"])
        return Response(status_code=200)

    return app


def _validate_generate(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    unknown = set(body) - GENERATE_KEYS
    if unknown:
        return f"unknown /generate fields: {sorted(unknown)}"
    if not isinstance(body.get("input_ids"), list) or not body["input_ids"]:
        return "the stand-in needs input_ids (a non-empty list of token ids)"
    sampling = body.get("sampling_params") or {}
    unknown = set(sampling) - SAMPLING_KEYS
    if unknown:
        return (
            f"SamplingParams.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}"
        )
    if int(sampling.get("max_new_tokens", 128)) < 0:
        return "max_new_tokens must be at least 0"
    schema = sampling.get("json_schema")
    if schema is not None and not _is_json_object_text(schema):
        return "json_schema must be a JSON schema serialized as a string"  # SGLang: str
    return None


def _is_json_object_text(value: Any) -> bool:
    try:
        return isinstance(value, str) and isinstance(json.loads(value), dict)
    except ValueError:
        return False


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status)


def _lora_reply(
    success: bool, error: str | None, adapters: dict[str, str] | None = None
) -> JSONResponse:
    body = {"success": success, "error_message": error, "loaded_adapters": adapters}
    return JSONResponse(body, status_code=200 if success else 400)


async def _error_events(message: str) -> AsyncIterator[bytes]:
    yield b"data: " + json.dumps({"error": {"message": message}}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


class _Generation:
    """One request's progress: SGLang's ReqState in miniature."""

    def __init__(self, state: StandinState, body: dict[str, Any]) -> None:
        self.state = state
        self.rid = body.get("rid") or f"standin-{time.monotonic_ns()}"
        self.input_ids = [int(t) for t in body["input_ids"]]
        sampling = body.get("sampling_params") or {}
        self.max_new = int(sampling.get("max_new_tokens", 128))
        self.stop_ids = set(sampling.get("stop_token_ids") or ())
        self.adapter = body.get("lora_path")
        self.logprob = bool(body.get("return_logprob"))
        self.top_k = int(body.get("top_logprobs_num") or 0)
        self.start = body.get("logprob_start_len")
        self.out: list[int] = []
        self.entries: list[list[Any]] = []
        self.tops: list[list[list[Any]]] = []
        self.finish: dict[str, Any] | None = None
        if self.max_new == 0:
            self.finish = {"type": "length", "length": 0}

    def step(self) -> None:
        context, weights = self.input_ids + self.out, self.state.weights
        period = self.state.loop_period
        if period and len(self.out) >= period:
            token = self.out[len(self.out) - period]  # a degenerate loop
        else:
            token = next_token(context, self.adapter, weights)
        self.out.append(token)
        self.entries.append([token_logprob(context, token, self.adapter, weights), token, None])
        self.tops.append(top_candidates(context, token, self.top_k, self.adapter, weights))
        if token in self.stop_ids:
            self.finish = {"type": "stop", "matched": token}
        elif len(self.out) >= self.max_new:
            self.finish = {"type": "length", "length": self.max_new}

    def input_logprobs(self) -> list[list[Any]]:
        """Entries from logprob_start_len on; the first has no log-prob, as in SGLang."""
        ids = self.input_ids
        start = len(ids) - 1 if self.start is None or self.start < 0 else self.start
        entries: list[list[Any]] = [[None, ids[start], None]]
        for p in range(start + 1, len(ids)):
            lp = token_logprob(ids[:p], ids[p], self.adapter, self.state.weights)
            entries.append([lp, ids[p], None])
        return entries

    def event(self, since: int = 0) -> dict[str, Any]:
        """The output so far (cumulative) or past `since` (incremental)."""
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": self.finish,
            "prompt_tokens": len(self.input_ids),
            "weight_version": self.state.weight_version,
            "completion_tokens": len(self.out),
            "cached_tokens": 0,
        }
        if self.logprob:
            meta["input_token_logprobs"] = self.input_logprobs()
            meta["output_token_logprobs"] = self.entries[since:]
            meta["output_token_logprobs_length"] = len(self.entries)
            if self.top_k:
                meta["output_top_logprobs"] = self.tops[since:]
        out = self.out[since:]
        return {"text": "".join(f" t{t}" for t in out), "output_ids": out, "meta_info": meta}


def _run_to_end(state: StandinState, body: dict[str, Any]) -> dict[str, Any]:
    gen = _Generation(state, body)
    while gen.finish is None:
        gen.step()
    return gen.event()


async def _stream(state: StandinState, body: dict[str, Any]) -> AsyncIterator[bytes]:
    gen = _Generation(state, body)
    state.running[gen.rid] = gen.adapter
    sent = 0
    try:
        while True:
            while state.paused and gen.rid not in state.aborted:  # retracted: resumes later
                await asyncio.sleep(0.005)
            if gen.rid in state.aborted and gen.finish is None:
                gen.finish = {"type": "abort", "message": "Abort in running batch."}
            for _ in range(state.tokens_per_chunk):
                if gen.finish is not None:
                    break
                gen.step()
            state.produced[gen.rid] = len(gen.out)
            event = gen.event(sent if state.incremental else 0)
            sent = len(gen.out)
            yield b"data: " + json.dumps(event).encode() + b"\n\n"
            if gen.finish is not None:
                break
            await asyncio.sleep(state.token_delay_s)
        yield b"data: [DONE]\n\n"
    finally:
        state.running.pop(gen.rid, None)


class StandinThread:
    """The stand-in in a real uvicorn server on a free loopback port, in a daemon thread."""

    def __init__(self, state: StandinState) -> None:
        self.state = state
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(state), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, args=([self._sock],), daemon=True)

    def start(self) -> StandinThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the SGLang stand-in did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(5)
        self._sock.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags of `python -m sglang.launch_server` that the backend passes, in full."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--model-path", required=True)
    p.add_argument("--served-model-name", default="standin")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--api-key")
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--nccl-port", type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--context-length", type=int)
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--enable-lora", action="store_true")
    p.add_argument("--max-lora-rank", type=int)
    p.add_argument("--lora-target-modules", nargs="+")
    p.add_argument("--max-loras-per-batch", type=int)
    p.add_argument("--max-loaded-loras", type=int)
    p.add_argument("--tool-call-parser")
    p.add_argument("--enable-memory-saver", action="store_true")
    p.add_argument("--enable-weights-cpu-backup", action="store_true")
    p.add_argument("--enable-deterministic-inference", action="store_true")
    p.add_argument("--startup-delay", type=float, default=0.0, help="stand-in only")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"stand-in SGLang loading {args.model_path} (tp {args.tp_size})", flush=True)
    state = StandinState(
        api_key=args.api_key,
        model_path=args.model_path,
        served_name=args.served_model_name,
        ready_at=time.monotonic() + args.startup_delay,
        deterministic=args.enable_deterministic_inference,
        max_loaded_loras=args.max_loaded_loras,
    )
    uvicorn.run(create_app(state), host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
