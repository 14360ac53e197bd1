"""Env jobs the engine runs for the Environments screen, through its real admin routes and
endpoint on the embedded model: a training job records its rounds (figures, store
metrics, trainable samples), a second job is refused while one runs, a stopped job ends
promptly without training on what was cut off, and bad requests get OpenAI-shaped 4xx."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from clawrl_app.engine.environments.jobs import round_figures
from clawrl_app.envs import make_env
from clawrl_app.envs.selection import validation_split
from clawrl_app.envs.training import split_tasks
from tests.conftest import start_engine

pytestmark = pytest.mark.slow


def wait_job(base: str, done: Any, timeout: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = httpx.get(f"{base}/admin/env/job", timeout=10).json()["job"]
        if job is not None and done(job):
            return dict(job)
        assert time.monotonic() < deadline, f"job did not get there in {timeout} s: {job}"
        time.sleep(0.2)


def ended(job: dict[str, Any]) -> bool:
    return job["state"] in ("finished", "stopped", "failed")


def test_round_figures() -> None:
    # 3 episodes, one aborted (None): mean over the two rewarded, success over all three
    assert round_figures(2, [1.0, -1.0, None], 1) == {
        "round": 2, "episodes": 3, "successes": 1, "success_rate": 1 / 3, "reward_mean": 0.0,
    }  # fmt: skip
    assert round_figures(1, [], 0)["reward_mean"] is None


@pytest.fixture(scope="module")
def training_engine(embedded_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    env = {
        "CLAWRL_MODEL__PATH": str(embedded_model.path),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "24",
        "CLAWRL_TRAIN__BATCH_SIZE": "2",
        "CLAWRL_REVIEW__GRACE_S": "0",
        # a job's group size and tasks per round default to [envs] (8 and 6 otherwise)
        "CLAWRL_ENVS__GROUP_SIZE": "2",
        "CLAWRL_ENVS__TASKS_PER_ROUND": "1",
        "CLAWRL_ENVS__VALIDATION_PER_FAMILY": "1",  # one calc_one task set aside
    }
    running = start_engine(tmp_path_factory.mktemp("env-jobs-home"), env)
    yield running
    running.stop()


def test_a_training_job_records_its_rounds(training_engine: Any) -> None:
    base, store = training_engine.base, training_engine.engine.store
    body = {"kind": "train", "env": "toolcall", "steps": 1, "max_rounds": 2,
            "families": ["nope"]}  # fmt: skip
    r = httpx.post(f"{base}/admin/env/job", json=body, timeout=30)
    assert r.status_code == 409 and "calc_one" in r.json()["error"]["message"]  # lists them
    body["families"] = ["calc_one"]
    r = httpx.post(f"{base}/admin/env/job", json=body, timeout=30)
    assert r.status_code == 200, r.text
    started = r.json()["job"]
    assert started["kind"] == "train" and started["state"] in ("starting", "running")
    assert started["families"] == ["calc_one"]
    again = httpx.post(f"{base}/admin/env/job", json=body, timeout=30)
    assert again.status_code == 409 and "a job is running" in again.json()["error"]["message"]

    job = wait_job(base, ended, timeout=300)
    assert job["state"] == "finished", job["error"]
    assert 1 <= len(job["rounds"]) <= 2 and job["episodes"] == 2 * len(job["rounds"])
    assert [x["round"] for x in job["rounds"]] == list(range(1, len(job["rounds"]) + 1))
    assert all(x["episodes"] == 2 for x in job["rounds"])
    rates = store.metrics("env/toolcall/success_rate")
    assert [m.value for m in rates] == [x["success_rate"] for x in job["rounds"]]
    assert job["live"] and job["live"]["turns"] and job["live"]["result"]
    train_split = [e for e in store.list_episodes(env="toolcall") if e.split == "train"]
    trained = [e for e in train_split if e.trained]
    assert len(trained) == job["episodes"]
    assert all(e.task_id.startswith("calc_one-") for e in trained)  # only the family asked
    # the validation task: answered by the base at least, never rolled out, never trained
    calc_one = split_tasks(make_env("toolcall").tasks(), "train", ("calc_one",))
    held = {t.id for t in validation_split(calc_one, 1)[1]}
    validated = [e for e in train_split if not e.trained]
    assert validated and {e.task_id for e in validated} == held
    assert not held & {e.task_id for e in trained}


def test_a_stopped_job_ends_and_trains_nothing_cut_off(
    engine: Any, engine_events: list[Any]
) -> None:
    base, store = engine.base, engine.engine.store
    body = {"kind": "eval", "env": "toolcall", "limit": 0}  # all 25 held-out tasks
    r = httpx.post(f"{base}/admin/env/job", json=body, timeout=30)
    assert r.status_code == 200, r.text
    job_id = r.json()["job"]["id"]
    wait_job(base, lambda j: j["episodes"] >= 1)
    t0 = time.monotonic()
    stopped = httpx.post(f"{base}/admin/env/job/stop", json={}, timeout=30).json()["job"]
    assert stopped["state"] in ("stopping", "stopped")
    job = wait_job(base, ended, timeout=60)
    assert job["state"] == "stopped" and job["id"] == job_id
    assert time.monotonic() - t0 < 60 and job["episodes"] < 25
    sessions = {e.session_id for e in store.list_episodes(env="toolcall", split="heldout")}
    assert sessions and not any(store.get_episode(s).trained for s in sessions)
    states = [e.state for e in engine_events if e.kind == "EnvJobUpdated" and e.job_id == job_id]
    assert states[0] in ("starting", "running") and states[-1] == "stopped"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"kind": "dance", "env": "toolcall"}, 400, "kind"),
        ({"kind": "eval", "env": "../etc"}, 400, "env"),
        ({"kind": "eval", "env": "toolcall", "limit": -1}, 400, "limit"),
        ({"kind": "eval", "env": "toolcall", "extra": 1}, 400, "extra"),
        ({"kind": "eval", "env": "nosuchenv"}, 409, None),
        ({"kind": "train", "env": "toolcall"}, 409, None),  # training is off on this engine
    ],
)
def test_bad_job_requests(engine: Any, body: dict[str, Any], status: int, param: str) -> None:
    r = httpx.post(f"{engine.base}/admin/env/job", json=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and (param is None or err["param"] == param)


def test_overview_over_http(engine: Any) -> None:
    from clawrl_app.envs import env_names, make_env

    data = httpx.get(f"{engine.base}/admin/env/overview", timeout=60).json()
    assert [e["name"] for e in data["envs"]] == env_names()
    for e in data["envs"]:
        tasks = make_env(e["name"], allow_unsafe=True).tasks()
        assert e["tasks"] == len(tasks) == e["train"] + e["heldout"]
        assert sum(e["families"].values()) == len(tasks)
    assert set(data) >= {"sandbox", "browser"}
