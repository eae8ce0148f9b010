"""zerolab.budget: each line from its own source, and the largest micro-batch really the largest."""
import pytest

from zerolab import budget
from zerolab.activations import activation_memory
from zerolab.models import preset
from zerolab.units import GB

MODEL = preset("llama2-7b")


def test_model_states_line_is_deepspeeds_own_estimate():
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    plan = budget.budget(MODEL, 2, 2048, 1, gpus_per_node=8, offload_optimizer="cpu")
    cpu, gpu = estimate_zero2_model_states_mem_needs(MODEL.params(), 8, 1, True)
    assert plan.gpu["model_states"] == gpu
    assert plan.host_bytes == cpu


def test_bucket_line_is_deepspeeds_default_bucket_twice_with_overlap():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    elements = DeepSpeedZeroConfig().reduce_bucket_size
    assert budget.budget(MODEL, 2, 2048, 1).gpu["communication_buckets"] == 2 * elements * 2  # two bf16 buffers
    assert budget.budget(MODEL, 2, 2048, 1, overlap_comm=False).gpu["communication_buckets"] == elements * 2


def test_lines_add_up_with_the_stated_allowances():
    plan = budget.budget(MODEL, 3, 4096, 2, gpus_per_node=8, recompute="full")
    assert list(plan.gpu) == list(budget.LINES)
    assert plan.gpu["activations"] == activation_memory(MODEL, 4096, 2, "bf16", "flash", "full").total_bytes
    allocated = plan.gpu["model_states"] + plan.gpu["communication_buckets"] + plan.gpu["activations"]
    assert plan.gpu["fragmentation"] == pytest.approx(budget.FRAGMENTATION * allocated, abs=1)
    assert plan.gpu_bytes == allocated + plan.gpu["fragmentation"] + budget.CUDA_CONTEXT_BYTES


@pytest.mark.parametrize("stage, recompute, gpu_gb", [(2, "full", 80), (3, "none", 80), (3, "full", 40),
                                                      (1, "full", 141)])
def test_largest_micro_batch_fits_and_one_more_does_not(stage, recompute, gpu_gb):
    setup = dict(gpus_per_node=8, recompute=recompute)
    states = budget.model_states(MODEL, stage, 8)
    one = activation_memory(MODEL, 4096, 1, "bf16", "flash", recompute)
    micro = budget.largest_micro_batch(gpu_gb * GB, states, one, budget.bucket_bytes(stage))
    assert micro >= 1
    assert budget.budget(MODEL, stage, 4096, micro, **setup).gpu_bytes <= gpu_gb * GB
    assert budget.budget(MODEL, stage, 4096, micro + 1, **setup).gpu_bytes > gpu_gb * GB


def test_overflow_names_the_line_where_the_running_total_passes_the_gpu():
    plan = budget.budget(MODEL, 0, 4096, 1)  # DDP: ~135 GB of model states on every GPU
    assert plan.overflow(80 * GB) == "model_states"
    assert plan.overflow(10**15) is None
    states_and_buckets = plan.gpu["model_states"] + plan.gpu["communication_buckets"]
    assert plan.overflow(states_and_buckets + 1) == "activations"


def test_budget_figure_draws_the_budget_lines():
    from zerolab import plots

    fig = plots.budget_by_stage("llama2-7b", 8, 4096, 2, ("full",))
    heights = [patch.get_height() for patch in fig.axes[0].patches]
    drawn_zero2 = sum(heights[2 * len(budget.LINES):3 * len(budget.LINES)])  # bars: stage 0, 1, 2, 3 in order
    plan = budget.budget(MODEL, 2, 4096, 2, gpus_per_node=8, recompute="full")
    assert drawn_zero2 == pytest.approx(plan.gpu_bytes / GB)
