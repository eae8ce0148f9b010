"""Lesson 10 section 6: DeepSpeed's newer features on 2 CPU ranks (zerolab.run.features), against references built
here without the feature: the same MLP's loss without DeepSpeed, the Llama's own full weight shapes and its loss on
one process, and what DeepSpeed's own functions answer in this process."""
import inspect

import pytest
import torch

from leftovers import ranks_left
from zerolab.run import features

pytestmark = pytest.mark.slow
PLAIN, ZENFLOW = features.ZENFLOW_MODES


@pytest.fixture(scope="module")
def runs():
    found = features.compare(progress=False)
    assert not ranks_left(), "a rank outlived its run"
    return found


def _mlp_loss(rank, arrange=lambda weight: weight):
    """The loss of the run's MLP on the rank's batch, computed without DeepSpeed, its weights given by ``arrange``."""
    job = features.job("zenflow")
    model = features._mlp(job)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(arrange(parameter))
        x, y = features._mlp_batch(job, rank)
        return float(torch.nn.functional.mse_loss(model(x), y))


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**features.LLAMA)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def test_zenflow_trains_on_cpu_ranks_beside_zero_offload(runs):
    """Claim zenflow-trains-on-cpu-ranks: ZeRO-2 with CPU optimizer offload and a zenflow block (overlap_step false)
    runs on 2 CPU ranks with DeepSpeed's CPU Adam: the optimizer is ZenFlowZeroOptimizerSequential over ZenFlowCPUAdam
    (plain ZeRO-Offload: DeepSpeedZeroOptimizer over DeepSpeedCPUAdam), and both losses fall at every step on the one
    batch. The plain run's first loss is the MLP's own, computed here without DeepSpeed."""
    assert len(runs["zenflow"]) == features.RANKS
    for rank, found in enumerate(runs["zenflow"]):
        plain, zenflow = found[PLAIN], found[ZENFLOW]
        assert (plain["optimizer"], plain["cpu_optimizer"]) == ("DeepSpeedZeroOptimizer", "DeepSpeedCPUAdam")
        assert (zenflow["optimizer"], zenflow["cpu_optimizer"]) == ("ZenFlowZeroOptimizerSequential", "ZenFlowCPUAdam")
        for losses in (plain["losses"], zenflow["losses"]):
            assert len(losses) == features.STEPS and all(b < a for a, b in zip(losses, losses[1:])), (rank, losses)
        assert plain["losses"][0] == pytest.approx(_mlp_loss(rank), rel=1e-6)


def test_zenflow_updates_the_selected_columns_between_cpu_adam_steps(runs):
    """Claim zenflow-selected-columns-between-cpu-steps: ZenFlow sets gradient_accumulation_steps to update_interval
    (2); DeepSpeed's CPU Adam steps every second step; on the steps between, exactly the columns ZenFlow selected
    change (max(1, int(columns * topk_ratio)) of them, the same on both ranks), and on the CPU Adam's steps every
    column does. Plain ZeRO-Offload steps the CPU Adam and changes every column at every step, and selects none."""
    interval = features.ZENFLOW["update_interval"]
    for found in runs["zenflow"]:
        plain, zenflow = found[PLAIN], found[ZENFLOW]
        columns = features.MLP["width"]
        everything = list(range(columns))
        assert plain["cpu_stepped"] == [True] * features.STEPS and plain["selected"] == [None] * features.STEPS
        assert plain["changed"] == [everything] * features.STEPS and plain["gradient_accumulation_steps"] == 1
        assert zenflow["gradient_accumulation_steps"] == interval and zenflow["columns"] == columns
        assert zenflow["cpu_stepped"] == [(step + 1) % interval == 0 for step in range(features.STEPS)]
        for step in range(features.STEPS):
            selected, changed = zenflow["selected"][step], zenflow["changed"][step]
            assert len(selected) == max(1, int(columns * features.ZENFLOW["topk_ratio"])), selected
            assert changed == (everything if zenflow["cpu_stepped"][step] else selected), step
    assert runs["zenflow"][0][ZENFLOW]["selected"] == runs["zenflow"][1][ZENFLOW]["selected"]


def test_zenflows_initialize_leaves_each_2d_weight_holding_its_transpose(runs):
    """Claim zenflow-initialize-transposes-weights: with ZenFlow, DeepSpeed 0.19.8's deepspeed.initialize leaves each
    2-D weight holding its transpose's values read in its own shape (ZenFlow flattens 2-D tensors transposed, and the
    ZeRO-2 optimizer points each parameter at a view of the flat buffer in the parameter's shape); plain ZeRO-Offload
    keeps the weights. ZenFlow's first loss is the MLP's with its weights so arranged, computed here."""
    from deepspeed.runtime.zenflow import zenflow_utils
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    for rank, found in enumerate(runs["zenflow"]):
        assert found[PLAIN]["weights_kept"] and not found[PLAIN]["weights_transposed_in_place"]
        assert found[ZENFLOW]["weights_transposed_in_place"] and not found[ZENFLOW]["weights_kept"]
        assert found[ZENFLOW]["losses"][0] == pytest.approx(_mlp_loss(rank, features._transposed_in_place), rel=1e-6)
    matrix = torch.arange(6.0).view(2, 3)
    assert torch.equal(zenflow_utils._flatten_dense_tensors([matrix]), matrix.t().flatten())
    assert ".view(meta.shape)" in inspect.getsource(DeepSpeedZeroOptimizer._update_model_bit16_weights)


