"""`clawrl-app` as a user runs it, with CLAWRL_HOME in a temp folder.

`--help` of every command, an invalid setting and `api-key` run as real subprocesses (started
together to keep the suite fast); the other scenarios call `main(argv)` in-process. The environment is scrubbed of the developer's CLAWRL_* and upstream variables, the keyring
is forced to the `fail` backend (the headless case) and CUDA_VISIBLE_DEVICES is empty, so
the output does not depend on the machine running the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keyring.core
import pytest
from keyring.backends import fail

from clawrl_app.cli import COMMANDS, _load, build_parser, main
from clawrl_app.config import UPSTREAM_ENV
from clawrl_app.paths import app_paths

REPO = Path(__file__).resolve().parents[1]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CLAWRL_") and k not in UPSTREAM_ENV and k != "PYTHON_KEYRING_BACKEND"
    }
    env.update(
        CLAWRL_HOME=str(home),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        CUDA_VISIBLE_DEVICES="",
    )
    env.update(extra)
    return env


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "clawrl_app.cli", *args]


def subcommand_paths() -> list[tuple[str, ...]]:
    """Every (sub)command path the parser knows, e.g. ('config', 'show')."""
    out: list[tuple[str, ...]] = []

    def walk(parser: argparse.ArgumentParser, prefix: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out.append((*prefix, name))
                    walk(sub, (*prefix, name))

    walk(build_parser(), ())
    return out


NESTED = [p for p in subcommand_paths() if len(p) > 1]
HELP_PATHS: list[tuple[str, ...]] = [(), *[(c,) for c in COMMANDS], *NESTED]


def test_parser_commands_match_handlers() -> None:
    assert {p[0] for p in subcommand_paths()} == set(COMMANDS)
    assert {("config", "show"), ("config", "path"), ("sessions", "show")} <= set(NESTED)


@dataclass(frozen=True)
class Run:
    """One finished `clawrl-app` subprocess and the CLAWRL_HOME it ran with."""

    home: Path
    returncode: int
    stdout: str
    stderr: str


# End-to-end runs (real interpreter, real `sys.exit(main())`): name -> (argv, extra env).
SCENARIOS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    **{"help " + " ".join(p): ((*p, "--help"), {}) for p in HELP_PATHS},
    "invalid env": (("config", "show"), {"CLAWRL_TRAIN__METHOD": "foo"}),
    "api-key": (("api-key",), {}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every scenario, started concurrently (each is a separate interpreter), own home each."""
    started = {}
    for name, (argv, extra) in SCENARIOS.items():
        home = tmp_path_factory.mktemp("home")
        proc = subprocess.Popen(
            cli_cmd(*argv),
            env=cli_env(home, **extra),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started[name] = (home, proc)
    out = {}
    try:
        for name, (home, proc) in started.items():
            stdout, stderr = proc.communicate(timeout=120)
            out[name] = Run(home, proc.returncode, stdout, stderr)
    finally:
        for _, proc in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


@pytest.fixture
def run_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """`main(argv)` in-process with CLAWRL_HOME = tmp_path; returns (exit code, stdout, stderr)."""
    for name in list(os.environ):
        if name.startswith("CLAWRL_") or name in UPSTREAM_ENV:
            monkeypatch.delenv(name)
    monkeypatch.setenv("CLAWRL_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(keyring.core, "_keyring_backend", fail.Keyring())

    def run(*argv: str, **env: str) -> tuple[int, str, str]:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        try:
            rc = main(list(argv))
        finally:
            for k in env:
                monkeypatch.delenv(k)
        out, err = capsys.readouterr()
        return rc, out, err

    return run


@pytest.mark.parametrize("path", HELP_PATHS, ids=lambda p: " ".join(p) or "top-level")
def test_help_exits_zero(path: tuple[str, ...], runs: dict[str, Run]) -> None:
    r = runs["help " + " ".join(path)]
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout.startswith(" ".join(["usage: clawrl-app", *path]))


def test_top_level_help_lists_every_command(runs: dict[str, Run]) -> None:
    stdout = runs["help "].stdout
    for name in COMMANDS:
        assert name in stdout


def test_no_command_prints_help(run_main: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, _ = run_main()
    assert rc == 0
    assert out.startswith("usage: clawrl-app")


def test_version(
    run_main: Callable[..., tuple[int, str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    from clawrl_app import __version__

    with pytest.raises(SystemExit) as exit_:
        run_main("--version")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"clawrl-app {__version__}"


# --- config -------------------------------------------------------------------------------


def test_config_show_prints_values_sources_and_docs(
    run_main: Callable[..., tuple[int, str, str]],
) -> None:
    rc, out, err = run_main("config", "show", CLAWRL_SERVER__PORT="4321")
    assert rc == 0, err
    lines = out.splitlines()
    assert "server.port = 4321    # env CLAWRL_SERVER__PORT" in lines
    assert 'server.host = "127.0.0.1"    # default' in lines
    assert 'train.method = "combine"    # default' in lines
    assert "model.path = null    # default" in lines
    i = lines.index("server.port = 4321    # env CLAWRL_SERVER__PORT")
    assert lines[i + 1].startswith("    TCP port")  # the field's docstring follows


def test_invalid_env_exits_2_with_message(runs: dict[str, Run]) -> None:
    r = runs["invalid env"]
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.startswith("error: ")
    assert "train.method" in r.stderr
    assert "env CLAWRL_TRAIN__METHOD" in r.stderr
    assert "combine" in r.stderr
    assert "Traceback" not in r.stderr


def test_config_without_action_shows(run_main: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, _ = run_main("config")
    assert rc == 0
    assert "server.port = 30000    # default" in out.splitlines()


def test_config_upstream_env_source(run_main: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, _ = run_main("config", "show", PORT="8088", NUM_GPUS="2")
    assert rc == 0
    lines = out.splitlines()
    assert "server.port = 8088    # env PORT" in lines
    assert "hardware.num_gpus = 2    # env NUM_GPUS" in lines


def test_config_file_in_home_is_used(
    tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]
) -> None:
    config_file = app_paths(tmp_path).config_file
    config_file.parent.mkdir(parents=True)
    config_file.write_text("[server]\nport = 5555\n")
    rc, out, err = run_main("config", "show")
    assert rc == 0, err
    assert f"server.port = 5555    # file {config_file}" in out.splitlines()


def test_config_path(tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, _ = run_main("config", "path")
    assert rc == 0
    assert out.strip() == str(app_paths(tmp_path).config_file)


@pytest.mark.parametrize("command", ["doctor", "openclaw-config", "sessions", "api-key", "config"])
def test_invalid_config_file_exits_2(
    command: str, tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]
) -> None:
    config_file = app_paths(tmp_path).config_file
    config_file.parent.mkdir(parents=True)
    config_file.write_text("[server\n")
    rc, out, err = run_main(command)
    assert rc == 2
    assert out == ""
    assert err.startswith("error: ")
    assert "not valid TOML" in err
    assert str(config_file) in err


def test_cli_flag_overrides_env(
    tmp_path: Path,
    run_main: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLAWRL_SERVER__PORT", "1111")  # run_main scrubbed the rest
    args = build_parser().parse_args(["serve", "--port", "2222", "--backend", "torch"])
    loaded = _load(args, app_paths(tmp_path))
    assert loaded.settings.server.port == 2222
    assert loaded.source_of("server.port") == "flag --port"
    assert loaded.settings.hardware.backend == "torch"
    assert loaded.source_of("server.host") == "default"


def test_model_flag_source_names_the_real_flag(
    tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]
) -> None:
    args = build_parser().parse_args(["serve", "--model", "/models/x"])
    loaded = _load(args, app_paths(tmp_path))
    assert loaded.settings.model.path == "/models/x"
    assert loaded.source_of("model.path") == "flag --model"


# --- openclaw-config ----------------------------------------------------------------------


def split_json_blocks(text: str) -> tuple[Any, str]:
    """The first JSON document in `text` and what follows it."""
    start = text.index("{")
    obj, end = json.JSONDecoder().raw_decode(text, start)
    return obj, text[end:]


def test_openclaw_config_block(
    tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]
) -> None:
    rc, out, err = run_main("openclaw-config", CLAWRL_SERVER__PORT="4321")
    assert rc == 0, err
    block, rest = split_json_blocks(out)
    provider = block["models"]["providers"]["clawrl"]
    assert provider["baseUrl"] == "http://127.0.0.1:4321/v1"
    assert provider["api"] == "openai-completions"
    assert provider["apiKey"] == "local"  # loopback: no key required
    model = provider["models"][0]
    assert model["id"] == "clawrl"
    assert model["contextWindow"] == 8192  # the embedded model
    assert model["maxTokens"] == 512
    # The embedded model's context is small: the compact OpenClaw settings are merged in,
    # and stdout stays one JSON document (`> openclaw.json` works).
    assert rest.strip() == ""
    assert block["tools"] == {"profile": "minimal"}
    assert block["agents"]["defaults"]["skipBootstrap"] is True
    assert "compact" in err
    assert not app_paths(tmp_path).api_key_file.exists()


def test_openclaw_config_flags_and_wildcard_host(
    tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]
) -> None:
    rc, out, err = run_main(
        "openclaw-config", "--host", "0.0.0.0", "--port", "4444", "--compact", PORT="1"
    )
    assert rc == 0, err
    provider = split_json_blocks(out)[0]["models"]["providers"]["clawrl"]
    assert provider["baseUrl"] == "http://127.0.0.1:4444/v1"
    # A non-loopback bind needs a key: the block carries the one stored for the endpoint.
    key_file = app_paths(tmp_path).api_key_file
    assert provider["apiKey"].startswith("sk-clawrl-")
    assert provider["apiKey"] == key_file.read_text()


def test_openclaw_config_alias(run_main: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, _ = run_main("openclaw-config", CLAWRL_SERVER__MODEL_ALIAS="mybot")
    assert rc == 0
    model = split_json_blocks(out)[0]["models"]["providers"]["clawrl"]["models"][0]
    assert model["id"] == "mybot"


# --- sessions -----------------------------------------------------------------------------


def test_sessions_without_store(
    tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]
) -> None:
    rc, out, _ = run_main("sessions")
    assert rc == 0
    assert "No store yet" in out
    assert "clawrl-app serve" in out
    assert not app_paths(tmp_path).store_file.exists()  # listing never creates the store


def test_sessions_with_store(tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]) -> None:
    from clawrl_app.engine.store import Store

    store_file = app_paths(tmp_path).store_file
    with Store(store_file):
        pass
    rc, out, err = run_main("sessions")
    assert rc == 0, err
    assert "No sessions recorded yet." in out

    with Store(store_file) as store:
        store.ensure_session("s-abc123", "api")
    rc, out, err = run_main("sessions")
    assert rc == 0, err
    header, row = out.splitlines()[:2]
    assert header.split()[:6] == ["session", "source", "main", "side", "judged", "reward"]
    assert row.split()[:6] == ["s-abc123", "api", "0", "0", "0", "-"]

    from clawrl_app.engine.store import NewTurn

    with Store(store_file) as store:  # one judged main turn with a hint
        turn = store.record_turn(
            NewTurn(
                "s-abc123",
                "main",
                {"messages": [{"role": "user", "content": "Write a haiku."}]},
                "Rain falls softly",
                [1, 2],
                [3],
                [-0.5],
                "base",
            )
        )
        sample = store.create_sample(turn.id, "s-abc123", "user", "No, shorter.")
        assert sample is not None
        store.record_judgment(
            sample,
            "heuristic",
            [{"kind": "heuristic", "score": -1}],
            -1,
            "Be shorter.",
            ["Be shorter."],
            "heuristic",
            [-0.2],
            eligible_at=0.0,
        )
    rc, out, err = run_main("sessions")
    assert out.splitlines()[1].split()[:6] == ["s-abc123", "api", "1", "0", "1", "-1.00"]
    rc, out, err = run_main("sessions", "show", "s-abc123")
    assert rc == 0, err
    assert out.startswith("session s-abc123  source=api")
    assert "next state (user): No, shorter." in out
    assert "reward -1 by heuristic; votes: heuristic=-1" in out
    assert "hint [heuristic]: Be shorter.  (teacher log-probs stored)" in out

    rc, out, err = run_main("sessions", "show", "nope")
    assert rc == 1
    assert "no session 'nope'" in err


# --- doctor and api-key -------------------------------------------------------------------


def test_doctor_no_model(tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, err = run_main("doctor", "--no-model")
    assert rc == 0, err
    paths = app_paths(tmp_path)
    assert "GPUs: none" in out
    assert "(skipped: --no-model)" in out
    assert "\nPlan\n" in out
    assert "Backend:  torch" in out
    assert re.search(r"Trainer: .*, gradient checkpointing (on|off)\n", out)
    assert re.search(r"\nServing\n  prefix cache: \d+ MiB \(the plan's default\)", out)
    assert str(paths.store_file) in out
    assert "keyring backend: none" in out
    assert "0600" in out
    assert str(paths.api_key_file) in out
    assert not paths.api_key_file.exists()  # doctor only reports


def test_doctor_reports_free_space_and_store_integrity(
    tmp_path: Path, run_main: Callable[..., tuple[int, str, str]]
) -> None:
    from clawrl_app.doctor import disk_line
    from clawrl_app.engine.store import Store

    store_file = app_paths(tmp_path).store_file
    with Store(store_file) as store:
        for i in range(400):  # a few dozen pages
            store.ensure_session(f"s-{i:04d}", "api " * 40)
    rc, out, err = run_main("doctor", "--no-model")
    assert rc == 0, err
    assert f"store: {store_file} (" in out and "integrity check ok" in out
    line = next(x for x in out.splitlines() if "free disk space:" in x)
    shown_gib = float(line.split("free disk space:")[1].split("GiB")[0])
    assert abs(shown_gib - shutil.disk_usage(tmp_path).free / 2**30) < 0.2
    low = disk_line(tmp_path, low_gib=shown_gib + 1)
    assert "LOW" in low and f"{shown_gib:.1f} GiB" in low and "free some space" in low

    with store_file.open("r+b") as f:  # a damaged page in the middle of the file
        f.seek(8 * 4096)
        f.write(os.urandom(4 * 4096))
    rc, out, err = run_main("doctor", "--no-model")
    assert rc == 1
    line = next(x for x in out.splitlines() if str(store_file) in x)
    assert "damaged" in line.lower() and "move it away" in line

    store_file.write_bytes(os.urandom(8192))  # not a database at all
    rc, out, err = run_main("doctor", "--no-model")
    assert rc == 1 and "not a database" in out and "move it away" in out
    assert "Traceback" not in out + err


@pytest.mark.slow
def test_doctor_prints_each_conversion_stage_once(tmp_path: Path, embedded_model: Any) -> None:
    """Regression: with the CLI's logging each stage came out twice (log line + print).

    The real `clawrl-app doctor` (real logging set-up) converts the model into a fresh home;
    only the 20-second GGUF read is replaced by the same real weights (see test_models)."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from clawrl_app import models\n"
        "from clawrl_app.cli import main\n"
        f"cached = models.ResolvedModel(Path({str(embedded_model.path)!r}), 'local', 'm', 0)\n"
        "models._load_gguf = lambda gguf, progress=False: models.load_model(cached)\n"
        "sys.exit(main(['doctor']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=cli_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for stage in ("converting", "saving safetensors", "verifying", "model ready in"):
        assert proc.stderr.count(stage) == 1, (stage, proc.stderr)
    assert proc.stderr.count("Loading weights:   0%") <= 1  # not once more for verifying
    assert "integrity check ok" not in proc.stdout  # no store yet: doctor only reports
    assert "(created on first start)" in proc.stdout


def test_api_key_file_fallback(runs: dict[str, Run]) -> None:
    r = runs["api-key"]
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip()
    assert key.startswith("sk-clawrl-")
    key_file = app_paths(r.home).api_key_file
    assert f"# stored in {key_file}" in r.stderr
    assert key_file.read_text() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_api_key_is_stable(run_main: Callable[..., tuple[int, str, str]]) -> None:
    rc, first, _ = run_main("api-key")
    rc2, second, _ = run_main("api-key")
    assert rc == rc2 == 0
    assert first.strip().startswith("sk-clawrl-")
    assert first == second


# --- a reader that stops early (`clawrl-app sessions | head`) -------------------------------


def run_into_closed_pipe(home: Path, argv: tuple[str, ...], buffered: bool) -> tuple[int, str]:
    """Run the CLI with stdout on a pipe whose reader is already gone; (exit code, stderr)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `head` that has exited: every write now fails with EPIPE
    env = cli_env(home)
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    try:
        proc = subprocess.run(
            cli_cmd(*argv),
            env=env,
            cwd=REPO,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_closed_stdout_ends_quietly(tmp_path: Path, buffered: bool) -> None:
    """Every command that prints ends with 141 and nothing on stderr, never a traceback."""
    from clawrl_app.engine.store import Store

    with Store(app_paths(tmp_path).store_file) as store:
        for i in range(300):  # more than a pipe buffer of table rows
            store.ensure_session(f"s-{i:04d}", "api")
    for argv in (("sessions", "--limit", "300"), ("config", "show"), ("doctor", "--no-model")):
        rc, err = run_into_closed_pipe(tmp_path, argv, buffered)
        assert (rc, err) == (141, ""), argv
    rc, err = run_into_closed_pipe(tmp_path, ("--help",), buffered)
    assert rc in (0, 141) and err == ""  # argparse drops a failed help write itself
