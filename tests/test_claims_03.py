"""Lesson 03's claims about DeepSpeed 0.19.8 and torch 2.13 (autograder/claims/03_overlap_comm.toml), checked on the
libraries: which collective runs at each stage, when (which micro-step; inside backward or after it; inside step()),
on which stream, in buckets of what size, and what the buckets cost.

- One run on 2 gloo ranks (tests/claim_runs_03.py, the module fixture ``ranks``): torch's DistributedDataParallel
  with and without no_sync(), then DeepSpeed engines at stages 0-3 (2 micro-steps a step) training a 4-layer MLP
  whose parameters all have an even size (no padding on 2 ranks), every torch.distributed collective recorded with
  its size, micro-step, phase and stream. CPU ranks have no streams: the run gives the ZeRO optimizers a named
  stand-in where they create theirs (as on a GPU) and records which one is entered around each collective.
- A probe, in this process: which ZeRO optimizer takes ZeRO++'s settings.

Lesson 03's other claims are checked where other runs show them: tests/test_comm_measured.py,
tests/test_claim_probes.py, tests/test_zero_terms_measured.py, and the checks of lessons 02 and 08
(tests/test_claims_02.py, tests/test_claims_08.py).
"""
import pytest

from claim_runs_03 import BUCKET, PERSIST, PREFETCH
from conftest import probe_launcher
from leftovers import ranks_left

RANKS = 2


@pytest.fixture(scope="module")
def ranks():
    """What each of the 2 ranks recorded (tests/claim_runs_03.py), in rank order."""
    from zerolab.handmade.core import harness

    with probe_launcher():
        results = harness.run({"kind": "claim_runs_03:collectives", "preimport_deepspeed": True}, RANKS,
                              timeout=300, progress=False)
    assert not ranks_left(), "a rank outlived its run"
    return results


def calls(case, micro=None, phase=None, op=None, scalars=False):
    """The case's collectives, filtered; without ``scalars`` the one-element ones (gradient norm, overflow flag,
    the trace's counters) are left out."""
    return [c for c in case["calls"] if (micro is None or c["micro"] == micro)
            and (phase is None or c["phase"] == phase) and (op is None or c["op"] == op)
            and (scalars or c["elements"] > 1)]


def micro_steps(case):
    return sorted({c["micro"] for c in case["calls"]})


def test_stages_0_and_1_reduce_at_the_boundary_and_torch_ddp_needs_no_sync(ranks):
    """Claim stage0-1-reduce-at-the-boundary-torch-ddp-needs-no-sync (lesson 03, section 1): DeepSpeed's stages 0
    and 1 send nothing in the first of 2 micro-steps and reduce every gradient in the second; torch's DDP reduces
    in both backward passes unless the first runs inside no_sync()."""
    for rank in ranks:
        for name in ("stage0", "stage1"):
            case = rank["cases"][name]
            assert calls(case, micro=0, scalars=True) == [], (name, calls(case, micro=0, scalars=True))
            reduced = calls(case, micro=1, phase="backward", op="all_reduce")
            assert sum(c["elements"] for c in reduced) == case["params"], (name, reduced)
        ddp = rank["ddp"]
        assert ddp["plain"][0] > 0 and ddp["plain"][1] > 0, ddp  # every backward reduces
        assert ddp["no_sync"] == [0, ddp["plain"][1]], ddp  # inside no_sync() nothing is sent


def test_zero3_reduce_scatters_and_gathers_on_every_micro_step(ranks):
    """Claim zero3-communicates-every-micro-step (lesson 03, section 1): with 2 micro-steps a step, DeepSpeed's
    stage 3 reduce-scatters all the gradients in the backward of every micro-step and all-gathers parameters in the
    forward of every micro-step; it never all-reduces them."""
    for rank in ranks:
        case = rank["cases"]["stage3"]
        assert micro_steps(case) == [0, 1, 2, 3]
        for micro in micro_steps(case):
            scattered = calls(case, micro=micro, phase="backward", op="reduce_scatter_tensor")
            assert sum(c["elements"] for c in scattered) == case["params"], (micro, scattered)
            assert calls(case, micro=micro, phase="forward", op="all_gather_into_tensor"), micro
            assert calls(case, micro=micro, op="all_reduce") == [], micro


