"""Lesson 06's claims about DeepSpeed 0.19.8 and torch 2.13 (autograder/claims/06_predict_then_measure.toml), checked
on the libraries.

- Probes, in this process: what DeepSpeed's CPU accelerator supports and where its "device" is, and where CPU Adam
  comes from the first time an offloaded run needs it (compiled by torch's cpp_extension into the extensions cache).
- One run on 2 gloo ranks (tests/claim_runs_06.py, the module fixture ``ranks``): DeepSpeed started from the
  environment alone, with and without LOCAL_RANK, then ZeRO engines (stages 1 and 2, stage 2 with optimizer
  offload, stage 3; bf16, 2 micro-steps a step) watched from their own tensors after every backward and step.

Lesson 06's other claims are checked where the runs that show them are: tests/test_zero_terms_measured.py,
tests/test_traffic_measured.py, tests/test_run_measure.py, tests/test_claim_probes.py and the checks of lessons 01
and 02 (tests/test_claims_01.py, tests/test_claims_02.py).
"""
from pathlib import Path

import pytest
import torch

from conftest import probe_launcher
from leftovers import ranks_left

RANKS = 2


@pytest.fixture(scope="module")
def ranks():
    """What each of the 2 ranks recorded (tests/claim_runs_06.py), in rank order."""
    from zerolab.handmade.core import harness

    with probe_launcher():
        results = harness.run({"kind": "claim_runs_06:engines", "preimport_deepspeed": True}, RANKS, timeout=300,
                              progress=False)
    assert not ranks_left(), "a rank outlived its run"
    return results


def test_the_cpu_accelerator_takes_bf16_always_and_fp16_only_with_onednn_kernels(monkeypatch):
    """Claim cpu-accelerator-bf16-always-fp16-with-onednn (lesson 06, section 1): DeepSpeed's CPU accelerator
    reports bf16 supported on every CPU and fp16 only where torch's oneDNN has fp16 kernels."""
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    accelerator = CPU_Accelerator()
    for onednn_fp16 in (False, True):
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", lambda: onednn_fp16)
        assert accelerator.is_bf16_supported() is True and torch.bfloat16 in accelerator.supported_dtypes()
        assert bool(accelerator.is_fp16_supported()) is onednn_fp16
        assert (torch.float16 in accelerator.supported_dtypes()) is onednn_fp16


def test_the_cpu_accelerators_device_is_host_memory():
    """Claim cpu-accelerator-device-is-host-memory (lesson 06, section 6): on CPU ranks DeepSpeed's accelerator
    device is the host itself: its device name is "cpu" and a host tensor counts as on the accelerator, so a copy
    to a host buffer stays in the same memory."""
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    accelerator = CPU_Accelerator()
    assert accelerator.device_name() == accelerator.current_device_name() == "cpu"
    on_device = torch.empty(8, device=accelerator.current_device_name())
    assert on_device.device == torch.device("cpu") and accelerator.on_accelerator(torch.empty(8))


def test_cpu_adam_is_compiled_on_first_use_into_torchs_extension_folder(monkeypatch, tmp_path):
    """Claim cpu-adam-compiled-on-first-use (lesson 06, section 4): pip's DeepSpeed ships CPU Adam as C++ source
    (no prebuilt op), so the first DeepSpeedCPUAdam has torch's cpp_extension compile it, into
    $TORCH_EXTENSIONS_DIR/cpu_adam when that is set, else under ~/.cache/torch_extensions."""
    import functools

    import cpuinfo
    import deepspeed.git_version_info as installed
    import torch.utils.cpp_extension as cpp
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from deepspeed.ops.op_builder.builder import OpBuilder

    class Compiling(Exception):
        """Raised where torch would compile."""

    asked = []

    def load(name, sources, **kwargs):
        asked.append({"name": name, "sources": sources, "folder": Path(cpp._get_build_directory(name, False))})
        raise Compiling

    assert not installed.installed_ops.get("cpu_adam")
    monkeypatch.setattr(OpBuilder, "_loaded_ops", {})  # as in a fresh process
    monkeypatch.setattr(cpp, "load", load)
    monkeypatch.setattr(cpuinfo, "get_cpu_info", functools.cache(cpuinfo.get_cpu_info))  # 1 s of subprocesses a call
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for folder in (tmp_path / "venv_ops", None):
        if folder:
            monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(folder))
        else:
            monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
        with pytest.raises(RuntimeError, match="requires the cpu_adam op") as failed:
            DeepSpeedCPUAdam([torch.nn.Parameter(torch.zeros(4))])
        assert isinstance(failed.value.__cause__, Compiling)
        build = asked.pop()
        assert build["name"] == "cpu_adam" and {Path(s).name for s in build["sources"]} >= {"cpu_adam.cpp"}
        if folder:
            assert build["folder"] == folder / "cpu_adam"
        else:
            assert build["folder"].parent.parent == (tmp_path / ".cache" / "torch_extensions").resolve()


