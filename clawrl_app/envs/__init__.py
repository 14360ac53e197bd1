"""Agentic environments (ENVS.md): the same engine learns from terminal, tool-call, code
repair and browser episodes. `make_env(name)` builds one; env modules are imported only
when used (the browser env needs Playwright, the others do not)."""

from __future__ import annotations

import importlib
from typing import Any

from clawrl_app.envs.base import Env

# name -> "module:factory"; the factory takes keyword settings and returns an Env.
ENV_FACTORIES: dict[str, str] = {
    "terminal": "clawrl_app.envs.terminal.env:TerminalEnv",
    "toolcall": "clawrl_app.envs.toolcall.env:ToolcallEnv",
    "browser": "clawrl_app.envs.browser.env:BrowserEnv",
    "swe": "clawrl_app.envs.swe.env:SweEnv",
}


def env_names() -> list[str]:
    return sorted(ENV_FACTORIES)


def register_env(name: str, target: str) -> None:
    """Add an env (`"package.module:Factory"`), e.g. from a plug-in."""
    ENV_FACTORIES[name] = target


def make_env(name: str, **settings: Any) -> Env:
    """A new instance of env `name`; ValueError naming the known envs otherwise."""
    try:
        target = ENV_FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"unknown env {name!r}; known: {', '.join(env_names())} (see `clawrl-app env list`)"
        ) from None
    module, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    env: Env = factory(**settings)
    return env
