"""zerolab.engine.memory against its sources: the ZeRO paper's table and DeepSpeed's own estimator functions."""
import random

import pytest

from zerolab.engine.memory import combinations, estimate, estimate_all

PSI_7_5B = 7_500_000_000

# The ZeRO paper, Table 1 (7.5B parameters, K = 12, fp16 mixed precision), per-device GB (10^9 bytes).
# Columns: P_os (ZeRO-1), P_os+g (ZeRO-2), P_os+g+p (ZeRO-3). The 64-GPU row is quoted in the paper's text
# (section 5.3: 31.4 / 16.6 / 1.9 GB); the 1-GPU baseline is 120 GB.
PAPER_TABLE_1 = {
    1: (120, 120, 120),
    4: (52.5, 41.3, 30),
    16: (35.6, 21.6, 7.5),
    64: (31.4, 16.6, 1.88),
    256: (30.4, 15.4, 0.47),
    1024: (30.1, 15.1, 0.12),
}


@pytest.mark.parametrize("nd", sorted(PAPER_TABLE_1))
def test_paper_table_1_for_7_5b(nd):
    for stage, printed in zip((1, 2, 3), PAPER_TABLE_1[nd]):
        gb = estimate(PSI_7_5B, stage, gpus_per_node=nd).gpu_bytes / 1e9
        decimals = len(str(printed).partition(".")[2])
        assert abs(gb - printed) <= 0.5 * 10**-decimals + 1e-9, (nd, stage, gb)  # printed rounded half up


def test_paper_text_64_gpu_row_and_ddp_baseline():
    assert estimate(PSI_7_5B, 0, gpus_per_node=64).gpu_bytes == 120e9  # "120 GB" baseline DP
    assert round(estimate(PSI_7_5B, 3, gpus_per_node=64).gpu_bytes / 1e9, 1) == 1.9  # section 5.3 text


def test_sixteen_bytes_per_parameter_and_k_equals_12():
    """Paper 3.1: 2 + 2 + K with K = 12 (fp32 master 4 + momentum 4 + variance 4) = 16 bytes per parameter."""
    parts = estimate(10**9, 0).breakdown["gpu"]
    assert parts["params"] == 2e9 and parts["grads"] == 2e9
    assert parts["master_weights"] + parts["optimizer_states"] == 12e9
    assert sum(parts.values()) == 16e9


def test_gpt2_1_5b_needs_at_least_24_gb():
    """Paper 3.1: GPT-2 with 1.5B parameters needs 'at least 24 GB' against '3 GB' for the fp16 parameters."""
    row = estimate(1_500_000_000, 0)
    assert row.gpu_bytes == 24e9 and row.breakdown["gpu"]["params"] == 3e9


def test_paper_limits_4x_and_8x_reduction():
    """Paper section 5: P_os tends to 4 bytes per parameter, P_os+g to 2 (the '4x' and '8x' reductions)."""
    huge = 2**20
    assert estimate(10**9, 1, gpus_per_node=huge).gpu_bytes / 10**9 == pytest.approx(4, rel=1e-4)
    assert estimate(10**9, 2, gpus_per_node=huge).gpu_bytes / 10**9 == pytest.approx(2, rel=1e-4)


def _deepspeed_estimators():
    stage_1_and_2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    return stage_1_and_2.estimate_zero2_model_states_mem_needs, stage3.estimate_zero3_model_states_mem_needs


def _random_setup(rng):
    params = rng.choice([rng.randint(1, 10**6), rng.randint(10**6, 10**10), rng.randint(10**10, 2 * 10**12)])
    return dict(params=params, gpus=rng.choice([1, 2, 3, 4, 8, 16]), nodes=rng.choice([1, 2, 3, 4, 8, 64]),
                factor=rng.choice([1.0, 1.5, 2.0, round(rng.uniform(1.0, 3.0), 3)]))


def test_deepspeed_accounting_matches_zero2_estimator_byte_for_byte():
    zero2, _ = _deepspeed_estimators()
    rng = random.Random(20261129)
    for _ in range(300):
        s = _random_setup(rng)
        offload = rng.random() < 0.5
        cpu, gpu = zero2(s["params"], s["gpus"], s["nodes"], offload, s["factor"])
        ours = estimate(s["params"], 2, s["gpus"], s["nodes"], offload_optimizer="cpu" if offload else "none",
                        accounting="deepspeed", buffer_factor=s["factor"])
        assert (ours.cpu_bytes, ours.gpu_bytes) == (cpu, gpu), s


