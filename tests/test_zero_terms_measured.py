"""zerolab.engine.zero_terms against real DeepSpeed 0.19.8 engines on 2 CPU ranks (tests/zero_terms_probe.py watches them).

What is checked, each from DeepSpeed's own objects during training: the fp32 gradient partition exists only inside
``step()`` (stages 1, 2 and 3), made there from a flat 16-bit copy of the gradient partition; ZeRO-1/2 hold two
bucket buffers while reducing under overlap_comm and none after backward; ZeRO-3 holds one bucket per dtype even
with overlap_comm; and ZeRO-3's gathered parameters stay within zero_terms' count (which all of the tiny model
reaches with DeepSpeed's defaults); with bf16 master weights the optimizer reads the flat 16-bit gradient copy itself.
"""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from zerolab.engine import zero_terms
from zerolab.run.launch import free_port

pytestmark = pytest.mark.slow
PROBE = Path(__file__).with_name("zero_terms_probe.py")
RANKS = 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("zero_terms")
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONPATH=str(PROBE.parent.parent))
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS}",
               f"--master_port={free_port()}", str(PROBE), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    from tests import zero_terms_probe

    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(RANKS)], zero_terms_probe


@pytest.mark.parametrize("case", ["stage1", "stage2", "stage3"])
def test_fp32_gradient_partition_exists_only_inside_step(ranks, case):
    results, _ = ranks
    for rank in results:
        record = rank[case]
        assert all(group is None for seen in record["after_backward"] for group in seen)
        assert all(group is None for seen in record["after_step"] for group in seen)
        inside = [group for seen in record["in_step"] for group in seen]
        assert inside and all(g["dtype"] == "torch.float32" and g["numel"] == g["size"] for g in inside)
        # its size is the rank's partition: half the parameters on 2 ranks (padding aside)
        assert sum(g["numel"] for g in record["in_step"][-1]) == pytest.approx(record["params"] / RANKS, abs=RANKS)
        # made from a flat 16-bit copy of the gradient partition (zero_terms' flat_grad_copy), once per step
        partition_copies = [f for f in record["flat_in_step"] if f["numel"] == inside[-1]["numel"]]
        assert len(partition_copies) == 3 and all(f["dtype"] == "torch.bfloat16" for f in partition_copies)


@pytest.mark.parametrize("case", ["stage1", "stage2"])
def test_zero12_buckets_double_under_overlap_and_go_before_the_step(ranks, case):
    results, _ = ranks
    for rank in results:
        record = rank[case]
        assert record["buckets_in_backward"] and all(n == [2] for n in record["buckets_in_backward"])
        assert all(n == [0] for n in record["buckets_after_backward"])
    assert zero_terms.bucket_bytes(int(case[-1]), "bf16", 1000, overlap_comm=True) == 2 * 1000 * 2


def test_zero3_keeps_one_bucket_per_dtype_with_overlap_comm(ranks):
    results, probe = ranks
    elements = probe.BUCKET
    assert probe.CASES["stage3"]["zero_optimization"]["overlap_comm"] is True
    for rank in results:
        for seen in rank["stage3"]["stage3_buckets"]:
            assert seen == {"torch.bfloat16": [elements]}
    assert zero_terms.bucket_bytes(3, "bf16", elements, overlap_comm=True) == elements * 2


def test_zero3_gathered_parameters_stay_within_the_count(ranks):
    results, probe = ranks
    live = probe.CASES["stage3_live"]["zero_optimization"]
    kept = max(live["stage3_max_live_parameters"], live["stage3_max_reuse_distance"])
    for rank in results:
        params, largest = rank["stage3"]["params"], rank["stage3"]["largest_param"]
        # DeepSpeed's defaults (1e9 elements) let the whole tiny model be gathered at once: the count says so too
        assert rank["stage3"]["gathered_most"] == params == zero_terms.gathered_params(params, largest)
        counted = zero_terms.gathered_params(params, largest, kept)
        assert counted < params
        assert 0.8 * counted <= rank["stage3_live"]["gathered_most"] <= counted


def test_stage3_defaults_are_deepspeeds():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    defaults = DeepSpeedZeroConfig()
    assert zero_terms.MAX_LIVE_PARAMETERS == defaults.max_live_parameters
    assert zero_terms.MAX_REUSE_DISTANCE == defaults.max_reuse_distance
    assert zero_terms.PREFETCH_BUCKET == defaults.prefetch_bucket_size
    assert zero_terms.SUB_GROUP_SIZE == defaults.sub_group_size


