"""Trainer start-up refusals, supervisor launch command and backoff (no model needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from clawrl_app.engine.training.config import TrainerConfig
from clawrl_app.engine.training.supervisor import backoff_s, launch_command
from clawrl_app.engine.training.trainer import Trainer


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_qlora_on_cpu_fails_at_start_with_a_clear_message(tmp_path: Path) -> None:
    cfg = TrainerConfig(
        store_path=str(tmp_path / "s.sqlite3"),
        checkpoints_dir=str(tmp_path),
        model_path=str(tmp_path),
        mode="qlora",
    )
    with pytest.raises(SystemExit, match="qlora needs CUDA"):
        Trainer(cfg)


def test_launch_goes_through_accelerate_on_the_plan_devices(tmp_path: Path) -> None:
    cpu = launch_command(tmp_path / "c.json", ())
    assert cpu[1:4] == ["-m", "accelerate.commands.launch", "--num_machines"] and "--cpu" in cpu
    assert cpu[-3:] == ["clawrl_app.engine.training.trainer", "--config", str(tmp_path / "c.json")]
    assert cpu[cpu.index("--num_processes") + 1] == "1"
    one_gpu = launch_command(tmp_path / "c.json", (2,))
    assert "--cpu" not in one_gpu and one_gpu[one_gpu.index("--num_processes") + 1] == "1"
    # several trainer GPUs: one rank each, through rank_launch (tests/engine/training/test_ranks.py)
    gpus = launch_command(tmp_path / "c.json", (2, 3))
    assert gpus[2:5] == ["clawrl_app.engine.training.rank_launch", "--nproc", "2"]


def test_restart_backoff_doubles_and_caps() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4, 7, 20)] == [1, 2, 4, 8, 60, 60]
