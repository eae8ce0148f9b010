"""zerolab.sizing.budget: each line from its own source, the two peaks, host memory, and the largest micro-batch."""
import math
import re
from pathlib import Path

import pytest

from zerolab.sizing import budget
from zerolab.engine import host_memory, models, zero_terms
from zerolab.engine.activations import activation_memory
from zerolab.engine.models import preset
from zerolab.engine.units import GB

MODEL = preset("llama2-7b")
LLAMA13 = preset("llama2-13b")


def test_offloaded_model_states_and_loading_estimate_are_deepspeeds_own():
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    plan = budget.budget(MODEL, 2, 2048, 1, gpus_per_node=8, offload_optimizer="cpu")
    cpu, gpu = estimate_zero2_model_states_mem_needs(MODEL.params(), 8, 1, True)
    assert plan.gpu["model_states"] == gpu
    assert plan.host_loading_bytes == cpu  # shown apart: the load-time peak, not the runtime host memory
    assert plan.host_bytes < cpu


@pytest.mark.parametrize("stage", [1, 2])
def test_fp32_gradient_partition_counts_at_the_step_not_in_backward(stage):
    """DeepSpeed's estimator counts 18 bytes/param partitioned, 4 of them the fp32 gradients that step() makes
    (tests/test_zero_terms_measured.py sees them only there), from a flat 16-bit copy of the partition."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    params, gpus = LLAMA13.params(), 8
    _, estimator = estimate_zero2_model_states_mem_needs(params, gpus, 1, False)
    plan = budget.budget(LLAMA13, stage, 4096, 1, gpus_per_node=gpus)
    # ZeRO-1 keeps its 16-bit gradients whole (2 bytes/param), where the ZeRO-2 estimator partitions them
    whole_grads = 2 * params - 2 * params / gpus if stage == 1 else 0
    fp32_grads = 4 * params / gpus
    assert plan.step["model_states"] == pytest.approx(estimator + whole_grads + 2 * params / gpus, abs=64)
    assert plan.backward["model_states"] == pytest.approx(estimator + whole_grads - fp32_grads, abs=64)
    assert plan.step["activations"] == plan.step["communication_buckets"] == 0
    assert plan.gpu_bytes == max(sum(plan.backward.values()), sum(plan.step.values()))


def test_the_larger_peak_is_the_gpu_figure():
    long = budget.budget(LLAMA13, 2, 4096, 1, gpus_per_node=8)
    assert long.peak == "backward" and long.gpu is long.backward
    short = budget.budget(LLAMA13, 1, 16, 1, gpus_per_node=8, recompute="full")
    assert short.peak == "step" and short.gpu is short.step
    assert short.overflow(sum(short.backward.values())) is not None  # what backward needs is not enough


def test_zero3_model_states_follow_deepspeeds_buffers():
    params, largest, gpus = LLAMA13.params(), LLAMA13.largest_layer_params(), 8
    part = math.ceil(params / gpus)
    states = budget.model_states(LLAMA13, 3, gpus)
    # 16-bit params + 16-bit gradient partition + fp32 master + Adam's two moments
    assert states.backward["params"] + states.backward["grads"] == 4 * part
    assert states.backward["master_weights"] + states.backward["optimizer_states"] == 12 * part
    assert states.backward["gathered_params"] == 2 * (1_000_000_000 + largest)  # DeepSpeed's 1e9 defaults
    assert states.backward["gathered_grads"] == 2 * largest
    assert "gathered_params" not in states.step  # step() releases every gathered parameter first
    assert states.step["fp32_grads"] == 4 * min(part, 1_000_000_000)  # one sub-group at a time
    small = models.from_params(500_000_000)
    assert budget.model_states(small, 3, 8).backward["gathered_params"] == 2 * small.params()  # all of it


def test_buckets_two_at_zero12_with_overlap_one_at_zero3():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    elements = DeepSpeedZeroConfig().reduce_bucket_size
    assert budget.budget(MODEL, 2, 2048, 1).backward["communication_buckets"] == 2 * elements * 2  # two bf16 buffers
    assert budget.budget(MODEL, 2, 2048, 1, overlap_comm=False).backward["communication_buckets"] == elements * 2
    assert budget.budget(MODEL, 3, 2048, 1, overlap_comm=True).backward["communication_buckets"] == elements * 2


def test_lines_add_up_with_the_stated_allowances():
    plan = budget.budget(MODEL, 3, 4096, 2, gpus_per_node=8, recompute="full")
    for peak in (plan.backward, plan.step):
        assert list(peak) == list(budget.LINES)
        allocated = peak["model_states"] + peak["communication_buckets"] + peak["activations"]
        assert peak["fragmentation"] == pytest.approx(budget.FRAGMENTATION * allocated, abs=1)
        assert peak["cuda_context"] == budget.CUDA_CONTEXT_BYTES
    assert plan.backward["activations"] == activation_memory(MODEL, 4096, 2, "bf16", "flash", "full").total_bytes


def test_pinned_buffers_round_up_as_torchs_caching_host_allocator_does():
    """torch's own header: every pinned block is rounded to PowerOf2Ceil below a threshold whose default is the
    largest size_t; DeepSpeed's default pin path goes through it, DS_PIN_MEMORY_BACKEND=native does not."""
    import torch
    from deepspeed.utils.pin_memory import get_active_native_pinned_memory

    include = Path(torch.__file__).parent / "include"
    allocator = (include / "ATen/core/CachingHostAllocator.h").read_text()
    assert re.search(r"size <= pinned_max_round_threshold\(\)[\s\S]{0,120}PowerOf2Ceil\(size\)", allocator)
    config = (include / "c10/core/AllocatorConfig.h").read_text()
    assert "pinned_max_round_threshold_{std::numeric_limits<size_t>::max()}" in config
    assert get_active_native_pinned_memory() is None  # DS_PIN_MEMORY_BACKEND unset: torch's pin path
    for nbytes in (1000, 2**20, 6_500_000_000, 2**33):
        assert host_memory.pinned_size(nbytes) == 2 ** math.ceil(math.log2(nbytes))
        assert host_memory.pinned_size(nbytes, "native") == nbytes