def test_deepspeed_accounting_matches_zero3_estimator_byte_for_byte():
    _, zero3 = _deepspeed_estimators()
    rng = random.Random(7)
    for _ in range(300):
        s = _random_setup(rng)
        largest = rng.randint(1, s["params"])
        offload_optimizer, offload_param, zero_init = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5
        cpu, gpu, _ = zero3(s["params"], largest, s["gpus"], s["nodes"], offload_optimizer, offload_param,
                            zero_init, s["factor"])
        # DeepSpeed's estimator only offloads parameters together with the optimizer.
        offload_param = offload_param and offload_optimizer
        ours = estimate(s["params"], 3, s["gpus"], s["nodes"],
                        offload_optimizer="cpu" if offload_optimizer else "none",
                        offload_param="cpu" if offload_param else "none", accounting="deepspeed",
                        largest_layer_params=largest, zero_init=zero_init, buffer_factor=s["factor"])
        assert (ours.cpu_bytes, ours.gpu_bytes) == (cpu, gpu), s


def test_deepspeed_13b_on_8_gpus_as_printed_by_its_estimator():
    """The figures DeepSpeed 0.19.8 prints for 13e9 parameters on 1 node x 8 GPUs (facts file 2.3), in GiB."""
    def gib(stage, **kw):
        row = estimate(13 * 10**9, stage, 8, accounting="deepspeed", largest_layer_params=50257 * 5120, **kw)
        return round(row.gpu_bytes / 2**30, 2), round(row.cpu_bytes / 2**30, 2)

    assert gib(2) == (51.46, 581.15)
    assert gib(2, offload_optimizer="cpu") == (24.21, 581.15)
    assert gib(3) == (28.20, 11.50)
    assert gib(3, zero_init=False) == (28.20, 581.15)
    assert gib(3, offload_optimizer="cpu") == (3.99, 290.57)
    assert gib(3, offload_optimizer="cpu", offload_param="cpu") == (0.96, 326.89)


def test_stage_0_is_the_one_gpu_zero2_figure_everywhere():
    """Stage 0 replicates everything: DeepSpeed's ZeRO-2 estimator with one GPU gives the same per-GPU bytes."""
    zero2, _ = _deepspeed_estimators()
    for params in (125_000_000, 13 * 10**9):
        _, one_gpu = zero2(params, 1, 1, False)
        for gpus in (1, 8, 64):
            assert estimate(params, 0, gpus, accounting="deepspeed").gpu_bytes == one_gpu


def test_stage_1_sits_between_stage_0_and_stage_2():
    for accounting in ("paper", "deepspeed"):
        for gpus in (2, 8, 64):
            zero0, zero1, zero2 = (estimate(10**10, s, gpus, accounting=accounting).gpu_bytes for s in (0, 1, 2))
            assert zero2 < zero1 < zero0
        one = [estimate(10**10, s, 1, accounting=accounting).gpu_bytes for s in (0, 1, 2)]
        assert one[0] == one[1] == one[2]  # one GPU: nothing to partition


def test_breakdowns_add_up_for_every_combination():
    for accounting in ("paper", "deepspeed"):
        for precision in ("fp16", "bf16", "fp32"):
            for row in estimate_all(123_456_789_013, 8, 3, precision=precision, accounting=accounting):
                parts = row.breakdown
                assert sum(parts["gpu"].values()) == row.gpu_bytes
                assert sum(parts["cpu"].values()) == row.cpu_bytes
                assert sum(parts["nvme"].values()) == row.nvme_bytes
                assert all(v >= 0 for place in parts.values() for v in place.values()), row


def test_offload_moves_bytes_without_losing_any_in_the_paper_accounting():
    for stage, opt, par in combinations():
        row = estimate(10**9, stage, 4, offload_optimizer=opt, offload_param=par)
        on_host = (row.cpu_bytes + row.nvme_bytes) / 4  # host figures are per node, 4 GPUs per node
        assert row.gpu_bytes + on_host == estimate(10**9, stage, 4).gpu_bytes


def test_fp32_training_keeps_no_separate_master_copy():
    parts = estimate(10**9, 0, precision="fp32").breakdown["gpu"]
    assert "master_weights" not in parts and parts["params"] == 4e9 and parts["grads"] == 4e9


@pytest.mark.parametrize("kwargs, message", [
    (dict(stage=2, offload_param="cpu"), "offload_param needs stage 3"),
    (dict(stage=0, offload_optimizer="cpu"), "stage 1, 2 or 3"),
    (dict(stage=2, offload_optimizer="nvme"), "NVMe offload needs stage 3"),
    (dict(stage=4), "stage must be"),
    (dict(stage=2, precision="fp8"), "precision"),
    (dict(stage=2, gpus_per_node=0), "gpus_per_node"),
])
def test_impossible_setups_are_refused_with_a_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        estimate(10**9, **kwargs)


def test_combinations_are_what_deepspeed_can_train():
    assert combinations(0) == [(0, "none", "none")]
    assert combinations(2) == [(2, "none", "none"), (2, "cpu", "none")]
    assert len(combinations(3)) == 9
