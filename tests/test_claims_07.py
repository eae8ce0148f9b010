"""Lesson 07's claims (the interview drill, autograder/claims/07_interview_drill.toml) that no other test checks,
each on the library. (The drill repeats many claims of lessons 01-09; their checks are where those lessons put them.)

Probes, in this process: torch's fp16 and bf16 number formats; the data-parallel world size in DeepSpeed's batch
check; activation checkpointing's recomputation; fully_shard's signature and FSDP's strategies.

Runs, in one job on 2 gloo CPU ranks (tests/claim_runs_07.py, a few seconds): DeepSpeed ZeRO-2 and ZeRO-3 (what
the optimizer holds right after initialize and after the first step), torch FSDP's strategies and HYBRID_SHARD's
groups, fully_shard's reshard_after_forward, ZeroRedundancyOptimizer.
"""
import inspect

import pytest
import torch

from conftest import probe_launcher

RANKS = 2


@pytest.fixture(scope="module")
def ranks():
    """Each rank's results of claim_runs_07.drill."""
    from zerolab.handmade.core import harness

    with probe_launcher():
        return harness.run({"kind": "claim_runs_07:drill"}, RANKS, timeout=300, progress=False)


# ---- fp16 and bf16 (Q02, Q14) ----

def test_fp16_cannot_hold_a_small_update_to_a_weight_and_fp32_can():
    """Claim fp16-cannot-hold-small-updates: 1 + 1e-4 rounds back to 1 in fp16 (its spacing at 1 is 2**-10), not in
    fp32: the reason mixed precision keeps fp32 master weights."""
    one = torch.tensor(1.0)
    update = torch.tensor(1e-4)
    assert (one.half() + update.half()).item() == 1.0
    assert (one + update).item() > 1.0
    assert torch.finfo(torch.float16).eps == 2**-10


def test_bf16_and_fp16_both_take_2_bytes_a_value():
    """Claim bf16-and-fp16-take-2-bytes: bf16 and fp16 both store a value in 2 bytes; fp16's largest value is 65504,
    bf16's within 1 % of fp32's."""
    assert [torch.empty(1, dtype=dtype).element_size() for dtype in (torch.bfloat16, torch.float16)] == [2, 2]
    assert torch.finfo(torch.float16).max == 65504
    assert torch.finfo(torch.bfloat16).max == pytest.approx(torch.finfo(torch.float32).max, rel=0.01)


# ---- batch arithmetic (Q15) ----

