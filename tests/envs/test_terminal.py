"""The terminal env in real bubblewrap with scripted policies: the oracle passes every
shipped task and a no-op none; hidden tests stay hidden; the verifier cannot be fooled from
the workspace; file tools never leave the workspace; task packs and trust on first use."""

from __future__ import annotations

import io
import re
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from clawrl_app.envs import make_env
from clawrl_app.envs.base import EpisodeStatus, Task
from clawrl_app.envs.packs import PackError, import_pack, read_pack, trust_pack, usable_pack
from clawrl_app.envs.policies import ScriptedPolicy, noop_policy, oracle_policy, tool_call
from clawrl_app.envs.runner import run_episode
from clawrl_app.envs.sandbox import Sandbox
from clawrl_app.envs.terminal.env import DATA, load_task_dir

pytestmark = pytest.mark.usefixtures("sandbox")


def test_oracle_passes_and_noop_fails_every_shipped_task() -> None:
    env = make_env("terminal")
    tasks = env.tasks()
    assert len(tasks) >= 20 and len({t.family for t in tasks}) == 5
    assert sum(t.split == "heldout" for t in tasks) >= 4

    def both(task: Task) -> tuple[float | None, float | None]:
        good = run_episode(make_env("terminal"), task, oracle_policy(env, task))
        bad = run_episode(make_env("terminal"), task, noop_policy())
        return good.outcome_reward, bad.outcome_reward

    with ThreadPoolExecutor(2) as ex:
        results = dict(zip([t.id for t in tasks], ex.map(both, tasks), strict=True))
    assert {k: v for k, v in results.items() if v != (1.0, -1.0)} == {}


def test_the_write_family_is_what_its_generator_writes_split_by_wording_and_value() -> None:
    """The easiest family (one file, one value) is generated: the shipped folders are
    exactly `make_tasks.render()`; no held-out instruction, word or number is a train one."""
    from clawrl_app.envs.terminal import make_tasks

    for name, text in make_tasks.render().items():
        assert (DATA / name).read_text() == text, f"rerun python -m {make_tasks.__name__}"
    shipped = {d.name for d in DATA.glob(f"{make_tasks.PREFIX}*")}
    assert shipped == {t["id"] for t in make_tasks.tasks()}
    by_split: dict[str, list[dict[str, str]]] = {"train": [], "heldout": []}
    for t in make_tasks.tasks():
        by_split[t["split"]].append(t)
    train_values = {t["value"] for t in by_split["train"]}
    assert not train_values & {t["value"] for t in by_split["heldout"]}

    def pattern(template: str) -> re.Pattern[str]:
        return re.compile(re.escape(template).replace(r"\{word\}", r"\w+")
                          .replace(r"\{number\}", r"\d+").replace(r"\{name\}", r"\w+") + "$")  # fmt: skip

    train_forms = [pattern(t) for t in make_tasks.TRAIN]
    assert all(any(p.match(t["instruction"]) for p in train_forms) for t in by_split["train"])
    assert not any(p.match(t["instruction"]) for p in train_forms for t in by_split["heldout"])
    assert len({t["instruction"] for t in make_tasks.tasks()}) == len(make_tasks.tasks())


def shell(command: str, i: int = 0) -> object:
    return tool_call("shell_exec", call_id=f"c{i}", command=command)


def task(name: str) -> Task:
    return next(t for t in make_env("terminal").tasks() if t.id == name)


def test_hidden_tests_are_invisible_and_planted_files_cannot_fool_the_verifier() -> None:
    seen: list[str] = []
    t = task("log-error-count")
    policy = ScriptedPolicy([
        shell("ls /verifier; find / -name 'test_task.py' 2>/dev/null; echo END", 0),
        shell("echo 'import pytest\\n@pytest.hookimpl\\ndef pytest_runtest_makereport(item, call):\\n"
              "    pass' > conftest.py; echo 'import os; os._exit(0)' > sitecustomize.py; "
              "echo 999 > answer.txt", 1),
        tool_call("finish", call_id="c2"),
    ])  # type: ignore[list-item]  # fmt: skip
    ep = run_episode(make_env("terminal"), t, policy,
                     on_turn=lambda r: seen.extend(o.text for o in r.observations))  # fmt: skip
    assert "No such file" in seen[0] and "test_task.py" not in seen[0].replace("'test_task.py'", "")
    assert ep.verdict is not None and ep.verdict.score == 0.5  # exists, but the value is wrong
    assert ep.outcome_reward == 0.0


