"""The endpoint's API key: keyring when one exists, else a 0600 file; loopback detection."""

from __future__ import annotations

import stat
from pathlib import Path

import keyring.core
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail

from clawrl_app.api_key import SERVICE, USERNAME, get_api_key, is_loopback, keyring_backend
from clawrl_app.paths import AppPaths, app_paths


@pytest.fixture
def paths(tmp_path: Path) -> AppPaths:
    return app_paths(tmp_path / "home")


@pytest.fixture
def no_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the headless case (what this machine has anyway) whatever the host provides."""
    monkeypatch.setattr(keyring.core, "_keyring_backend", fail.Keyring())


class MemoryKeyring(KeyringBackend):
    """In-memory keyring backend.

    A fake: no real keyring backend (Secret Service, macOS Keychain) runs on a headless
    test machine.
    """

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.data.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.data[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.data.pop((service, username), None)


def test_no_backend_detected_with_fail_keyring(no_keyring: None) -> None:
    assert keyring_backend() is None


def test_file_fallback_is_private(paths: AppPaths, no_keyring: None) -> None:
    key = get_api_key(paths)
    assert key is not None
    assert key.value.startswith("sk-clawrl-")
    assert len(key.value) > len("sk-clawrl-") + 20
    assert key.stored_in == str(paths.api_key_file)
    assert paths.api_key_file.read_text() == key.value
    assert stat.S_IMODE(paths.api_key_file.stat().st_mode) == 0o600
    # no temp file left behind by the atomic write
    assert [p.name for p in paths.api_key_file.parent.iterdir()] == ["api_key"]


def test_key_is_stable_across_calls(paths: AppPaths, no_keyring: None) -> None:
    first = get_api_key(paths)
    second = get_api_key(paths)
    third = get_api_key(paths, create=False)
    assert first is not None and second is not None and third is not None
    assert first.value == second.value == third.value


def test_each_home_gets_its_own_random_key(tmp_path: Path, no_keyring: None) -> None:
    a = get_api_key(app_paths(tmp_path / "a"))
    b = get_api_key(app_paths(tmp_path / "b"))
    assert a is not None and b is not None
    assert a.value != b.value


def test_create_false_returns_none_and_writes_nothing(paths: AppPaths, no_keyring: None) -> None:
    assert get_api_key(paths, create=False) is None
    assert not paths.api_key_file.exists()


def test_existing_file_is_read_stripped(paths: AppPaths) -> None:
    paths.api_key_file.parent.mkdir(parents=True)
    paths.api_key_file.write_text("sk-clawrl-handmade\n")
    key = get_api_key(paths, use_keyring=False)
    assert key is not None
    assert key.value == "sk-clawrl-handmade"


def test_use_keyring_false_ignores_a_keyring(
    paths: AppPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    ring = MemoryKeyring()
    monkeypatch.setattr(keyring.core, "_keyring_backend", ring)
    key = get_api_key(paths, use_keyring=False)
    assert key is not None
    assert key.stored_in == str(paths.api_key_file)
    assert ring.data == {}


def test_keyring_backend_is_preferred_when_present(
    paths: AppPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    ring = MemoryKeyring()
    monkeypatch.setattr(keyring.core, "_keyring_backend", ring)
    backend = keyring_backend()
    assert backend is not None and backend.endswith("MemoryKeyring")
    key = get_api_key(paths)
    assert key is not None
    assert key.stored_in == f"keyring:{backend}"
    assert ring.data == {(SERVICE, USERNAME): key.value}
    assert not paths.api_key_file.exists()
    again = get_api_key(paths, create=False)
    assert again == key


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "192.168.1.10", "10.0.0.1", "example.com", "128.0.0.1"]
)
def test_non_loopback_hosts(host: str) -> None:
    assert not is_loopback(host)


def test_hostname_starting_with_127_is_not_loopback() -> None:
    assert not is_loopback("127.example.com")