def test_reduce_bucket_size_and_the_prefetch_bucket_count_elements_not_bytes(ranks):
    """Claim bucket-sizes-count-elements (lesson 03, section 3): in bf16 (2 bytes an element) the ZeRO-1/2 gradient
    bucket buffer holds reduce_bucket_size elements and one reduction moves more than reduce_bucket_size / 2
    elements; ZeRO-3 prefetches past a 2,048-element weight because its bucket is 3,000 elements, not bytes."""
    for rank in ranks:
        for name in ("stage1", "stage2"):
            case = rank["cases"][name]
            assert case["bucket_buffers_in_backward"] and all(
                seen == [BUCKET] for seen in case["bucket_buffers_in_backward"]), case["bucket_buffers_in_backward"]
            largest = max(c["elements"] for c in calls(case, phase="backward", op="all_reduce"))
            assert BUCKET / 2 < largest <= BUCKET, largest
        stage3 = rank["cases"]["stage3"]
        weights = [size for size in stage3["sizes"] if size >= PERSIST]
        assert PREFETCH / 2 < weights[0] < PREFETCH < weights[0] + weights[1]  # 3,000 bytes would stop at weights[0]
        first = calls(stage3, micro=2, phase="forward", op="all_gather_into_tensor")[0]
        assert first["elements"] == weights[0] + weights[1], first


def test_zero12_gather_the_updated_parameters_with_one_call_per_group(ranks):
    """Claim zero12-one-all-gather-per-param-group (lesson 03, section 3): after the optimizer step ZeRO-1/2
    all-gather the updated parameters with one all_gather_into_tensor per parameter group (two groups: two calls),
    each larger than allgather_bucket_size (100 elements here), which torch 2.13's all_gather_into_tensor leaves
    unused."""
    for rank in ranks:
        assert rank["has_all_gather_into_tensor"] is True
        for name, groups in (("stage1", 1), ("stage2", 2)):
            case = rank["cases"][name]
            assert case["groups"] == groups
            gathered = calls(case, op="all_gather_into_tensor")
            assert len(gathered) == groups and all(c["phase"] == "step" for c in gathered), gathered
            assert sum(c["elements"] for c in gathered) == case["params"] and min(c["elements"] for c in gathered) > 100
            assert calls(case, op="all_gather") == []


def test_zero3_prefetch_adds_whole_parameters_past_the_bucket(ranks):
    """Claim zero3-prefetch-adds-whole-parameters (lesson 03, "80 communications"): once stage 3 has its trace it
    prefetches upcoming parameters by adding whole ones to a single all-gather until stage3_prefetch_bucket_size
    (3,000 elements) is passed: one call holds two weights (6,144 elements), and a 4,096-element weight, larger than
    the bucket, is one call by itself."""
    for rank in ranks:
        case = rank["cases"]["stage3"]
        weights = [size for size in case["sizes"] if size >= PERSIST]
        assert weights[0] < PREFETCH < weights[0] + weights[1] and PREFETCH < weights[2]
        for micro in (2, 3):
            gathered = [c["elements"] for c in calls(case, micro=micro, phase="forward", op="all_gather_into_tensor")]
            assert sum(gathered) == sum(weights) and len(gathered) < len(weights), gathered
            assert gathered[0] == weights[0] + weights[1], gathered  # more than the bucket, in one call
            assert weights[2] in gathered, gathered  # a weight larger than the bucket: one call

