"""`zerolab check | explain | diff` as a user runs them: exit codes, the JSON shape, one-line errors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIGS = Path(__file__).parent / "configs"
SEED = str(CONFIGS / "seed_zero2_offload.json")
ZERO3 = str(CONFIGS / "zero3_bf16.json")
TRAPS = str(CONFIGS / "typo_and_traps.json")


def zerolab(*args):
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}  # as a user runs it, no GPU, no setting
    return subprocess.run([sys.executable, "-m", "zerolab", *args], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).parent.parent, timeout=120)


def test_check_seed_config_passes_on_one_gpu_and_fails_on_eight():
    one = zerolab("check", SEED, "--json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout) == {"valid": True, "errors": [], "warnings": []}
    eight = zerolab("check", SEED, "--world-size", "8", "--json")
    assert eight.returncode == 1
    result = json.loads(eight.stdout)
    assert set(result) == {"valid", "errors", "warnings"} and result["valid"] is False
    assert [e["path"] for e in result["errors"]] == ["train_batch_size"]
    assert all(set(e) == {"path", "message"} for e in result["errors"] + result["warnings"])


def test_check_human_output_one_line_per_finding_then_verdict():
    result = zerolab("check", TRAPS)
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("invalid: 2 errors, 2 warnings")
    assert any(line.startswith("warning zero_optimisation: ") for line in lines)
    assert any(line.startswith("error   train_batch_size: ") for line in lines)
    assert result.stderr == ""


def test_warnings_alone_exit_zero(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}))
    result = zerolab("check", str(path), "--json")
    assert result.returncode == 0
    assert [w["path"] for w in json.loads(result.stdout)["warnings"]] == ["zero_optimization.offload_param"]


@pytest.mark.parametrize("args, words", [
    (["check", str(CONFIGS / "invalid_json.json")], "invalid JSON at line 3 column 28"),
    (["check", "no_such_file.json"], "no_such_file.json: does not exist"),
    (["check", SEED, "--world-size", "eight"], "--world-size: 'eight' is not a whole number"),
    (["check", SEED, "--world-size", "0"], "--world-size must be >= 1"),
    (["explain", SEED, "--params", "13Q", "--gpus-per-node", "8"], "--params: '13Q' is not a parameter count"),
    (["diff", SEED, str(CONFIGS / "invalid_json.json"), "--params", "7B", "--gpus-per-node", "8"], "invalid JSON"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_2(args, words):
    result = zerolab(*args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_wrong_type_in_a_json_array_config_is_one_line(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    result = zerolab("check", str(path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "JSON object" in result.stderr


def test_explain_json_has_every_set_field_findings_and_effect():
    result = zerolab("explain", SEED, "--params", "7B", "--gpus-per-node", "1", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    paths = [f["path"] for f in data["fields"]]
    assert "zero_optimization.offload_optimizer.pin_memory" in paths and "optimizer.params.betas" in paths
    assert len(paths) == 15
    assert data["check"]["valid"] is True
    assert data["effect"]["settings"]["stage"] == 2 and data["effect"]["memory"]["gpu_bytes"] > 0


def test_explain_text_shows_defaults_and_effect():
    result = zerolab("explain", SEED, "--params", "7B", "--gpus-per-node", "8")
    assert result.returncode == 1  # the seed's batch of 32 is wrong for 8 GPUs
    assert "zero_optimization.stage = 2 (default 0): " in result.stdout
    assert "GPU memory per GPU (deepspeed)" in result.stdout


def test_diff_json_and_text():
    result = zerolab("diff", SEED, ZERO3, "--params", "7B", "--gpus-per-node", "8", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"path": "zero_optimization.stage", "a": 2, "b": 3} in data["changed"]
    assert data["effect_a"]["settings"]["stage"] == 2 and data["effect_b"]["settings"]["stage"] == 3
    text = zerolab("diff", SEED, ZERO3, "--params", "7B", "--gpus-per-node", "8").stdout
    assert "zero_optimization.stage: 2 -> 3" in text and "<- changed" in text


@pytest.mark.parametrize("command", ["check", "explain", "diff"])
def test_help_teaches_with_examples(command):
    result = zerolab(command, "--help")
    assert result.returncode == 0 and "examples:" in result.stdout and f"zerolab {command} " in result.stdout