def test_the_world_size_of_deepspeeds_batch_check_is_the_data_parallel_size(monkeypatch):
    """Claim batch-world-size-is-data-parallel: 16 ranks, train_batch_size 512, micro batch 4: DeepSpeed derives 8
    accumulation steps from all 16 ranks, 16 when a model-parallel unit says the data-parallel group has 8 ranks
    or when sequence parallelism of degree 2 leaves 8."""
    import deepspeed.runtime.config as config_module
    from deepspeed.runtime.config import DeepSpeedConfig

    monkeypatch.setattr(config_module.dist, "get_world_size", lambda *args, **kwargs: 16)
    monkeypatch.setattr(config_module.dist, "get_rank", lambda *args, **kwargs: 0)

    class ModelParallelUnit:
        def get_data_parallel_world_size(self):
            return 8

    batch = {"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4}
    assert DeepSpeedConfig(dict(batch)).gradient_accumulation_steps == 8
    assert DeepSpeedConfig(dict(batch), mpu=ModelParallelUnit()).gradient_accumulation_steps == 16
    assert DeepSpeedConfig(dict(batch, sequence_parallel_size=2)).gradient_accumulation_steps == 16


# ---- activation checkpointing (Q18) ----

def test_checkpointing_reruns_each_layers_forward_just_before_its_backward():
    """Claim checkpoint-recomputes-each-layer-in-backward: under torch.utils.checkpoint each layer's forward runs a
    second time during backward, one layer at a time, right before that layer's own backward."""
    from torch.utils.checkpoint import checkpoint

    events = []

    class Block(torch.nn.Module):
        def __init__(self, index):
            super().__init__()
            self.index, self.linear = index, torch.nn.Linear(8, 8)

        def forward(self, x):
            events.append(("forward", self.index))
            return torch.tanh(self.linear(x))

    blocks = [Block(index) for index in range(3)]
    for block in blocks:
        block.register_full_backward_hook(lambda module, grad_in, grad_out: events.append(("backward", module.index)))
    hidden = torch.randn(2, 8, requires_grad=True)
    for block in blocks:
        hidden = checkpoint(block, hidden, use_reentrant=False)
    assert events == [("forward", 0), ("forward", 1), ("forward", 2)]
    events.clear()
    hidden.sum().backward()
    assert events == [("forward", 2), ("backward", 2), ("forward", 1), ("backward", 1), ("forward", 0), ("backward", 0)]


# ---- FSDP (Q16) ----

@pytest.mark.slow
def test_fsdp_strategies_behave_as_the_zero_stages_the_drill_pairs_them_with(ranks):
    """Claim fsdp-strategies-and-zero-stages, on 2 ranks. FULL_SHARD frees the gathered parameters after forward and
    gathers them again for backward; SHARD_GRAD_OP keeps them from forward to the end of backward and then frees
    them (ZeRO-2 keeps them whole all the time); both leave each rank a shard of the gradients and of Adam's
    states. NO_SHARD keeps everything whole and all-reduces the gradients, as DDP does. No strategy shards the
    optimizer states alone (ZeRO-1)."""
    from torch.distributed.fsdp import ShardingStrategy

    assert {member.name for member in ShardingStrategy} == {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
                                                            "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"}
    for results in ranks:
        fsdp = results["fsdp"]
        for name in ("FULL_SHARD", "SHARD_GRAD_OP"):
            found = fsdp[name]
            shard = [-(-whole // RANKS) for whole in found["whole"]]
            assert [u["local"] for u in found["after_forward"]] == shard and found["grads"] == shard
            assert sorted(found["exp_avg"]) == sorted(shard)
            assert [u["gathered"] for u in found["after_backward"]] == [0, 0]
            assert "all_gather" in found["forward_calls"]
        full, grad_op = fsdp["FULL_SHARD"], fsdp["SHARD_GRAD_OP"]
        assert [u["gathered"] for u in full["after_forward"]] == [0, 0]
        assert full["backward_calls"].count("all_gather") == 2
        assert [u["gathered"] for u in grad_op["after_forward"]] == grad_op["whole"]
        assert "all_gather" not in grad_op["backward_calls"]
        plain = fsdp["NO_SHARD"]
        assert [u["local"] for u in plain["after_backward"]] == plain["grads"] == plain["whole"]
        assert sorted(plain["exp_avg"]) == sorted(plain["whole"])
        assert plain["forward_calls"] == [] and plain["backward_calls"] == ["all_reduce", "all_reduce"]


@pytest.mark.slow
def test_hybrid_shard_shards_within_a_node_and_replicates_across_nodes(ranks):
    """Claim fsdp-hybrid-shard-within-a-node: the groups torch builds for HYBRID_SHARD from the devices per node are
    a shard group of the node's ranks and a replicate group of the same local rank across nodes (2 ranks: one node
    of 2 gives groups of 2 and 1, two nodes of 1 give 1 and 2); with the node of 2, HYBRID_SHARD leaves each rank
    half of each parameter, as FULL_SHARD does within the node."""
    for results in ranks:
        hybrid = results["fsdp"]["HYBRID_SHARD"]
        assert hybrid["groups"] == {"2": [2, 1], "1": [1, 2]}
        assert hybrid["local"] == [-(-whole // RANKS) for whole in hybrid["whole"]]


@pytest.mark.slow
def test_fully_shard_has_reshard_after_forward_instead_of_strategies(ranks):
    """Claim fsdp2-reshard-after-forward: FSDP2's fully_shard takes reshard_after_forward and no sharding_strategy;
    True leaves the parameters sharded after forward (as FULL_SHARD), False keeps them
    unsharded until backward has used them (as SHARD_GRAD_OP)."""
    from torch.distributed.fsdp import fully_shard

    parameters = inspect.signature(fully_shard).parameters
    assert "reshard_after_forward" in parameters and "sharding_strategy" not in parameters
    for results in ranks:
        found = results["fsdp2"]
        assert all(found["True"]["after_forward"]) and not any(found["False"]["after_forward"])
        assert all(found["True"]["after_backward"]) and all(found["False"]["after_backward"])


@pytest.mark.slow
def test_zero_redundancy_optimizer_shards_only_the_optimizer_states(ranks):
    """Claim zero-redundancy-optimizer-shards-only-states: with torch's ZeroRedundancyOptimizer every rank keeps
    every parameter and gradient whole and Adam's states for its own share of the parameters only."""
    results = ranks
    params = results[0]["zero_redundancy"]["params"]
    for rank in results:
        found = rank["zero_redundancy"]
        assert found["held_params"] == found["grads"] == params
        assert 0 < found["exp_avg"] == found["exp_avg_sq"] < params
    assert sum(rank["zero_redundancy"]["exp_avg"] for rank in results) == params


# ---- DeepSpeed ZeRO (Q19) ----

@pytest.mark.slow
def test_the_optimizer_gets_only_its_partition_when_the_engine_is_built(ranks):
    """Claim zero-partitions-optimizer-states-at-initialize: right after deepspeed.initialize, at stages 2 and 3,
    the rank's fp32 master partition exists (half of the parameters on 2 ranks) and it is all the optimizer inside
    DeepSpeed is given (at stage 3 only for the length of step(), its param_groups are empty in between); Adam has
    made no moments yet, and those the first step makes are partition-sized: no step holds them whole."""
    for results in ranks:
        for stage in ("zero2", "zero3"):
            found = results[stage]
            psi = found["params"] if stage == "zero2" else sum(found["params"].values())
            start, after = found["at_initialize"], found["after_first_step"]
            assert sum(start["partitions"]) == pytest.approx(psi / RANKS, abs=RANKS), stage
            given = [start["partitions"]] if stage == "zero2" else [[]]
            assert start["optimizer_params"] == after["optimizer_params"] == given and start["are_partitions"], stage
            assert start["moments"] == [[0, 0]] * len(start["partitions"]), stage
            assert after["moments"] == [[n, n] for n in start["partitions"]], stage