def test_autotp_holds_half_of_every_projection_with_the_same_loss(runs):
    """Claim autotp-halves-every-projection: with autotp_size 2 and ZeRO-1 on 2 CPU ranks, q, k, v, gate and up
    become LinearLayer with half the output rows, o and down LinearAllreduce with half the input columns, on each
    rank; the first loss equals the same Llama's on one process without tensor parallelism (computed here), the
    loss falls, and 1 data-parallel rank is left."""
    model = _llama()
    tokens = features._tokens(features.job("autotp"), 2)
    with torch.no_grad():
        reference = float(model(input_ids=tokens, labels=tokens).loss)
    layer = model.model.layers[0]
    assert len(runs["autotp"]) == features.RANKS
    for rank, found in enumerate(runs["autotp"]):
        for name in features.PROJECTIONS:
            full = list(layer.get_submodule(name).weight.shape)
            shapes = found["shapes"][name]
            split_input = name.endswith(("o_proj", "down_proj"))
            half = [full[0], full[1] // 2] if split_input else [full[0] // 2, full[1]]
            assert shapes["full"] == full and shapes["local"] == half, (rank, name, shapes)
            assert shapes["class"] == ("LinearAllreduce" if split_input else "LinearLayer"), (rank, name)
        assert found["reference_loss"] == pytest.approx(reference, rel=1e-6)
        assert found["losses"][0] == pytest.approx(reference, rel=1e-6) and found["losses"][1] < found["losses"][0]
        assert found["data_parallel_ranks"] == 1


def test_ulysses_ranks_hold_half_the_sequence_and_reproduce_its_loss(runs):
    """Claim ulysses-reproduces-unsharded-loss: with register_with_transformers(sequence_parallel_size=2) over sdpa
    and its mpu passed to deepspeed.initialize (ZeRO-3), each of 2 CPU ranks runs 8 of the 16 tokens, the two halves
    cover the sequence, and the loss they assemble is the whole sequence's on one process (computed here); backward
    and step ran (the rank returned after them)."""
    model = _llama()
    tokens = features._tokens(features.job("ulysses"), 1)
    positions = torch.arange(features.SEQUENCE).unsqueeze(0)
    with torch.no_grad():
        reference = float(model(input_ids=tokens, position_ids=positions, labels=tokens).loss)
    held = []
    for found in runs["ulysses"]:
        assert found["sequence_parallel_ranks"] == 2 and found["sequence"] == features.SEQUENCE
        assert found["local_sequence"] == features.SEQUENCE // 2 == len(found["local_positions"])
        assert found["reference_loss"] == pytest.approx(reference, rel=1e-6)
        assert found["loss"] == pytest.approx(reference, rel=1e-5), found
        held += found["local_positions"]
    assert held == list(range(features.SEQUENCE))


def test_deepcompile_and_superoffload_refuse_the_cpu_accelerator(runs):
    """Claims deepcompile-needs-cuda and superoffload-refuses-cpu: on the ranks, is_deepcompile_supported() is False,
    as it is in this process (its test: torch 2.6 or later and a "cuda" accelerator), and deepspeed.initialize with
    ZeRO-3 and offload_optimizer.super_offload stops with the AssertionError that SuperOffload's own accelerator check
    raises here."""
    from deepspeed.compile.util import is_deepcompile_supported
    from deepspeed.runtime.superoffload.superoffload_stage3 import _validate_superoffload_accelerator

    source = inspect.getsource(is_deepcompile_supported)
    assert "min_version=2.6" in source and 'device_name() == "cuda"' in source
    with pytest.raises(AssertionError) as raised:
        _validate_superoffload_accelerator()
    for found in runs["refusals"]:
        assert found["deepcompile_supported"] is False is is_deepcompile_supported()
        assert found["superoffload"] == {"type": "AssertionError", "message": str(raised.value)}
    assert str(raised.value) == "SuperOffload only supports NVIDIA CUDA GPUs, but found accelerator 'cpu'."


def test_the_tables_show_the_runs(runs):
    zenflow = features.zenflow_table(runs)
    assert f"{runs['zenflow'][0][ZENFLOW]['losses'][-1]:.6f}" in zenflow and "columns ZenFlow selected" in zenflow
    autotp = features.autotp_table(runs)
    assert all(name in autotp for name in features.PROJECTIONS) and "64 x 32" in autotp
