"""`clawrl-app env` output a person can read: one line per training round that says when
no group carries a signal, the engine's log lines in env.log (not on the terminal) unless
-v, and the [envs] tool choice and rollout defaults per env."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from clawrl_app.cli import build_parser
from clawrl_app.config import load_settings
from clawrl_app.env_cli import log_to_file, round_line, train_settings
from clawrl_app.envs.training import NO_SIGNAL, RoundReport
from clawrl_app.paths import app_paths


def test_a_round_line_says_when_no_group_varied() -> None:
    flat = RoundReport(episodes=8, successes=0, groups=2, varied=0, seconds=12.3)
    line = round_line(0, flat, 0)
    assert line.startswith("round 1: 0/8 solved, groups with variance 0/2") and NO_SIGNAL in line
    mixed = RoundReport(episodes=8, successes=3, groups=2, varied=1, outcome_varied=1, signal=4)
    line = round_line(1, mixed, 1)
    assert NO_SIGNAL not in line and "4 samples with a signal" in line
    assert "groups with variance 1/2 (1 in outcome)" in line
    mixed.validated = ("v3", 5 / 9)
    assert round_line(1, mixed, 1).endswith(", validation v3 0.56")


@pytest.mark.parametrize("verbose", [False, True])
def test_engine_log_lines_go_to_the_log_file_unless_verbose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verbose: bool
) -> None:
    paths = app_paths(tmp_path)
    root = logging.getLogger()
    handler = logging.StreamHandler()  # the terminal, as `clawrl-app` sets it up
    root.addHandler(handler)
    try:
        with log_to_file(paths, verbose):
            logging.getLogger("httpx").warning("HTTP Request: POST /v1/chat/completions")
    finally:
        root.removeHandler(handler)
    err = capsys.readouterr().err
    log_file = paths.log_dir / "env.log"
    in_file = log_file.exists() and "HTTP Request" in log_file.read_text()
    assert (("HTTP Request" in err), in_file) == ((True, False) if verbose else (False, True))


def test_the_envs_tool_choice_has_per_env_overrides(tmp_path: Path) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text('[envs]\ntool_choice_by_env = { terminal = "auto" }\n')
    s = load_settings(toml, env={}).settings
    assert s.envs.tool_choice_for("toolcall") == "required"
    assert s.envs.tool_choice_for("terminal") == "auto"


def test_env_train_takes_its_group_size_tasks_and_judge_from_envs_unless_given(
    tmp_path: Path,
) -> None:
    """The defaults measured on the toolcall curriculum (8 episodes per task, 6 tasks a
    round, outcome rewards only) come from `[envs]`; a flag wins over them."""
    parser = build_parser()
    envs = load_settings(tmp_path / "none.toml", env={}).settings.envs
    cfg = train_settings(parser.parse_args(["env", "train", "toolcall", "--steps", "1"]), envs, {})
    assert (cfg.group_size, cfg.tasks_per_round, cfg.judge) == (8, 6, "none")
    assert cfg.validation_per_family == 3
    toml = tmp_path / "config.toml"
    toml.write_text('[envs]\ngroup_size = 4\ntasks_per_round = 2\nstep_judge = "heuristic"\n')
    envs = load_settings(toml, env={}).settings.envs
    args = parser.parse_args(["env", "train", "toolcall", "--steps", "1", "--group-size", "3"])
    cfg = train_settings(args, envs, {})
    assert (cfg.group_size, cfg.tasks_per_round, cfg.judge) == (3, 2, "heuristic")
    args = parser.parse_args(["env", "train", "toolcall", "--steps", "1", "--validation", "0"])
    assert train_settings(args, envs, {}).validation_per_family == 0
