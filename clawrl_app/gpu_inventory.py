"""What this machine has: NVIDIA GPUs (nvidia-smi, else torch.cuda), CPU cores and RAM.

The only part of the hardware plan that touches the system (`inventory()`); `hardware.plan()`
takes what it returns and is pure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clawrl_app.memory_model import GIB

NVIDIA_SMI_QUERY = "--query-gpu=index,name,memory.total"


@dataclass(frozen=True)
class GPU:
    """One NVIDIA GPU: its physical index (what CUDA_VISIBLE_DEVICES takes), name and memory."""

    index: int
    name: str
    memory_gib: float


@dataclass(frozen=True)
class Inventory:
    """The hardware `plan()` may use."""

    gpus: tuple[GPU, ...]
    sglang_available: bool
    cpu_count: int
    ram_gib: float
    sglang_installed: str | None = None
    """The interpreter of the SGLang environment `make run` installed (`SGLANG_MARKER`)."""


def parse_nvidia_smi(text: str) -> tuple[GPU, ...]:
    """Parse `nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        try:
            mem_mib = float(parts[-1])
        except ValueError:  # "[N/A]" or "[Insufficient Permissions]"
            continue
        gpus.append(GPU(int(parts[0]), ", ".join(parts[1:-1]), round(mem_mib / 1024, 2)))
    return tuple(gpus)


def visible_gpus(gpus: Sequence[GPU], cuda_visible: str | None) -> tuple[GPU, ...] | None:
    """Apply CUDA_VISIBLE_DEVICES to nvidia-smi's list (which ignores it).

    Follows CUDA: listed order, parsing stops at the first unknown index, empty = no GPU.
    Returns None for UUID/MIG entries, which only CUDA itself can resolve.
    """
    if cuda_visible is None:
        return tuple(gpus)
    by_index = {g.index: g for g in gpus}
    out: list[GPU] = []
    for entry in (e.strip() for e in cuda_visible.split(",") if e.strip()):
        if entry.startswith(("GPU-", "MIG-")):
            return None
        if not entry.lstrip("-").isdigit() or int(entry) not in by_index:
            break
        out.append(by_index[int(entry)])
    return tuple(out)


def _nvidia_smi() -> tuple[GPU, ...] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        cmd = [exe, NVIDIA_SMI_QUERY, "--format=csv,noheader,nounits"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (parse_nvidia_smi(done.stdout) or None) if done.returncode == 0 else None


def _torch_gpus(cuda_visible: str | None) -> tuple[GPU, ...]:
    # Importing torch takes seconds: only try where an NVIDIA driver could be (Linux, WSL, Windows).
    driver = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")
    if os.name != "nt" and not any(os.path.exists(p) for p in driver):
        return ()
    if importlib.util.find_spec("torch") is None:
        return ()
    try:
        import torch

        if not torch.cuda.is_available():
            return ()
        entries = [e.strip() for e in (cuda_visible or "").split(",") if e.strip()]
        physical = [int(e) for e in entries] if all(e.isdigit() for e in entries) else []
        gpus = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            index = physical[i] if i < len(physical) else i
            gpus.append(GPU(index, props.name, round(props.total_memory / GIB, 2)))
        return tuple(gpus)
    except Exception:  # a broken CUDA install means no usable GPU, not a crash
        return ()


def _ram_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 2)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, 2)
    except (ValueError, OSError, AttributeError):
        return 0.0


SGLANG_MARKER = "clawrl-sglang-python"
"""On an NVIDIA machine `make run` installs SGLang into its own environment (its torch pin
must not replace the app's) and writes that interpreter's path to this file in the app's
environment (`sys.prefix`)."""


def installed_sglang(prefix: str | None = None) -> str | None:
    """The interpreter `make run` installed SGLang for, when its marker names one that exists."""
    marker = Path(prefix or sys.prefix) / SGLANG_MARKER
    try:
        python = marker.read_text().strip()
    except OSError:
        return None
    return python if python and Path(python).is_file() else None


def inventory() -> Inventory:
    """Probe GPUs (nvidia-smi, else torch.cuda), the sglang package, CPU cores and RAM."""
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    smi = _nvidia_smi()
    gpus = visible_gpus(smi, cuda_visible) if smi is not None else None
    if gpus is None:
        gpus = _torch_gpus(cuda_visible)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    has_sglang = importlib.util.find_spec("sglang") is not None
    return Inventory(gpus, has_sglang, cpus or 1, _ram_gib(), installed_sglang())
