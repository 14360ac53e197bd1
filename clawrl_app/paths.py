"""Where clawrl-app keeps its files.

platformdirs locations by default; `CLAWRL_HOME` puts everything under one folder (tests,
portable installs). Every directory is created with mode 0700 because it holds user data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "clawrl-app"


@dataclass(frozen=True)
class AppPaths:
    """The app's folders; `ensure()` creates them privately."""

    config_dir: Path
    data_dir: Path
    cache_dir: Path
    log_dir: Path

    @property
    def config_file(self) -> Path:
        """The user's TOML settings file."""
        return self.config_dir / "config.toml"

    @property
    def store_file(self) -> Path:
        """The SQLite store (sessions, turns, samples, judgments, checkpoints, ...)."""
        return self.data_dir / "clawrl.sqlite3"

    @property
    def checkpoints_dir(self) -> Path:
        """Adapters and full-weight checkpoints, one folder per version."""
        return self.data_dir / "checkpoints"

    @property
    def blobs_dir(self) -> Path:
        """Large arrays referenced from store rows."""
        return self.data_dir / "blobs"

    @property
    def models_dir(self) -> Path:
        """Converted models (e.g. the embedded GGUF turned into safetensors)."""
        return self.cache_dir / "models"

    @property
    def api_key_file(self) -> Path:
        """Fallback API key file (0600) when no keyring backend exists."""
        return self.config_dir / "api_key"

    def ensure(self) -> AppPaths:
        """Create every folder with owner-only permissions and return self."""
        for d in (self.config_dir, self.data_dir, self.cache_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o700)
        return self


def app_paths(home: str | os.PathLike[str] | None = None) -> AppPaths:
    """The app's folders: under `home` or `$CLAWRL_HOME` when set, else platformdirs."""
    root = home if home is not None else os.environ.get("CLAWRL_HOME")
    if root:
        base = Path(root).expanduser().resolve()
        return AppPaths(base / "config", base / "data", base / "cache", base / "logs")
    return AppPaths(
        Path(platformdirs.user_config_dir(APP_NAME)),
        Path(platformdirs.user_data_dir(APP_NAME)),
        Path(platformdirs.user_cache_dir(APP_NAME)),
        Path(platformdirs.user_log_dir(APP_NAME)),
    )


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically with mode 0600 (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
