"""Env tests that run commands need bubblewrap; without it they skip and say how to get it."""

from __future__ import annotations

import pytest

from clawrl_app.envs.sandbox import Sandbox, make_sandbox, probe


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    status = probe()
    if not status.ok:
        pytest.skip(
            f"no bubblewrap sandbox here: {status.detail} (`make test` installs it as root)"
        )
    return make_sandbox()
