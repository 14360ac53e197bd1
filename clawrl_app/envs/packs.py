"""Task packs: the shipped ones, and the user's own under `<data>/envs/packs/<name>/`.

A pack is a folder with a `pack.toml` (`name`, `env`, `version`, `description`) and:
- for `terminal`: one folder per task with `task.toml` (`id`, `family`, `instruction`,
  `max_steps`, `split` = "train" | "heldout", `[verifier] timeout_s`), `files/` (copied
  into the workspace), `tests/test_*.py` (run by pytest after the episode, never visible
  during it) and `solution.sh` (the oracle);
- for `toolcall`: a `tasks.jsonl` (one task per line: `id`, `family`, `prompt`, `answer`,
  `answer_type` = integer | decimal | fraction | string, optional `tolerance`, `tools`,
  `split`, `oracle` = the tool calls that solve it) and an optional `lookup_table.json`.

A pack from elsewhere is code (its verifiers and solutions run on your machine, if inside
the sandbox), so a user pack is used only once trusted: `trust_pack` records a SHA-256 of
each of its files in `<data>/envs/trusted.json` (0600); any later change untrusts it.
`import_pack` copies a folder or `.tar.gz` in, refusing absolute paths, `..`, links,
devices and oversized files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import tomllib

SHIPPED = Path(__file__).resolve().parent / "data"
MAX_FILE_BYTES = 5 * 1024 * 1024
MAX_FILES = 5000


class PackError(ValueError):
    """A pack that cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class Pack:
    name: str
    env: str
    path: Path
    shipped: bool
    description: str = ""


def read_pack(path: Path, shipped: bool = False) -> Pack:
    manifest = path / "pack.toml"
    try:
        meta = tomllib.loads(manifest.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PackError(f"{manifest}: {exc}") from exc
    for key in ("name", "env"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise PackError(f"{manifest}: `{key}` must be a non-empty string")
    return Pack(meta["name"], meta["env"], path, shipped, str(meta.get("description", "")))


def pack_digest(path: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file of the pack (links refused)."""
    out = {}
    for p in sorted(path.rglob("*")):
        if p.is_symlink():
            raise PackError(f"{p} is a link; packs may not hold links")
        if p.is_file():
            out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _trust_file(root: Path) -> Path:
    return root / "envs" / "trusted.json"


def _trusted(root: Path) -> dict[str, dict[str, str]]:
    f = _trust_file(root)
    if not f.is_file():
        return {}
    try:
        data = json.loads(f.read_text())
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def is_trusted(pack: Pack, root: Path) -> bool:
    return pack.shipped or _trusted(root).get(str(pack.path.resolve())) == pack_digest(pack.path)


def trust_pack(pack: Pack, root: Path) -> None:
    """Record the pack's current files as trusted (the user has read them)."""
    data = _trusted(root)
    data[str(pack.path.resolve())] = pack_digest(pack.path)
    f = _trust_file(root)
    f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = f.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=1)
    os.replace(tmp, f)


def user_packs(root: Path) -> list[Pack]:
    base = root / "envs" / "packs"
    return (
        [read_pack(d) for d in sorted(base.iterdir()) if (d / "pack.toml").is_file()]
        if (base.is_dir())
        else []
    )


def usable_pack(pack: Pack, root: Path) -> Pack:
    """The pack if it may be used; PackError saying how to trust it otherwise."""
    if not is_trusted(pack, root):
        raise PackError(
            f"task pack {pack.name!r} at {pack.path} is not trusted (new or changed). Its "
            "verifiers and solutions are code: read them, then run `clawrl-app env trust "
            f"{pack.path}`."
        )
    return pack


def _safe_member(m: tarfile.TarInfo) -> None:
    name = m.name
    if os.path.isabs(name) or ".." in Path(name).parts:
        raise PackError(f"refused: {name!r} points outside the pack")
    if not (m.isfile() or m.isdir()):
        raise PackError(f"refused: {name!r} is a link or a device")
    if m.size > MAX_FILE_BYTES:
        raise PackError(f"refused: {name!r} is over {MAX_FILE_BYTES // 2**20} MiB")


def import_pack(source: Path, root: Path) -> Pack:
    """Copy a pack folder or `.tar.gz` to `<root>/envs/packs/<name>/` (untrusted)."""
    staging = root / "envs" / "packs" / f".import-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True, mode=0o700)
    try:
        if source.is_dir():
            pack_digest(source)  # refuses links
            shutil.copytree(source, staging, dirs_exist_ok=True)
        else:
            with tarfile.open(source, "r:gz") as tar:
                members = tar.getmembers()
                if len(members) > MAX_FILES:
                    raise PackError(f"refused: more than {MAX_FILES} files")
                for m in members:
                    _safe_member(m)
                tar.extractall(staging, members=members, filter="data")
        tops = [p for p in staging.iterdir()]
        inner = (
            tops[0]
            if len(tops) == 1 and tops[0].is_dir() and not (staging / "pack.toml").exists()
            else staging
        )
        pack = read_pack(inner)
        dest = root / "envs" / "packs" / pack.name
        if dest.exists():
            raise PackError(f"a pack named {pack.name!r} exists at {dest}; remove it first")
        shutil.move(str(inner), dest)
        return read_pack(dest)
    except (tarfile.TarError, OSError) as exc:
        raise PackError(f"cannot import {source}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
