"""SGLang launch command, readiness wait and shutdown.

Contract tests: SGLang needs a GPU, so these run against a stand-in that implements SGLang
0.5.23's routes and payloads (tests/sglang_standin.py).
"""

# ruff: noqa: F403, F405
from __future__ import annotations

from tests.sglang_helpers import *


def test_launch_command_spells_every_flag_in_full() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    The argv names `python -m sglang.launch_server` and every flag in full; the env pins the GPUs.
    """
    argv, env = build_launch_command(
        "/opt/sglang/bin/python", "/models/qwen", "clawrl", 31000,
        gpus=(2, 3), mem_fraction=0.55, context_length=32768, lora_rank=16,
        lora_targets=DEFAULT_LORA_TARGETS, max_loras_per_batch=4, api_key=KEY,
        colocated=False, nccl_port=31001, tool_call_parser="qwen",
        base_env={"PATH": "/bin", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    )  # fmt: skip
    assert argv[:3] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
    assert {a for a in argv if a.startswith("-")} == {
        "-m", "--model-path", "--served-model-name", "--host", "--port", "--tp-size",
        "--dp-size", "--nccl-port", "--skip-server-warmup", "--enable-lora",
        "--max-lora-rank", "--lora-target-modules", "--max-loras-per-batch",
        "--max-loaded-loras", "--mem-fraction-static", "--context-length", "--api-key",
        "--tool-call-parser",
    }  # fmt: skip

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--model-path") == "/models/qwen"
    assert value("--served-model-name") == "clawrl"
    assert value("--host") == "127.0.0.1"
    assert value("--port") == "31000"
    assert value("--tp-size") == "2"
    assert value("--dp-size") == "1"
    assert value("--nccl-port") == "31001"
    assert value("--mem-fraction-static") == "0.55"
    assert value("--context-length") == "32768"
    assert value("--max-lora-rank") == "16"
    assert value("--max-loras-per-batch") == "4"
    assert int(value("--max-loaded-loras")) >= 4
    assert value("--api-key") == KEY
    assert value("--tool-call-parser") == "qwen"
    start = argv.index("--lora-target-modules") + 1
    assert argv[start : start + 7] == list(DEFAULT_LORA_TARGETS)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    # allow_abbrev=False: the stand-in's parser accepts only full spellings, as SGLang does.
    args = parse_args(argv[3:])
    assert args.lora_target_modules == list(DEFAULT_LORA_TARGETS)


def test_deterministic_inference_is_a_launch_flag() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    `hardware.sglang_deterministic` adds --enable-deterministic-inference (the stand-in's
    parser, which spells SGLang's flags, accepts it); off, the argv does not carry it."""
    common = dict(
        gpus=(0,), mem_fraction=None, context_length=None, lora_rank=8,
        lora_targets=DEFAULT_LORA_TARGETS, max_loras_per_batch=3, api_key=None,
        colocated=False, nccl_port=31001, base_env={},
    )  # fmt: skip
    off, _ = build_launch_command("py", "/m", "clawrl", 31000, **common)  # type: ignore[arg-type]
    on, _ = build_launch_command("py", "/m", "clawrl", 31000, deterministic=True, **common)  # type: ignore[arg-type]
    assert "--enable-deterministic-inference" not in off
    assert on == [*off, "--enable-deterministic-inference"]
    assert parse_args(on[3:]).enable_deterministic_inference is True


