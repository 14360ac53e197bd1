"""Browser-attack protection for every route: Host, Origin, JSON bodies and CORS.

The endpoint is the user's personal model: whatever reaches it is recorded and trained on,
and `/admin/rollback` changes what is served. Any web page the user opens can send requests
to 127.0.0.1; this middleware refuses them before a route runs:

- DNS rebinding (evil.example re-resolved to 127.0.0.1) arrives with `Host: evil.example`.
  Only names the server answers to pass: localhost, the bind address, `server.allowed_hosts`.
  IP literals always pass, because rebinding needs a name that DNS resolves.
- Cross-origin requests carry `Origin` (browsers add it to every cross-origin POST, also
  the "simple" text/plain ones sent without a preflight): only `server.allowed_origins` pass.
- Cross-site GETs from `<img>`/`<script>` carry no Origin but `Sec-Fetch-Site: cross-site`.
- A body must be declared `application/json`: a page cannot send that cross-origin
  without a preflight, which only allowed origins pass.

Allowed origins get CORS: a 204 answer to the preflight and `Access-Control-Allow-Origin` on
every response. Clients outside a browser (OpenAI SDKs, OpenClaw, curl, our TUI and CLI)
send no Origin, a loopback Host and JSON, and pass untouched. Pure ASGI (no body
buffering), so streamed answers flow through as they are produced.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, Response

from clawrl_app.engine.chat.openai_schema import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CORS_METHODS = "GET, POST, OPTIONS"
CORS_HEADERS = (
    "Authorization",
    "Content-Type",
    "X-Session-Id",
    "X-Turn-Type",
    "X-Session-Done",
    "X-Session-Source",
    "X-Session-Incognito",
)
PREFLIGHT_MAX_AGE_S = "600"


def host_name(value: str) -> str:
    """The name part of a Host header or setting: port dropped, `[::1]` -> `::1`, lower case."""
    value = value.strip().lower()
    if value.startswith("["):  # [v6]:port
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:  # name:port (a bare v6 address has several colons)
        value = value.partition(":")[0]
    return value.rstrip(".")  # "localhost." is the same name as "localhost"


def is_ip_literal(name: str) -> bool:
    """True for an IPv4/IPv6 address (what DNS rebinding cannot produce)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def origin_key(value: str) -> str:
    """An origin as browsers send it: lower case, no trailing slash."""
    return value.strip().lower().rstrip("/")


def is_json(content_type: str | None) -> bool:
    """`application/json`, parameters such as `; charset=utf-8` allowed."""
    if content_type is None:
        return False
    return content_type.partition(";")[0].strip().lower() == "application/json"


@dataclass(frozen=True)
class GuardPolicy:
    """Which Host names and browser origins may reach the endpoint."""

    hosts: frozenset[str]
    """Accepted Host names (normalized); "*" accepts any."""
    origins: frozenset[str]
    """Accepted Origin values (normalized); empty = no browser page may call."""

    @classmethod
    def build(
        cls, bind_host: str, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()
    ) -> GuardPolicy:
        """Loopback names + the bind address (unless a wildcard) + the configured extras."""
        hosts = set(LOOPBACK_NAMES) | {host_name(h) for h in allowed_hosts}
        bound = host_name(bind_host)
        if bound not in WILDCARD_BINDS:  # a wildcard bind has no name of its own
            hosts.add(bound)
        return cls(frozenset(hosts), frozenset(origin_key(o) for o in allowed_origins))

    def host_allowed(self, host_header: str) -> bool:
        name = host_name(host_header)
        return "*" in self.hosts or name in self.hosts or is_ip_literal(name)

    def origin_allowed(self, origin: str) -> bool:
        return origin_key(origin) in self.origins

    def refusal(self, method: str, headers: Headers) -> ApiError | None:
        """Why this request may not proceed, or None. Preflights are answered elsewhere."""
        host = headers.get("host")
        # A request without Host is HTTP/1.0 from a non-browser client: browsers always send it.
        if host is not None and not self.host_allowed(host):
            return ApiError(
                403,
                f"Host {host!r} is not a name this server answers to (DNS-rebinding protection). "
                "Use http://127.0.0.1:PORT, or add the name to server.allowed_hosts "
                '(config.toml [server] allowed_hosts = ["name"], or '
                "CLAWRL_SERVER__ALLOWED_HOSTS=name).",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin):
            return ApiError(
                403,
                f"Requests from the web page {origin!r} are refused: a browser page may only "
                "call this endpoint when its origin is listed in server.allowed_origins "
                '(config.toml [server] allowed_origins = ["http://localhost:5173"], or '
                "CLAWRL_SERVER__ALLOWED_ORIGINS=http://localhost:5173).",
                code="origin_not_allowed",
            )
        if origin is None and headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return ApiError(
                403,
                "Cross-site browser requests are refused (another web page made this request).",
                code="cross_site_request",
            )
        if method in BODY_METHODS and not is_json(headers.get("content-type")):
            return ApiError(
                415,
                f"Content-Type must be application/json, not {headers.get('content-type')!r}.",
                code="unsupported_media_type",
            )
        return None


class WebGuard:
    """ASGI middleware applying a GuardPolicy to every HTTP request."""

    def __init__(self, app: Asgi, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        cors_origin = origin if origin is not None and self.policy.origin_allowed(origin) else None
        send = _with_cors(send, cors_origin) if cors_origin is not None else send
        refusal = self.policy.refusal(scope["method"], headers)
        if refusal is not None:
            response: Response = JSONResponse(
                refusal.body(), status_code=refusal.status, headers=refusal.headers
            )
            await response(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and cors_origin is not None:
            await _preflight(headers)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _preflight(headers: Headers) -> Response:
    """204 for a preflight from an allowed origin (the Origin header is added by `_with_cors`)."""
    allow = list(CORS_HEADERS)
    known = {h.lower() for h in allow}
    # The origin is trusted, so headers its SDK adds (x-stainless-*) are allowed as well.
    for name in headers.get("access-control-request-headers", "").split(","):
        if name.strip() and name.strip().lower() not in known:
            allow.append(name.strip())
            known.add(name.strip().lower())
    out = {
        "Access-Control-Allow-Methods": CORS_METHODS,
        "Access-Control-Allow-Headers": ", ".join(allow),
        "Access-Control-Max-Age": PREFLIGHT_MAX_AGE_S,
    }
    if headers.get("access-control-request-private-network") == "true":
        out["Access-Control-Allow-Private-Network"] = "true"  # Chrome's check for loopback
    return Response(status_code=204, headers=out)


def _with_cors(send: Send, origin: str) -> Send:
    """`send` that stamps Access-Control-Allow-Origin on the response start."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            out = MutableHeaders(scope=message)
            out["Access-Control-Allow-Origin"] = origin
            out.add_vary_header("Origin")
        await send(message)

    return wrapped