def test_runtime_host_memory_of_zero2_offload_with_pinned_rounding():
    """13B on 8 GPUs: per rank the fp32 master, fp32 gradient and 16-bit staging partitions and a gradient buffer
    of the largest parameter are pinned, Adam's moments are not; rounding adds about 42 GB per node."""
    params, largest, gpus = LLAMA13.params(), LLAMA13.largest_layer_params(), 8
    part = params / gpus
    pinned = [4 * part, 4 * part, 2 * part, 2 * largest]
    plan = budget.budget(LLAMA13, 2, 4096, 1, gpus_per_node=gpus, offload_optimizer="cpu")
    rounding = gpus * sum(2 ** math.ceil(math.log2(n)) - n for n in pinned)
    assert plan.host["pinned_rounding"] == pytest.approx(rounding, rel=1e-6)
    assert 40 * GB < plan.host["pinned_rounding"] < 45 * GB
    assert plan.host_bytes == pytest.approx(gpus * (sum(pinned) + 8 * part) + rounding, rel=1e-6)
    native = budget.budget(LLAMA13, 2, 4096, 1, gpus_per_node=gpus, offload_optimizer="cpu", pin_backend="native")
    assert "pinned_rounding" not in native.host
    assert budget.budget(LLAMA13, 2, 4096, 1, gpus_per_node=gpus).host_bytes == 0  # nothing offloaded


def test_zero3_host_buffers():
    gpus = 8
    part = math.ceil(LLAMA13.params() / gpus)
    both = zero_terms.model_states(LLAMA13, 3, gpus, offload_optimizer="cpu", offload_param="cpu",
                                   pin_backend="native")
    assert both.host == {"bit16_grads": 2 * part * gpus, "fp32_grads": 4 * part * gpus,
                         "fp32_master_weights": 4 * part * gpus, "optimizer_states": 8 * part * gpus,
                         "bit16_params": 2 * part * gpus}
    assert "params" not in both.backward and "master_weights" not in both.backward


@pytest.mark.parametrize("stage, recompute, gpu_gb", [(2, "full", 80), (3, "none", 80), (3, "full", 40),
                                                      (1, "full", 141), (1, "full", 80)])
def test_largest_micro_batch_fits_and_one_more_does_not(stage, recompute, gpu_gb):
    setup = dict(gpus_per_node=8, recompute=recompute)
    states = budget.model_states(MODEL, stage, 8)
    one = activation_memory(MODEL, 4096, 1, "bf16", "flash", recompute)
    micro = budget.largest_micro_batch(gpu_gb * GB, states, one, budget.bucket_bytes(stage))
    assert micro >= 1
    assert budget.budget(MODEL, stage, 4096, micro, **setup).gpu_bytes <= gpu_gb * GB
    assert budget.budget(MODEL, stage, 4096, micro + 1, **setup).gpu_bytes > gpu_gb * GB


def test_no_micro_batch_when_the_step_peak_does_not_fit():
    states = budget.model_states(LLAMA13, 1, 8)
    one = activation_memory(LLAMA13, 16, 1, "bf16", "flash", "full")
    step_peak = sum(budget.combine(states, one, budget.bucket_bytes(1)).step.values())
    assert budget.largest_micro_batch(step_peak - 1, states, one, budget.bucket_bytes(1)) == 0


def test_overflow_names_the_line_where_the_running_total_passes_the_gpu():
    plan = budget.budget(MODEL, 0, 4096, 1)  # DDP: ~135 GB of model states on every GPU
    assert plan.overflow(80 * GB) == "model_states"
    assert plan.overflow(10**15) is None
    states_and_buckets = plan.gpu["model_states"] + plan.gpu["communication_buckets"]
    assert plan.overflow(states_and_buckets + 1) == "activations"


def test_budget_figure_draws_the_budget_lines():
    from zerolab.lesson import plots

    fig = plots.budget_by_stage("llama2-7b", 8, 4096, 2, ("full",))
    heights = [patch.get_height() for patch in fig.axes[0].patches]
    drawn_zero2 = sum(heights[2 * len(budget.LINES):3 * len(budget.LINES)])  # bars: stage 0, 1, 2, 3 in order
    plan = budget.budget(MODEL, 2, 4096, 2, gpus_per_node=8, recompute="full")
    assert drawn_zero2 == pytest.approx(plan.gpu_bytes / GB)
