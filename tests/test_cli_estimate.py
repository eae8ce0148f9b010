"""`zerolab estimate` as a learner runs it: a subprocess, its output, its exit status."""
import json
import subprocess
import sys

import pytest

from zerolab.engine.memory import combinations


def zerolab(*args):
    return subprocess.run([sys.executable, "-m", "zerolab", *args], capture_output=True, text=True, timeout=120)


def test_table_lists_every_stage_and_offload():
    result = zerolab("estimate", "--params", "13B", "--gpus-per-node", "8")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line[:5].strip().isdigit()]
    assert len(rows) == len(combinations())
    assert "48.75 GB" in result.stdout  # paper P_os+g for 13B on 8 GPUs: 2 + 14/8 bytes per parameter


def test_json_rows_match_deepspeed_estimator():
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    result = zerolab("estimate", "--params", "7.5e9", "--gpus-per-node", "4", "--nodes", "2", "--stage", "2",
                     "--offload-optimizer", "cpu", "--accounting", "deepspeed", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    for key in ("stage", "offload_optimizer", "offload_param", "precision", "accounting", "gpu_bytes", "cpu_bytes",
                "breakdown"):
        assert key in row
    cpu, gpu = estimate_zero2_model_states_mem_needs(7_500_000_000, 4, 2, True)
    assert (row["gpu_bytes"], row["cpu_bytes"]) == (gpu, cpu)


def test_bf16_master_weights_and_moments_halve_the_optimizer_state():
    """--master bf16 --moments bf16 (DeepSpeed's bf16_master_weights_and_grads and bf16_optimizer_states): 2 + 4
    bytes of master and moments per parameter instead of 4 + 8 (tests/test_run_bf16_master.py measures them)."""
    result = zerolab("estimate", "--params", "13B", "--gpus-per-node", "8", "--precision", "bf16", "--stage", "2",
                     "--master", "bf16", "--moments", "bf16", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    params = 13 * 10**9
    assert row["gpu_bytes"] == 2 * params + (2 + 2 + 4) * params // 8
    assert (row["master"], row["moments"]) == ("bf16", "bf16")
    listed = zerolab("estimate", "--params", "13B", "--gpus-per-node", "8", "--precision", "bf16", "--master", "bf16")
    assert listed.returncode == 0 and "bf16 master weights, fp32 Adam moments" in listed.stdout, listed.stderr
    assert [line for line in listed.stdout.splitlines() if line[:5].strip() == "0"] == []  # no stage 0 row


def test_muon_keeps_one_momentum_for_the_matrices_it_steps():
    """--optimizer muon (DeepSpeed's Muon): 4 bytes of fp32 master weight per parameter, 2 of bf16 momentum for the
    6.5B parameters Muon steps and Adam's 8 for the other 0.5B; 7B on 8 GPUs at stage 3, everything partitioned:
    (2 + 2 + 4) x 7e9 / 8 + (2 x 6.5e9 + 8 x 0.5e9) / 8 = 9.125 GB (tests/test_muon_measured.py measures the terms)."""
    result = zerolab("estimate", "--params", "7B", "--gpus-per-node", "8", "--precision", "bf16", "--stage", "3",
                     "--optimizer", "muon", "--muon-params", "6.5B", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["gpu_bytes"] == 9_125_000_000 and (row["optimizer"], row["muon_params"]) == ("muon", 6_500_000_000)
    listed = zerolab("estimate", "--params", "7B", "--gpus-per-node", "8", "--precision", "bf16", "--optimizer", "muon",
                     "--muon-params", "6.5B")
    assert listed.returncode == 0 and "Muon for 6.5B of them, Adam for the rest" in listed.stdout, listed.stderr
    stages = [line.split()[0] for line in listed.stdout.splitlines() if line[:5].strip().isdigit()]
    assert stages == ["1", "2", "3"], listed.stdout  # no stage 0 and no offload: not measured with Muon


@pytest.mark.parametrize("args, needle", [
    (["--params", "7B", "--optimizer", "muon", "--precision", "bf16"], "--optimizer muon needs --muon-params"),
    (["--params", "7B", "--muon-params", "6B"], "--muon-params goes with --optimizer muon"),
    (["--params", "7B", "--optimizer", "muon", "--muon-params", "8B", "--precision", "bf16"], "from 0 to params"),
    (["--params", "7B", "--optimizer", "muon", "--muon-params", "6B", "--precision", "bf16", "--stage", "2",
      "--offload-optimizer", "cpu"], "without offload"),
    (["--params", "13Q"], "--params"),
    (["--params", "13B", "--gpus-per-node", "x"], "not a whole number"),
    (["--params", "13B", "--stage", "2", "--offload-param", "cpu"], "offload_param needs stage 3"),
    (["--params", "13B", "--stage", "2", "--moments", "bf16"], "bf16 moments need bf16 master weights"),
    (["--params", "13B", "--stage", "2", "--master", "bf16"], "need bf16 training"),
    (["--params", "13B", "--offload-optimizer", "cpu"], "need --stage"),
    (["--params", "-5"], "--params"),
    (["--gpus-per-node", "8"], "--params"),
])
def test_bad_input_gets_one_clear_line(args, needle):
    result = zerolab("estimate", *args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("zerolab: error:")]
    assert len(errors) == 1


def test_help_teaches():
    result = zerolab("estimate", "--help")
    assert result.returncode == 0
    assert "paper" in result.stdout and "deepspeed" in result.stdout and "examples:" in result.stdout
    top = zerolab("--help")
    assert "estimate" in top.stdout and "check" in top.stdout


def test_estimate_needs_no_torch_and_no_deepspeed():
    probe = ("import sys; from zerolab.cli.main import main; main(['estimate', '--params', '13B', '--json']);"
             "heavy = [m for m in ('torch', 'deepspeed') if m in sys.modules]; "
             "print('HEAVY', heavy, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stderr
