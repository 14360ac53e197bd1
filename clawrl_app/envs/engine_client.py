"""Talking to a running engine's admin routes from env rollouts (`httpx`)."""

from __future__ import annotations

from typing import Any


class EngineClientError(RuntimeError):
    """The engine refused a request or could not be reached; the message says what to do."""


class EngineClient:
    """`base` is the engine's root URL (`http://127.0.0.1:8000`); `api_key` when one is set."""

    def __init__(self, base: str, api_key: str | None = None, timeout_s: float = 60.0) -> None:
        import httpx

        self.base = base.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout_s)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        import httpx

        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise EngineClientError(
                f"cannot reach the engine at {self.base} ({exc}); is `clawrl-app serve` running?"
            ) from exc
        if r.status_code >= 400:
            try:
                msg = r.json()["error"]["message"]
            except Exception:
                msg = r.text[:300]
            raise EngineClientError(f"{method} {path}: {r.status_code} {msg}")
        return r.json()

    def ready(self) -> bool:
        import httpx

        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def record_group(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self._call("POST", "/admin/env/episodes", json=payload)["data"]
        return out

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = self._call("GET", "/admin/status")
        return out

    def checkpoints(self) -> dict[str, Any]:
        out: dict[str, Any] = self._call("GET", "/admin/checkpoints")
        return out

    def rollback(self, version: str) -> dict[str, Any]:
        """Serve `version` ("base" or "vN"); the trainer goes on from it."""
        out: dict[str, Any] = self._call("POST", "/admin/rollback", json={"version": version})
        return out

    def close(self) -> None:
        self._http.close()
