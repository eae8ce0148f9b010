"""zerolab.sizing.step_time and zerolab.sizing.gpus: what each part of a step costs, over which link, and what overlaps."""
import json
import os
import subprocess
import sys

import pytest

from zerolab.engine import comm
from zerolab.sizing import gpus, host_speed, step_time
from zerolab.engine.deepspeed_traffic import step_traffic

H100 = gpus.preset("h100-80gb")
PSI = 13_000_000_000


def test_presets_name_their_data_sheet_and_the_brief_s_gpus():
    for name in ("a100-40gb", "a100-80gb", "h100-80gb", "h200", "l40s", "4090"):
        gpu = gpus.preset(name)
        assert gpu.memory > 10**10 and gpu.bf16_flops > 1e14 and gpu.pcie > 1e10
        assert "data sheet" in gpu.source or "whitepaper" in gpu.source
    assert gpus.preset("l40s").intra_node == gpus.preset("l40s").pcie  # no NVLink: collectives cross PCIe
    with pytest.raises(ValueError, match="h100-80gb"):
        gpus.preset("h100")


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_collectives_are_deepspeeds_volumes(stage):
    """3 x params per step at every stage with one micro-step (ZeRO-1/2 all-reduce their buckets), as
    zerolab.engine.deepspeed_traffic (checked call for call against real runs) counts a model of 100 equal parameters."""
    world, sizes = 8, [PSI // 100] * 100
    real = step_traffic(sizes, stage, world, precision="bf16")["collectives"]
    big = [c for c in real if c["elements"] > 1000]  # the norm and overflow flags are one element each
    real_volume = sum((2 if c["op"] == "all-reduce" else 1) * c["elements"] for c in big)
    modelled = comm.traffic(sum(sizes), stage, world, precision="bf16", bucket_allreduce=True)
    assert modelled.volume == pytest.approx(real_volume, rel=1e-6)
    assert modelled.volume == pytest.approx(3 * sum(sizes), rel=1e-6)


def test_full_recomputation_costs_a_third_more_compute():
    plain = step_time.step_time(PSI, 3, 8, 1, 1, 4096, H100)
    full = step_time.step_time(PSI, 3, 8, 1, 1, 4096, H100, recompute="full")
    assert full.compute_s / plain.compute_s == pytest.approx(8 / 6)
    assert plain.compute_s == pytest.approx(6 * PSI * 4096 / (989e12 * step_time.MFU))


def test_zero12_parameter_all_gather_waits_and_zero3_gathers_hide_behind_compute():
    zero2 = step_time.step_time(PSI, 2, 8, 1, 1, 4096, H100)
    gather = next(c for c in comm.traffic(PSI, 2, 8, precision="bf16", bucket_allreduce=True).collectives
                  if c.when == "after step")
    assert zero2.exposed_s >= gather.wire_bytes / H100.nvlink  # nothing runs beside the after-step all-gather
    zero3 = step_time.step_time(PSI, 3, 8, 1, 1, 4096, H100)
    assert zero3.collectives_s > zero2.exposed_s and zero3.exposed_s < 0.05 * zero3.collectives_s


def test_nodes_talk_over_the_slower_inter_node_link():
    one = step_time.step_time(PSI, 2, 8, 1, 1, 4096, H100)
    four = step_time.step_time(PSI, 2, 8, 4, 1, 4096, H100, inter_node=12.5e9)
    assert four.link == 12.5e9 and one.link == H100.nvlink
    assert four.exposed_s > one.exposed_s


def test_cpu_adam_time_is_the_nodes_parameters_over_its_throughput_and_is_not_hidden():
    offload = step_time.step_time(PSI, 2, 8, 2, 1, 4096, H100, offload_optimizer="cpu", cpu_adam_params_per_s=1e9)
    assert offload.cpu_adam_s == pytest.approx(PSI / 2 / 1e9)  # 2 nodes: each steps half the model
    assert offload.total_s == pytest.approx(offload.compute_s + offload.exposed_s + offload.cpu_adam_s)
    assert step_time.step_time(PSI, 2, 8, 2, 1, 4096, H100).cpu_adam_s == 0


def test_measured_cpu_adam_is_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROLAB_CACHE_DIR", str(tmp_path))
    assert host_speed.load() is None
    host_speed.save({"params_per_s": 3e8, "measured_at": "then", "machine": "here"})
    from zerolab.sizing.fit import fit
    from zerolab.engine.models import preset

    result = fit(preset("llama2-7b"), 4096, gpus_per_node=8, gpu="h100-80gb")
    assert result.assumptions["cpu_adam_params_per_s"] == 3e8 and "measured" in result.assumptions["cpu_adam_source"]
    row = next(o for o in result.rows if o.offload_optimizer == "cpu" and o.stage == 2)
    assert row.time.cpu_adam_s == pytest.approx(preset("llama2-7b").params() / 3e8)


@pytest.mark.slow
def test_measure_host_times_deepspeeds_cpu_adam(tmp_path):
    env = dict(os.environ, ZEROLAB_CACHE_DIR=str(tmp_path), DS_ACCELERATOR="cpu")
    done = subprocess.run([sys.executable, "-m", "zerolab", "fit", "--measure-host"], capture_output=True, text=True,
                          timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    stored = json.loads((tmp_path / "cpu_adam.json").read_text())
    assert stored["params_per_s"] == pytest.approx(stored["params"] / stored["seconds"])
    assert 1e6 < stored["params_per_s"] < 1e11
    table = subprocess.run([sys.executable, "-m", "zerolab", "fit", "--model", "llama2-7b", "--gpu", "h100-80gb",
                            "--gpus-per-node", "8"], capture_output=True, text=True, timeout=120, env=env).stdout
    assert "measured" in table and f"{stored['params_per_s'] / 1e9:.3g}e9 params/s" in table
