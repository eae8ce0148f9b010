"""bf16 master weights and bf16 Adam moments (DeepSpeed's bf16.bf16_master_weights_and_grads and
bf16.bf16_optimizer_states, 0.18.3+), on 2 CPU ranks: what each rank holds after two steps equals
zerolab.engine.memory.estimate's paper accounting with master="bf16" (and moments="bf16"), at stages 1-3, on the device and
under optimizer offload, where DeepSpeed's CPU Adam steps bf16 masters with fp32 or bf16 moments."""
import pytest

from zerolab.engine import memory
from zerolab.run import make_config, run

pytestmark = pytest.mark.slow
RANKS = 2
SETUPS = [(1, "none", "bf16"), (2, "none", "bf16"), (3, "none", "bf16"), (2, "cpu", "fp32"), (2, "cpu", "bf16"),
          (3, "cpu", "fp32")]


@pytest.fixture(scope="module")
def runs():
    return {setup: run(make_config(setup[0], setup[1], precision="bf16", master="bf16", moments=setup[2]),
                       ranks=RANKS, steps=2, progress=False) for setup in SETUPS}


@pytest.mark.parametrize("setup", SETUPS)
def test_master_weights_and_moments_are_what_the_estimate_says(runs, setup):
    stage, offload, moments = setup
    result = runs[setup]
    params = result.setup["params"]
    parts = memory.estimate(params, stage, RANKS, precision="bf16", offload_optimizer=offload, master="bf16",
                            moments=moments).breakdown
    per_rank = {name: parts["gpu"].get(name, 0) + parts["cpu"].get(name, 0) // RANKS
                for name in ("master_weights", "optimizer_states")}
    for rank in result.ranks:
        assert rank["master_weight_bytes"] == per_rank["master_weights"] == 2 * params // RANKS
        assert rank["optimizer_state_bytes"] == per_rank["optimizer_states"] == (2 if moments == "bf16" else 4) * \
            2 * params // RANKS
    assert result.predicted["master_weight_bytes"] == per_rank["master_weights"]
    assert result.predicted["optimizer_state_bytes"] == per_rank["optimizer_states"]


def test_the_offloaded_gradient_partition_is_bf16_too(runs):
    """Under optimizer offload the gradient partition the CPU Adam reads is in the master's dtype: half of the
    fp32 partition DeepSpeed's estimator counts, as zerolab run predicts it."""
    for setup in ((2, "cpu", "fp32"), (3, "cpu", "fp32")):
        result = runs[setup]
        for rank in result.ranks:
            assert rank["fp32_grad_bytes"] == result.predicted["fp32_grad_bytes"] == 2 * result.setup["params"] // RANKS


def test_the_rules_deepspeeds_config_class_enforces():
    for options, words in (({"moments": "bf16"}, "need bf16 master weights"),
                           ({"master": "bf16", "precision": "fp16"}, "need bf16 training"),
                           ({"master": "bf16", "accounting": "deepspeed"}, "paper accounting only")):
        with pytest.raises(ValueError, match=words):
            memory.estimate(1000, 2, 2, **{"precision": "bf16", **options})


def test_the_table_names_the_dtype_each_run_keeps(runs):
    """A run's table must not call bf16 master weights or bf16 moments "fp32" (the names follow the run's config)."""
    rows = {line.split("  ")[0] for line in runs[(2, "cpu", "fp32")].table().splitlines()}
    assert {"bf16 master weights", "bf16 gradients for the optimizer", "Adam states (m, v)"} <= rows
    rows = {line.split("  ")[0] for line in runs[(2, "none", "bf16")].table().splitlines()}
    assert {"bf16 master weights", "Adam states (m, v), bf16"} <= rows and "fp32 master weights" not in rows
