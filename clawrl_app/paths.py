"""Where clawrl-app keeps its files.

platformdirs locations by default; `CLAWRL_HOME` puts everything under one folder (tests,
portable installs). Every directory is created with mode 0700 because it holds user data:
the `CLAWRL_HOME` folder itself, the app's folders, the `clawrl-app` folders platformdirs
names, and any missing parent created on the way (as the XDG base directory spec asks).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "clawrl-app"


class AppPathsError(OSError):
    """A folder of the app cannot be created or made private; the message says what to do."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents with mode 0700 (whatever the umask) and take
    group and other permissions off `path` if it existed; returns `path`. An existing folder
    keeps its owner bits: one the user made read-only (0500) stays read-only."""
    missing = []
    for d in [path, *path.parents]:
        if d.exists():
            break
        missing.append(d)
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            d.mkdir(mode=0o700)
        os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        os.chmod(path, mode & 0o700)
    return path


@dataclass(frozen=True)
class AppPaths:
    """The app's folders; `ensure()` creates them privately."""

    config_dir: Path
    data_dir: Path
    cache_dir: Path
    log_dir: Path
    root: Path | None = None
    """The `CLAWRL_HOME` folder that holds the four others (None with platformdirs)."""

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

    def private_folders(self) -> list[Path]:
        """The folders `ensure()` keeps owner-only: the root, the app's folders and the
        `clawrl-app` folders above them (platformdirs' log dir is `.../clawrl-app/log`)."""
        folders = [self.root] if self.root is not None else []
        for d in (self.config_dir, self.data_dir, self.cache_dir, self.log_dir):
            folders += [p for p in reversed(d.parents) if p.name == APP_NAME] + [d]
        return list(dict.fromkeys(folders))

    def ensure(self) -> AppPaths:
        """Create every folder with owner-only permissions and return self."""
        for d in self.private_folders():
            try:
                private_dir(d)
            except OSError as e:
                raise AppPathsError(
                    f"cannot create or protect the folder {d}: {e.strerror or e}. Make it (and "
                    "its parent) writable by you, or point CLAWRL_HOME at a writable folder."
                ) from e
        return self


def app_paths(home: str | os.PathLike[str] | None = None) -> AppPaths:
    """The app's folders: under `home` or `$CLAWRL_HOME` when set, else platformdirs."""
    root = home if home is not None else os.environ.get("CLAWRL_HOME")
    if root:
        base = Path(root).expanduser().resolve()
        return AppPaths(base / "config", base / "data", base / "cache", base / "logs", base)
    return AppPaths(
        Path(platformdirs.user_config_dir(APP_NAME)),
        Path(platformdirs.user_data_dir(APP_NAME)),
        Path(platformdirs.user_cache_dir(APP_NAME)),
        Path(platformdirs.user_log_dir(APP_NAME)),
    )


def private_tree(root: Path) -> None:
    """Make every folder under `root` (itself included) 0700 and every file 0600.

    Symbolic links are left alone: `chmod` would change the file they point to.
    """
    for p in [root, *root.rglob("*")]:
        if p.is_symlink():
            continue
        want = 0o700 if p.is_dir() else 0o600
        if p.stat().st_mode & 0o777 != want:
            os.chmod(p, want)


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


def asset_path(name: str) -> Path:
    """A file shipped in `assets/`: inside the installed package (the wheel puts it at
    `clawrl_app/assets/`), or in the source tree's `assets/` beside the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "assets" / name, here.parent / "assets" / name):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"assets/{name} is missing from this install: reinstall clawrl-app")