def test_deepspeed_starts_from_five_environment_variables_and_without_local_rank_looks_for_mpi(ranks):
    """Claim deepspeed-starts-from-five-environment-variables (lesson 06, section 4 and summary): in processes
    no launcher started, deepspeed.init_distributed starts torch.distributed from RANK, LOCAL_RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT; without LOCAL_RANK (the other four set) it turns to MPI discovery instead."""
    for index, rank in enumerate(ranks):
        started = rank["environment"]
        assert started["without_local_rank"] == "MPI discovery" and started["discovery_calls"] == 1, started
        assert started["rank"] == started["env_rank"] == index and started["world_size"] == RANKS, started
        assert started["sum_of_ranks"] == sum(range(RANKS))


def test_stage_1_runs_stage_2s_optimizer_and_keeps_only_its_partition_at_the_boundary(ranks):
    """Claim stage1-runs-stage2-code-keeps-its-partition (lesson 06, "What the measurement teaches"): DeepSpeed's
    stage 1 is the stage 2 optimizer class with gradient partitioning off; after the backward that ends an
    accumulation window it holds no full gradient, only its 16-bit partition (Ψ/N), as stage 2 does then."""
    for rank in ranks:
        stage1, stage2 = rank["stage1"], rank["stage2"]
        assert stage1["optimizer"] == stage2["optimizer"] == "DeepSpeedZeroOptimizer"
        assert (stage1["partition_gradients"], stage2["partition_gradients"]) == (False, True)
        share = stage1["params"] // RANKS
        for boundary in (1, 3):
            for record in (stage1, stage2):
                held = record["after_backward"][boundary]
                assert (held["module"], held["partition_16bit"]) == (0, share), held
                assert held["partition_16bit_dtypes"] == ["torch.bfloat16"], held


def test_the_optimizer_side_is_twelve_bytes_per_element_of_the_ranks_partition(ranks):
    """Claim optimizer-side-is-the-papers-to-the-byte (lesson 06, "What the measurement teaches"): at stages 1, 2
    (also with optimizer offload) and 3 each rank holds exactly 4 bytes of fp32 master weight and 8 of fp32 Adam
    moments (two per parameter) per element of its partition, which is Ψ/N for a Ψ that needs no padding: 12Ψ/N
    bytes, the paper's figure to the byte."""
    for rank in ranks:
        for name in ("stage1", "stage2", "stage2_offload", "stage3"):
            side, share = rank[name]["optimizer_side"], rank[name]["params"] // RANKS
            assert rank[name]["params"] % (2 * RANKS) == 0
            assert side["partition"] == share, (name, side)
            assert (side["master_bytes"], side["moment_bytes"]) == (4 * share, 8 * share), (name, side)
            assert side["master_dtypes"] == side["moment_dtypes"] == ["torch.float32"], (name, side)
            assert side["moments_per_parameter"] == [2], (name, side)


def test_under_offload_the_fp32_gradient_partition_stays_and_no_16_bit_partition_is_kept(ranks):
    """Claim offload-fp32-gradient-partition-resident (lesson 06, "What the measurement teaches"): under optimizer
    offload the ZeRO-2 optimizer holds the rank's gradient partition as fp32 (Ψ/N elements) after every backward
    and every step, and never a 16-bit gradient partition; with accumulation it adds 16-bit host accumulation
    buffers. Without offload no fp32 gradient is held after backward or step."""
    for rank in ranks:
        offload, plain = rank["stage2_offload"], rank["stage2"]
        share = offload["params"] // RANKS
        for held in offload["after_backward"] + offload["after_step"]:
            assert (held["fp32"], held["fp32_dtypes"]) == (share, ["torch.float32"]), held
            assert held["partition_16bit"] == 0 and held["module"] == 0, held
        assert offload["after_backward"][0]["host_accumulation_dtypes"] == ["torch.bfloat16"]
        assert all(held["fp32"] == 0 for held in plain["after_backward"] + plain["after_step"])
