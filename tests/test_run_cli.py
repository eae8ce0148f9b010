"""`zerolab run`: bad input is one line and exit 2; --json prints the documented shape from a real run."""
import json
import subprocess
import sys

import pytest

from zerolab.run.diagnose import CPU_ADAM_FIX, MEMORY_FIX, explain_failure


def zerolab(*args):
    return subprocess.run([sys.executable, "-m", "zerolab", "run", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, words", [
    (["--stage", "1", "--offload-param", "cpu"], "--offload-param needs --stage 3"),
    (["--stage", "0", "--offload-optimizer", "cpu"], "needs --stage 1, 2 or 3"),
    (["--stage", "5"], "invalid choice"),
    (["--ranks", "0"], "--ranks must be >= 1"),
    (["--config", "/no/such/file.json"], "cannot read --config"),
    (["--config", "x.json", "--stage", "2"], "do not mix"),
    (["--config", "x.json", "--master", "bf16"], "do not mix"),
    (["--stage", "2", "--moments", "bf16"], "--moments bf16 needs --master bf16"),
    (["--stage", "0", "--master", "bf16"], "needs --stage 1, 2 or 3"),
    (["--stage", "2", "--master", "bf16", "--precision", "fp32"], "needs --precision bf16"),
    # what deepspeed.initialize refuses, said before a rank starts (zerolab check's rule, DeepSpeed's words)
    (["--stage", "2", "--master", "bf16"], "Master weights feature requires ZeRO Offload with DeepSpeedCPUAdam"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    done = zerolab(*args)
    assert done.returncode == 2
    message = [line for line in done.stderr.splitlines() if line.startswith("zerolab: error:")]
    assert len(message) == 1 and words in message[0], done.stderr
    assert "Traceback" not in done.stderr


def test_a_config_file_hugging_face_would_fill_is_rejected(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": "auto", "zero_optimization": {"stage": 2}}))
    done = zerolab("--config", str(path))
    assert done.returncode == 2 and "train_batch_size is \"auto\"" in done.stderr


def test_help_teaches_the_components():
    done = zerolab("--help")
    assert done.returncode == 0
    for words in ("fp32 master weights", "Adam states", "CPU Adam", "--offload-optimizer"):
        assert words in done.stdout


@pytest.mark.slow
def test_json_output_from_a_real_run(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1},
                                "bf16": {"enabled": True},
                                "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "torch_adam": True}}}))
    done = zerolab("--config", str(path), "--ranks", "2", "--steps", "2", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["config"]["zero_optimization"] == {"stage": 1}
    assert [rank["rank"] for rank in result["ranks"]] == [0, 1]
    for rank in result["ranks"]:
        assert set(rank) >= {"rank", "param_bytes", "grad_bytes", "optimizer_state_bytes", "master_weight_bytes",
                             "peak_memory_bytes", "step_time_s"}
        assert rank["optimizer_state_bytes"] == result["predicted"]["optimizer_state_bytes"]
    assert len(result["loss"]) == 2


def test_failures_name_the_knob_to_turn():
    cpu_adam = {"type": "RuntimeError", "message": "DeepSpeedCPUAdam requires the cpu_adam op, which failed to build/load.",
                "traceback": ""}
    assert CPU_ADAM_FIX in explain_failure(0, cpu_adam, 1, "")
    assert "TORCH_EXTENSIONS_DIR" in explain_failure(0, cpu_adam, 1, "")
    assert MEMORY_FIX in explain_failure(1, None, -9, "")
    oom = {"type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2.00 GiB", "traceback": ""}
    assert "offload_optimizer" in explain_failure(0, oom, 1, "")
    ninja = {"type": "RuntimeError", "message": "Unable to JIT load the fused_adam op due to ninja not being installed.",
             "traceback": ""}
    assert "ninja" in explain_failure(0, ninja, 1, "")


@pytest.mark.slow
def test_bf16_master_weights_and_moments_from_the_flags(tmp_path):
    """--master bf16 --moments bf16 trains, and each rank's master weights and Adam states are what the estimate
    says for bf16 (2 + 4 bytes per parameter of its partition), measured from the engine's own tensors."""
    done = zerolab("--stage", "1", "--master", "bf16", "--moments", "bf16", "--ranks", "2", "--steps", "2", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["config"]["bf16"] == {"enabled": True, "bf16_master_weights_and_grads": True,
                                        "bf16_optimizer_states": True}
    for rank in result["ranks"]:
        assert rank["master_weight_bytes"] == result["predicted"]["master_weight_bytes"]
        assert rank["optimizer_state_bytes"] == result["predicted"]["optimizer_state_bytes"]
    fp32 = zerolab("--stage", "1", "--ranks", "2", "--steps", "1", "--json")
    assert fp32.returncode == 0, fp32.stderr
    # half the bytes: bf16 against fp32, for the same partition
    assert 2 * result["predicted"]["master_weight_bytes"] == json.loads(fp32.stdout)["predicted"]["master_weight_bytes"]