def test_overlap_comm_reduces_on_its_own_stream_during_backward_but_not_the_last_bucket(ranks):
    """Claim overlap-comm-reduces-on-a-side-stream-during-backward (lesson 03, section 4): with overlap_comm, stage
    1 reduces each full bucket on the optimizer's own stream from the gradient hooks while backward runs, where
    without it it reduces only after backward, on the current stream (and stage 2 without it reduces in the hooks
    on the current stream); the last bucket is reduced after backward ends; the parameter all-gather runs in step()."""
    for rank in ranks:
        overlap, plain, stage2 = (rank["cases"][name] for name in ("stage1_overlap", "stage1", "stage2"))
        side = overlap["streams"]["reduce"]
        assert side and side.startswith("side"), overlap["streams"]
        reduced = calls(overlap, micro=1, phase="backward", op="all_reduce")
        assert [c["in_backward"] for c in reduced] == [True] * (len(reduced) - 1) + [False], reduced
        assert {c["stream"] for c in reduced} == {side}, reduced
        assert all(not c["in_backward"] and c["stream"] is None
                   for c in calls(plain, micro=1, phase="backward", op="all_reduce"))
        assert {c["stream"] for c in calls(stage2, phase="backward", op="all_reduce")} == {None}
        for case in (overlap, plain):
            gathered = calls(case, op="all_gather_into_tensor")
            assert gathered and all(c["phase"] == "step" and not c["in_backward"] for c in gathered), gathered


def test_zero3_overlap_comm_moves_reduce_scatter_and_all_gathers_to_side_streams(ranks):
    """Claim zero3-overlap-comm-uses-side-streams (lesson 03, section 4): at stage 3 with overlap_comm (its
    default there) the gradient reduce-scatters run on one stream of their own and the parameter all-gathers on
    another; with overlap_comm false both run on the default stream."""
    for rank in ranks:
        overlap, plain = rank["cases"]["stage3"], rank["cases"]["stage3_no_overlap"]
        reduce_stream, gather_stream = overlap["streams"]["reduce"], overlap["streams"]["all_gather"]
        assert reduce_stream.startswith("side") and gather_stream.startswith("side") and reduce_stream != gather_stream
        assert {c["stream"] for c in calls(overlap, op="reduce_scatter_tensor")} == {reduce_stream}
        assert {c["stream"] for c in calls(overlap, op="all_gather_into_tensor") if c["phase"] != "step"} == \
            {gather_stream}
        assert plain["streams"] == {"reduce": "default", "all_gather": "default"}
        assert {c["stream"] for c in calls(plain) if c["op"] != "broadcast" and c["phase"] != "step"} == {"default"}


def test_zero12_gradient_buckets_take_reduce_bucket_size_elements_once_or_twice(ranks):
    """Claim zero12-bucket-buffers-no-4-5x (lesson 03, "4.5x"): ZeRO-1/2 allocate one buffer of reduce_bucket_size
    elements for the gradient buckets of a dtype, two under overlap_comm, nothing more; at the default
    reduce_bucket_size (5e8 elements) and 2 bytes an element that is 2 GB with overlap_comm, not 9 GB."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    for rank in ranks:
        for name, buffers in (("stage1", [BUCKET]), ("stage2", [BUCKET]), ("stage1_overlap", [BUCKET, BUCKET])):
            seen = rank["cases"][name]["bucket_buffers_in_backward"]
            assert seen and all(buffer == buffers for buffer in seen), (name, seen)
    default = DeepSpeedZeroConfig(stage=2, overlap_comm=True).reduce_bucket_size
    assert default == 500_000_000 and 2 * default * 2 == 2 * 10**9


def test_zero_plus_plus_settings_reach_only_the_stage_3_optimizer():
    """Claim zeropp-keys-read-by-stage-3-only (lesson 03, interview): ZeRO++'s hpZ and qwZ settings and qgZ's
    all-to-all group are inputs of the stage 3 optimizer only; the stage 1/2 optimizer takes none of them, so they do
    nothing below stage 3."""
    import inspect

    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    zeropp = {"zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
              "all2all_process_group"}
    assert zeropp <= set(inspect.signature(DeepSpeedZeroOptimizer_Stage3.__init__).parameters)
    stage12 = set(inspect.signature(DeepSpeedZeroOptimizer.__init__).parameters)
    assert not stage12 & zeropp and not any("quantiz" in name or "hpz" in name for name in stage12), stage12