def test_stage1_holds_full_gradients_across_an_accumulation_window(ranks):
    """Claim stage1-full-gradients-until-the-boundary (lesson 06, "Stage 1 gradients"): with overlap_comm off and
    2 micro-steps a step, DeepSpeed's stage 1 keeps every full 16-bit gradient in .grad from the first micro-step's
    backward on, sends nothing inside the window, and reduces and lets them go in the backward of the micro-step
    that ends it: for a moment without accumulation, for the whole window with it."""
    results, _ = ranks
    for rank in results:
        record = rank["stage1_accumulating"]
        psi = record["params"]
        assert record["held_grads_after_backward"] == [psi, 0, psi, 0], record["held_grads_after_backward"]
        assert record["held_grads_after_step"] == [psi, 0, psi, 0], record["held_grads_after_step"]
        inside, boundary = record["collectives"][0::2], record["collectives"][1::2]
        assert inside == [[], []], inside
        assert all(sum(n for op, n in calls if op == "all-reduce" and n > 1) == psi for calls in boundary), boundary


def test_stage1_with_optimizer_offload_keeps_the_fp32_gradient_partition_for_the_cpu_optimizer(ranks):
    """Claim offload-moves-the-gradient-partition-at-stage-1 (lesson 02): ZeRO-Offload at stage 1, not only from
    stage 2 on, keeps the rank's gradient partition as fp32 beside the offloaded optimizer, from backward on."""
    results, _ = ranks
    for rank in results:
        record = rank["stage1_offload"]
        held = [group for seen in record["after_backward"] for group in seen]
        assert held and all(g is not None and g["dtype"] == "torch.float32" for g in held), record["after_backward"]
        assert sum(g["numel"] for g in record["after_backward"][-1]) == pytest.approx(record["params"] / RANKS,
                                                                                     abs=RANKS)


@pytest.mark.parametrize("case", ["stage1", "stage2", "stage2_odd"])
def test_zero12_gradient_buckets_hold_exactly_psi_and_the_padding_travels_in_the_all_gather(ranks, case):
    """Claim zero12-padding-travels-in-the-all-gather (lesson 08, "Alignment"): at stages 1-2 the gradient buckets
    all-reduced in a step hold exactly the model's elements; the flat buffer's padding to a multiple of 2N is
    all-gathered with the parameters (stage2_odd: a Ψ that needs it). The one-element all-reduces are not
    gradients (the gradient norm, the overflow check)."""
    results, _ = ranks
    for rank in results:
        record = rank[case]
        psi = record["params"]
        padded = -(-psi // (2 * RANKS)) * (2 * RANKS)
        assert (padded > psi) == (case == "stage2_odd")
        for calls in record["collectives"]:
            reduced = [n for op, n in calls if op == "all-reduce"]
            assert sum(n for n in reduced if n > 1) == psi, reduced
            assert sum(n for op, n in calls if op == "all-gather") == padded, calls


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_with_bf16_master_weights_the_optimizer_reads_the_flat_16bit_copy_and_no_fp32_gradient_is_made(ranks, stage):
    """bf16.bf16_master_weights_and_grads with bf16_optimizer_states: inside step() the gradient the optimizer reads
    is the flat bf16 copy of the gradient partition itself (``.to(master dtype)`` returns it), so zero_terms counts
    that copy and no fp32 gradient; with fp32 master weights (the control) it is a new fp32 tensor."""
    results, _ = ranks
    for rank in results:
        record = rank[f"stage{stage}_bf16_master"]
        inside = [group for seen in record["in_step"] for group in seen if group]
        assert inside and all(group["dtype"] == "torch.bfloat16" for group in inside)
        assert all(all(seen) for seen in record["reads_the_flat_copy"])
        assert all(group is None for seen in record["after_step"] for group in seen)
        partition = sum(group["numel"] for group in record["in_step"][-1] if group)
        assert partition == pytest.approx(record["params"] / RANKS, abs=RANKS)
        model = SimpleNamespace(params=lambda: record["params"], largest_layer_params=lambda: record["largest_param"])
        step = zero_terms.model_states(model, stage, RANKS, master="bf16").step
        assert "fp32_grads" not in step and step["flat_grad_copy"] == pytest.approx(2 * partition, abs=2 * RANKS)
        control = rank[f"stage{stage}"]
        assert not any(any(seen) for seen in control["reads_the_flat_copy"])
