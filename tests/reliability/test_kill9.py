"""kill -9 of the real app (`clawrl-app serve` in its own process group) while a client
chats through the `openai` SDK and rates answers: every answer the client received in
full is in the store after the restart, every acknowledged rating too, and each restart
is clean (no manual step). Training is off here to keep it fast; `bench/chaos.py --parts
kill` runs the long version with the trainer stepping."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.paths import app_paths
from tests.reliability.app_process import AppProcess, app_env, free_port
from tests.reliability.chat_client import ChatDriver
from tests.reliability.store_checks import check_store, version_of

pytestmark = pytest.mark.slow
CYCLES = 2


@pytest.mark.timeout(600)
def test_answered_turns_and_ratings_survive_kill9_and_restarts_are_clean(
    embedded_model: Any, tmp_path: Path
) -> None:
    home, port = tmp_path / "home", free_port()
    extra = {"CLAWRL_TRAIN__ENABLED": "false", "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "12"}
    rng = random.Random(7)
    with AppProcess(
        home, app_env(home, embedded_model.path, port, extra), port, tmp_path / "app.log"
    ) as app:
        assert app.start().ready_s is not None, app.log_path.read_text()[-3000:]
        driver = ChatDriver(app.base, clients=2, turns=3, max_tokens=8, rate_p=0.5).start()
        try:
            for cycle in range(CYCLES):
                # mid-traffic: a few answers since the last start, then a random moment
                assert driver.wait_answers(len(driver.log.answered) + 3, 180), driver.log.errors
                time.sleep(rng.uniform(0.0, 1.0))
                app.kill9(tree=cycle % 2 == 1)
                start = app.start()
                assert start.ready_s is not None, f"restart {cycle + 1}: {start.error}"
                assert start.version == "base"
            assert driver.wait_answers(len(driver.log.answered) + 2, 180), driver.log.errors
        finally:
            log = driver.stop()
        assert app.stop() == 0  # a clean stop after all the kills
    assert not app.survivors_alive()
    paths = app_paths(home)
    f = check_store(
        paths.store_file,
        paths.checkpoints_dir,
        log.answered,
        log.rated,
        [version_of(a.model) for a in log.answered],
    )
    assert f.answered >= 3 * CYCLES + 2 and f.rated > 0
    assert f.problems() == [], app.log_path.read_text()[-3000:]
    assert set(f.versions_seen) == {"base"}
