"""Checkpoint retention (pure rule + file deletion) and the custom loss plugin hook."""

from __future__ import annotations

from pathlib import Path

import torch

from clawrl_app.engine.core.plugins import load_function
from clawrl_app.engine.publishing.retention import prune, to_prune
from clawrl_app.engine.store import CheckpointRow, Store
from clawrl_app.engine.training.losses import LossBatch, LossConfig, LossResult


def row(
    v: int, parent: int | None = None, pinned: bool = False, status: str = "published"
) -> CheckpointRow:
    return CheckpointRow(
        version=f"v{v}",
        path=f"/x/v{v}",
        parent=f"v{parent}" if parent else None,
        step=v,
        created=float(v),
        metrics={},
        sessions=[],
        samples=[],
        status=status,
        published_at=None,
        pinned=pinned,
    )


def test_keeps_last_n_every_kth_pinned_served_and_its_parent() -> None:
    rows = [row(i, i - 1 if i > 1 else None, pinned=(i == 3)) for i in range(1, 13)]
    # keep_last 2 -> v11, v12; every 5th -> v5, v10; pinned v3; served v7 and its parent v6
    assert to_prune(rows, "v7", keep_last=2, keep_every=5) == ["v1", "v2", "v4", "v8", "v9"]
    assert to_prune(rows, "base", keep_last=0, keep_every=0) == [
        r.version for r in rows if r.version != "v3"
    ]
    already = [row(1, status="pruned"), row(2, 1)]
    assert to_prune(already, "v2", keep_last=1, keep_every=0) == []


def test_prune_deletes_folders_and_marks_rows(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite3") as store:
        for i in (1, 2, 3):
            d = tmp_path / f"adapter_{i:06d}"
            d.mkdir()
            (d / "adapter_model.safetensors").write_bytes(b"x")
            store.register_checkpoint(f"v{i}", d, f"v{i - 1}" if i > 1 else None, i, {}, [], [])
        assert prune(store, "v3", keep_last=1, keep_every=0) == ["v1"]  # v2 is v3's parent
        assert not (tmp_path / "adapter_000001").exists() and (tmp_path / "adapter_000002").exists()
        assert store.get_checkpoint("v1").status == "pruned"  # type: ignore[union-attr]


def test_custom_loss_plugin_has_the_objective_signature(tmp_path: Path) -> None:
    f = tmp_path / "my_loss.py"
    f.write_text(
        "from clawrl_app.engine.training.losses import LossResult\n"
        "def loss(batch, cfg, adv_B):\n"
        "    l = -(batch.logprobs_BT * batch.mask_BT).sum() / batch.mask_BT.sum()\n"
        "    return LossResult(l, {'pg_loss': float(l.detach())})\n"
    )
    fn = load_function(f, "loss")
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    batch = LossBatch(
        logprobs_BT=lp,
        old_logprobs_BT=lp.detach(),
        mask_BT=torch.ones(1, 2),
        rewards_B=torch.ones(1),
        has_reward_B=torch.ones(1, dtype=torch.bool),
        teacher_logprobs_BT=torch.zeros(1, 2),
        has_teacher_B=torch.zeros(1, dtype=torch.bool),
    )
    out = fn(batch, LossConfig(), torch.ones(1))
    assert isinstance(out, LossResult) and float(out.loss) == 1.5
    out.loss.backward()
    assert lp.grad is not None and torch.allclose(lp.grad, torch.tensor([[-0.5, -0.5]]))
