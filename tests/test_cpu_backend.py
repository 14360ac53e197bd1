"""Which backend serves without a GPU: llama.cpp where installed and the model is a GGUF,
torch otherwise or when asked; clear errors when llama.cpp is asked for and cannot serve."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrl_app.cpu_backend import TORCH_LINE, with_cpu_backend
from clawrl_app.engine.backends.setup import canary_tolerance
from clawrl_app.engine.training.config import tis_cap
from clawrl_app.hardware import PlanError, plan
from tests.test_hardware import fake_inventory, model, settings

GGUF = Path("/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def cpu_plan(**env: str):  # type: ignore[no-untyped-def]
    return plan(fake_inventory(0), model("0.1B"), settings(**env))


def test_auto_takes_llamacpp_when_installed_and_the_model_is_a_gguf() -> None:
    base = cpu_plan()
    assert base.backend == "torch" and base.merge_lora and TORCH_LINE in base.reasons
    p = with_cpu_backend(base, "auto", installed=True, gguf=GGUF)
    assert p.backend == "llamacpp" and not p.merge_lora
    assert TORCH_LINE not in p.reasons and any("llama.cpp serves" in r for r in p.reasons)
    assert not any(r.startswith("LoRA versions are served as merged") for r in p.reasons)
    assert all(m.role != "versions" for m in p.memory)  # merged copies are not made
    assert p.prefix_cache_mb == base.prefix_cache_mb > 0


@pytest.mark.parametrize(
    ("installed", "gguf", "why"),
    [(False, GGUF, "pip install llama-cpp-python"), (True, None, "no GGUF")],
)
def test_auto_keeps_torch_and_says_why(installed: bool, gguf: Path | None, why: str) -> None:
    p = with_cpu_backend(cpu_plan(), "auto", installed, gguf)
    assert p.backend == "torch" and any(why in r for r in p.reasons)


def test_torch_when_asked_and_llamacpp_refusals() -> None:
    assert with_cpu_backend(cpu_plan(), "torch", True, GGUF).backend == "torch"
    with pytest.raises(PlanError, match="llama-cpp-python is missing"):
        with_cpu_backend(cpu_plan(), "llamacpp", False, GGUF)
    with pytest.raises(PlanError, match=r"\.gguf file"):
        with_cpu_backend(cpu_plan(), "llamacpp", True, None)
    gpu = plan(fake_inventory(1), model("8B"), settings())
    assert with_cpu_backend(gpu, "auto", True, GGUF) == gpu  # a GPU plan is left alone
    with pytest.raises(PlanError, match="CPU only"):
        with_cpu_backend(gpu, "llamacpp", True, GGUF)


def test_canary_tolerance_and_importance_weights_follow_the_backend() -> None:
    s = settings()
    llama = with_cpu_backend(cpu_plan(), "auto", True, GGUF)
    assert canary_tolerance(cpu_plan(), s) == 1e-3
    assert canary_tolerance(llama, s) == 0.1
    assert canary_tolerance(llama, settings(CLAWRL_HARDWARE__LLAMACPP_WEIGHTS="gguf")) == 1.5
    assert tis_cap("auto", 2.0, "llamacpp") == 2.0 and tis_cap("auto", 2.0, "torch") == 0.0
    assert tis_cap("tis", 3.0, "torch") == 3.0 and tis_cap("off", 2.0, "llamacpp") == 0.0
