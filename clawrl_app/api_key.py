"""The endpoint's API key: in the system keyring, or a 0600 file when there is none.

Headless Linux and CI have no keyring backend (`NoKeyringError`), hence the fallback.
"""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass

from clawrl_app.paths import AppPaths, write_private

SERVICE = "clawrl-app"
USERNAME = "api-key"


@dataclass(frozen=True)
class ApiKey:
    """The key and where it is kept (`keyring:<backend>` or the file path)."""

    value: str
    stored_in: str


def keyring_backend() -> str | None:
    """Name of a usable keyring backend, or None (then the 0600 file is used)."""
    try:
        import keyring
        from keyring.backends.fail import Keyring as FailKeyring

        backend = keyring.get_keyring()
        if isinstance(backend, FailKeyring) or "fail" in type(backend).__module__:
            return None
        if "chainer" in type(backend).__module__ and not getattr(backend, "backends", None):
            return None
        return f"{type(backend).__module__}.{type(backend).__name__}"
    except Exception:
        return None


def _from_keyring() -> str | None:
    try:
        import keyring

        return keyring.get_password(SERVICE, USERNAME)
    except Exception:
        return None


def _to_keyring(value: str) -> bool:
    try:
        import keyring

        keyring.set_password(SERVICE, USERNAME, value)
        return True
    except Exception:
        return False


def get_api_key(paths: AppPaths, *, create: bool = True, use_keyring: bool = True) -> ApiKey | None:
    """The stored key; creates one (keyring, else 0600 file) when missing and `create`."""
    backend = keyring_backend() if use_keyring else None
    if backend:
        found = _from_keyring()
        if found:
            return ApiKey(found, f"keyring:{backend}")
    if paths.api_key_file.exists():
        return ApiKey(paths.api_key_file.read_text().strip(), str(paths.api_key_file))
    if not create:
        return None
    value = f"sk-clawrl-{secrets.token_urlsafe(24)}"
    if backend and _to_keyring(value):
        return ApiKey(value, f"keyring:{backend}")
    write_private(paths.api_key_file, value.encode())
    return ApiKey(value, str(paths.api_key_file))


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost (host names other than localhost are not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