def test_launch_command_colocated_and_optional_flags() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Colocated adds the memory saver and drops PYTORCH_CUDA_ALLOC_CONF; unset options add no flag.
    """
    argv, env = build_launch_command(
        "python", "m", "clawrl", 30001, gpus=(0,), mem_fraction=None, context_length=None,
        lora_rank=8, lora_targets=("q_proj", "v_proj"), max_loras_per_batch=3, api_key=None,
        colocated=True, nccl_port=30002,
        base_env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HOME": "/h"},
    )  # fmt: skip
    assert "--enable-memory-saver" in argv and "--enable-weights-cpu-backup" in argv
    for flag in ("--mem-fraction-static", "--context-length", "--api-key", "--tool-call-parser"):
        assert flag not in argv
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["HOME"] == "/h"
    with pytest.raises(ValueError):
        build_launch_command(
            "python", "m", "c", 1, gpus=(), mem_fraction=None, context_length=None,
            lora_rank=8, lora_targets=("q_proj",), max_loras_per_batch=2, api_key=None,
            colocated=False, nccl_port=2,
        )  # fmt: skip


async def test_server_launches_waits_and_stops(caplog: pytest.LogCaptureFixture) -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    SGLangServer runs the stand-in as its child, forwards its log, waits for
    /health_generate, and stop() ends the child.
    """
    port = free_port()
    argv, env = build_launch_command(
        sys.executable, "standin/model", "clawrl", port, gpus=(0,), mem_fraction=0.5,
        context_length=4096, lora_rank=8, lora_targets=DEFAULT_LORA_TARGETS,
        max_loras_per_batch=3, api_key=KEY, colocated=False, nccl_port=free_port(),
        base_env=os.environ,
    )  # fmt: skip
    argv = [sys.executable, STANDIN, *argv[3:], "--startup-delay", "0.5"]
    url = f"http://127.0.0.1:{port}"
    server = SGLangServer(argv, env, base_url=url, ready_timeout_s=20, poll_interval_s=0.2)
    backend = SGLangBackend(
        url, api_key=KEY, model_name="clawrl", context_length=4096, eos_token_ids=(EOS,),
        server=server,
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="clawrl.sglang"):
        await backend.start()
        pid = server.pid
        assert pid is not None
        assert backend.model_info["model_path"] == "standin/model"
        tokens, finished = await collect(backend.generate(request("r-child", 3)))
        assert [t.token_id for t in tokens] == expected(3)[0]
        await backend.stop()
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    messages = [r.getMessage() for r in caplog.records if r.name == "clawrl.sglang"]
    assert any("stand-in SGLang loading standin/model" in m for m in messages)
    assert not any(KEY in m for m in messages), "the API key must not reach the log"


async def test_readiness_timeout_names_the_last_log_lines() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A child that never answers /health_generate fails start() with its last lines.
    """
    code = "import time; print('Loading safetensors shards 1/2', flush=True); time.sleep(60)"
    server = SGLangServer(
        [sys.executable, "-c", code], base_url=f"http://127.0.0.1:{free_port()}",
        ready_timeout_s=1.0, poll_interval_s=0.1, stop_grace_s=2,
    )  # fmt: skip
    with pytest.raises(BackendError) as caught:
        await server.start()
    assert str(caught.value).startswith("SGLang did not become ready within 1 s; last log lines:")
    assert "Loading safetensors shards 1/2" in str(caught.value)
    assert server.pid is None


async def test_child_exit_aborts_the_wait_early() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    A child that dies while loading fails start() at once, quoting its output.
    """
    code = (
        "import sys; print('torch.OutOfMemoryError: CUDA out of memory', flush=True); sys.exit(3)"
    )
    server = SGLangServer(
        [sys.executable, "-c", code], base_url=f"http://127.0.0.1:{free_port()}",
        ready_timeout_s=60, poll_interval_s=5,
    )  # fmt: skip
    began = time.monotonic()
    with pytest.raises(BackendError, match="exited with code 3 before it was ready") as caught:
        await server.start()
    assert "CUDA out of memory" in str(caught.value)
    assert time.monotonic() - began < 5


# -- generation -------------------------------------------------------------------------


def test_the_loaded_adapter_limit_covers_everything_the_app_holds() -> None:
    """Contract test: SGLang needs a GPU, so this runs against a stand-in that implements SGLang 0.5.23's routes and payloads.

    Past --max-loaded-loras SGLang evicts the least recently used adapter (reloading it from
    disk later, failing once retention removed it). The app's launch allows the served
    adapter, the draining one, the guard's candidate and the Compare pair: 5, not the
    batch's 3."""
    from clawrl_app.engine.backends.sglang.factory import (
        ADAPTERS_HELD,
        MAX_LOADED_LORAS,
        MAX_LORAS_PER_BATCH,
    )

    assert set(ADAPTERS_HELD) == {"served", "draining", "candidate", "compare pair"}
    assert MAX_LOADED_LORAS == 5 and MAX_LOADED_LORAS >= MAX_LORAS_PER_BATCH
    argv, _ = build_launch_command(
        "py", "/m", "clawrl", 31000, gpus=(0,), mem_fraction=None, context_length=None,
        lora_rank=8, lora_targets=DEFAULT_LORA_TARGETS, max_loras_per_batch=MAX_LORAS_PER_BATCH,
        api_key=None, colocated=False, nccl_port=31001, max_loaded_loras=MAX_LOADED_LORAS,
        base_env={},
    )  # fmt: skip
    assert argv[argv.index("--max-loaded-loras") + 1] == "5"
    assert parse_args(argv[3:]).max_loaded_loras == 5