def test_file_tools_stay_inside_the_workspace(tmp_path: Path) -> None:
    t = task("word-freq")
    outside = tmp_path / "host-file"
    outside.write_text("host")
    policy = ScriptedPolicy([
        tool_call("read_file", call_id="a", file_path="../../../etc/passwd"),
        shell(f"ln -s {outside} link; ln -s / root; echo ok", 1),
        tool_call("read_file", call_id="b", file_path="/workspace/link"),
        tool_call("shell_write_content_to_file", call_id="c", file_path="link", content="pwned"),
        tool_call("shell_write_content_to_file", call_id="d", file_path="root/tmp/x", content="x"),
        tool_call("read_file", call_id="e", file_path="text.txt"),
    ])  # type: ignore[list-item]  # fmt: skip
    obs: list[str] = []
    run_episode(make_env("terminal"), t, policy,
                on_turn=lambda r: obs.extend(o.text for o in r.observations))  # fmt: skip
    assert all("outside /workspace" in o for o in (obs[0], obs[2], obs[3], obs[4])), obs
    assert outside.read_text() == "host" and "the cat sat" in obs[5]


def test_a_crashing_verifier_is_an_infrastructure_failure(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "tests").mkdir(parents=True)
    (broken / "tests" / "test_x.py").write_text("import nonexistent_module_xyz\n")
    (broken / "task.toml").write_text('id = "broken"\nfamily = "x"\ninstruction = "nothing"\n')
    t = load_task_dir(broken)
    ep = run_episode(make_env("terminal"), t, noop_policy())
    # a collection error is a test error (score 0), a verifier that writes nothing is ours
    assert ep.verdict is not None and ep.verdict.score == 0.0
    (broken / "tests" / "test_x.py").write_text("import os\nos._exit(3)\n")
    ep = run_episode(make_env("terminal"), t, noop_policy())
    assert ep.status is EpisodeStatus.ABORTED and not ep.trainable and "verifier" in ep.reason


def test_shell_envs_refuse_to_run_unsandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    probe_module = importlib.import_module("clawrl_app.envs.sandbox.probe")

    monkeypatch.setattr(probe_module.shutil, "which", lambda _: None)
    probe_module.probe.cache_clear()
    try:
        ep = run_episode(make_env("terminal"), task("word-freq"), noop_policy())
        assert ep.status is EpisodeStatus.ABORTED and "bubblewrap" in ep.reason
        assert "--allow-unsafe" in ep.reason
    finally:
        probe_module.probe.cache_clear()


def test_task_packs_validate_and_need_trust(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="instruction"):
        bad = tmp_path / "bad"
        (bad / "tests").mkdir(parents=True)
        (bad / "task.toml").write_text('id = "x"\nfamily = "y"\n')
        load_task_dir(bad)
    root = tmp_path / "home"
    src = tmp_path / "mypack"
    (src / "t1" / "tests").mkdir(parents=True)
    (src / "pack.toml").write_text('name = "mine"\nenv = "terminal"\nversion = 1\n')
    (src / "t1" / "task.toml").write_text('id = "t1"\nfamily = "f"\ninstruction = "do it"\n')
    (src / "t1" / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    pack = import_pack(src, root)
    with pytest.raises(PackError, match="not trusted"):
        usable_pack(pack, root)
    trust_pack(pack, root)
    assert usable_pack(pack, root) == pack
    assert (root / "envs" / "trusted.json").stat().st_mode & 0o777 == 0o600
    (pack.path / "t1" / "tests" / "test_a.py").write_text("import os\n")
    with pytest.raises(PackError, match="not trusted"):
        usable_pack(read_pack(pack.path), root)
    assert make_env("terminal", data_dir=pack.path).tasks()[0].id == "t1"
    assert read_pack(DATA, shipped=True).env == "terminal"


@pytest.mark.parametrize(
    ("name", "kind"), [("../evil", tarfile.REGTYPE), ("/etc/evil", tarfile.REGTYPE),
                       ("p/link", tarfile.SYMTYPE)],
)  # fmt: skip
def test_import_refuses_archives_that_escape(tmp_path: Path, name: str, kind: bytes) -> None:
    archive = tmp_path / "pack.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("p/pack.toml")
        data = b'name = "p"\nenv = "terminal"\n'
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        evil = tarfile.TarInfo(name)
        evil.type = kind
        evil.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
        tar.addfile(evil, io.BytesIO(b""))
    with pytest.raises(PackError, match="refused"):
        import_pack(archive, tmp_path / "home")
    assert not (tmp_path / "evil").exists()


def test_sandbox_fixture_is_isolating(sandbox: Sandbox) -> None:
    assert sandbox.isolated
