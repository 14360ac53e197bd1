"""End to end: the embedded model plays toolcall episodes through the app's real endpoint
(the official `openai` client), the group is recorded, and the store ends up with env
sessions, their turns (prompt ids, sampled ids, behaviour log-probs), the env's
observations as next states and judged samples carrying the group's advantages."""

from __future__ import annotations

from typing import Any

import pytest

from clawrl_app.envs import make_env
from clawrl_app.envs.endpoint_policy import EndpointPolicy
from clawrl_app.envs.engine_client import EngineClient
from clawrl_app.envs.selection import Validation, served_version
from clawrl_app.envs.training import RolloutSettings, check_validation, run_round

pytestmark = pytest.mark.slow


def test_a_rollout_group_of_the_embedded_model_lands_in_the_store(engine: Any) -> None:
    store = engine.engine.store
    task = next(t for t in make_env("toolcall").tasks() if t.family == "word_arith")
    cfg = RolloutSettings(group_size=2, max_tokens=24, max_steps=1, judge="heuristic",
                          reward_mode="step")  # fmt: skip
    client = EngineClient(engine.base)

    def policy_for(seed: int) -> EndpointPolicy:
        return EndpointPolicy(base_url=engine.url, env_name="toolcall", max_tokens=24)

    before = {e.session_id for e in store.list_episodes(env="toolcall")}
    try:
        report = run_round("toolcall", [task], client, policy_for, cfg)
    finally:
        client.close()
    episodes = [e for e in store.list_episodes(env="toolcall") if e.session_id not in before]
    assert report.episodes == 2 == len(episodes) and report.aborted == 0
    for ep in episodes:
        session = store.get_session(ep.session_id)
        assert session is not None and session.source == "env:toolcall" and session.closed_at
        turns = store.turns_for_session(ep.session_id, type="main")
        assert len(turns) == ep.turns == 1  # one turn each (max_steps=1) keeps it quick
        assert all(t.response_ids and len(t.logprobs) == len(t.response_ids) for t in turns)
        assert all(t.request["messages"][1]["content"] == task.instruction for t in turns)
        # a rollout samples the whole distribution, not the endpoint's default nucleus
        assert all((t.request["temperature"], t.request["top_p"]) == (1.0, 1.0) for t in turns)
        samples = sorted(store.samples_for_session(ep.session_id), key=lambda s: s.turn_id)
        assert [s.state for s in samples] == ["judged"] * len(turns)
        assert all(s.next_state_text for s in samples)  # the env's observation
        assert "verifier score" in samples[-1].next_state_text
        # +1 right, -1 wrong, -0.5 wrong but in the asked format (format_bonus)
        assert ep.outcome_reward in (-1.0, -0.5, 1.0) and ep.trained
    scores = [store.get_judgment(s.id).score for e in episodes
              for s in store.samples_for_session(e.session_id)]  # fmt: skip
    assert all(-1.0 <= x <= 1.0 for x in scores)
    assert report.trainable == len(scores)


def test_forced_calls_are_recorded_as_asked_and_the_trainer_replays_their_grammar(
    engine: Any, loaded_model: tuple[Any, Any]
) -> None:
    """A one-step curriculum task played with `tool_choice = "required"` through the real
    endpoint (torch backend, base weights): every turn is a call, recorded with the
    tool_choice it was asked with; the trainer's log-probs of the recorded tokens, taken
    under the replayed grammar (`grammar_replay.py`), are the behaviour log-probs the
    endpoint recorded; without the mask they are not (the constraint renormalised them)."""
    import torch

    from clawrl_app.engine.training.grammar_replay import GrammarReplay
    from clawrl_app.engine.training.policy_forward import response_logprobs
    from clawrl_app.engine.training.train_data import TrainItem, sampled_schema

    store = engine.engine.store
    task = next(t for t in make_env("toolcall").tasks() if t.family == "calc_one")
    client = EngineClient(engine.base)

    def policy_for(seed: int) -> EndpointPolicy:
        return EndpointPolicy(base_url=engine.url, env_name="toolcall", max_tokens=24,
                              tool_choice="required")  # fmt: skip

    before = {e.session_id for e in store.list_episodes(env="toolcall")}
    try:
        report = run_round("toolcall", [task], client, policy_for,
                           RolloutSettings(group_size=2, max_tokens=24))  # fmt: skip
    finally:
        client.close()
    assert report.episodes == 2 and report.groups == 1
    model, tok = loaded_model
    replay = GrammarReplay(tok)
    new = [e for e in store.list_episodes(env="toolcall") if e.session_id not in before]
    turns = [t for e in new for t in store.turns_for_session(e.session_id, type="main")]
    assert len(turns) == 2  # one-step: one call each
    for turn in turns:
        assert turn.request["tool_choice"] == "required"
        assert turn.response_text.startswith('<tool_call>{"name": "')
        schema = sampled_schema(turn.request)
        assert schema is not None
        item = TrainItem(0, "", list(turn.prompt_ids), list(turn.response_ids),
                         list(turn.logprobs), 1.0, 0.0, False, None, "x",
                         json_schema=schema)  # fmt: skip
        with torch.no_grad():
            masked = response_logprobs(
                model, [item], "cpu", allowed=replay.allowed_BTV
            ).logprobs_BT[0]
            plain = response_logprobs(model, [item], "cpu").logprobs_BT[0]
        recorded = torch.tensor(turn.logprobs)
        assert torch.allclose(masked, recorded, atol=1e-3), (masked, recorded)
        assert (recorded - plain).max() > 1e-2  # the mask mattered somewhere


def test_validation_scores_the_served_version_once_and_trains_on_nothing(engine: Any) -> None:
    """Two validation tasks answered greedily through the endpoint: the served version gets
    one score, a second check while it is still served asks nothing, and the episodes are
    recorded as never trained."""
    store = engine.engine.store
    tasks = [t for t in make_env("toolcall").tasks() if t.family == "calc_one"][:2]
    cfg = RolloutSettings(max_tokens=24, max_steps=1, temperature=0.0)
    client = EngineClient(engine.base)

    def greedy_for(seed: int) -> EndpointPolicy:
        return EndpointPolicy(base_url=engine.url, env_name="toolcall", max_tokens=24,
                              temperature=0.0, seed=seed)  # fmt: skip

    before = {e.session_id for e in store.list_episodes(env="toolcall")}
    validation = Validation(tasks)
    try:
        first = check_validation(validation, "toolcall", client, greedy_for, cfg)
        again = check_validation(validation, "toolcall", client, greedy_for, cfg)
        served = served_version(client)
        kept = validation.keep_best(client)
    finally:
        client.close()
    assert first is not None and first[0] == served == "base" and first[1] in (0.0, 0.5, 1.0)
    assert again is None and validation.scores == [first] and kept is None
    new = [e for e in store.list_episodes(env="toolcall") if e.session_id not in before]
    assert len(new) == 2 and not any(e.trained for e in new)
