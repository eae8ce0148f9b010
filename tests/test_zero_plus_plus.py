"""ZeRO++ in lesson 10: the ZeRO++ blog's table of cross-node bytes (zerolab.engine.comm.zero_plus_plus_cross_node),
and hpZ measured on 4 CPU ranks as 2 nodes of 2 (zerolab.run.hpz), against the bytes of the model itself."""
import inspect

import pytest

from leftovers import ranks_left
from zerolab.engine import comm
from zerolab.run import hpz


def test_the_blogs_table_of_m_per_collective():
    """DeepSpeed's ZeRO++ blog (blogs/zeropp): ZeRO moves M, M, M across nodes (3M); ZeRO++ 0.5M, 0, 0.25M (0.75M)."""
    model = 1_000_000
    assert list(comm.zero_plus_plus_cross_node(model).values()) == [model, model, model]
    assert list(comm.zero_plus_plus_cross_node(model, qwz=True, hpz=True, qgz=True).values()) == \
        [0.5 * model, 0, 0.25 * model]
    parts = {"qwz": 0.5 * model, "hpz": model, "qgz": 0.75 * model}  # what each part alone takes off 3M
    for part, saved in parts.items():
        assert sum(comm.zero_plus_plus_cross_node(model, **{part: True}).values()) == 3 * model - saved, part


@pytest.fixture(scope="module")
def runs():
    found = hpz.compare(progress=False)
    assert not ranks_left(), "a rank outlived its run"
    return found


@pytest.mark.slow
def test_hpz_moves_the_backward_all_gather_inside_the_node_with_the_same_losses(runs):
    """Claim hpz-keeps-backward-all-gather-in-node: in the regime the blog counts (reuse distance and prefetch 0), on 4
    CPU ranks as 2 nodes of 2, plain ZeRO-3 all-gathers 2M across nodes per step and reduce-scatters M; with
    zero_hpz_partition_size 2 the all-gather across nodes is M (forward's) and backward's M moves inside the node, the
    reduce-scatter is unchanged, and every step's loss is the same. Each rank's secondary partition is twice its
    primary one (the model over 2 ranks, not 4). M is counted from the model itself: 2 bytes per bf16 element."""
    import torch

    from zerolab.run.model import ModelSpec, TinyGPT

    with torch.device("meta"):
        model_bytes = 2 * sum(p.numel() for p in TinyGPT(ModelSpec()).parameters())
    assert len(runs) == hpz.RANKS
    for rank, found in enumerate(runs):
        plain, with_hpz = found["ZeRO-3"], found["ZeRO-3 + hpZ"]
        assert plain["cross_node"]["all-gather"] == 2 * model_bytes and plain["in_node"] == {}, (rank, plain)
        assert plain["cross_node"]["reduce-scatter"] == model_bytes, (rank, plain)
        assert with_hpz["cross_node"]["all-gather"] == model_bytes, (rank, with_hpz)
        assert with_hpz["in_node"] == {"all-gather": model_bytes}, (rank, with_hpz)
        assert with_hpz["cross_node"]["reduce-scatter"] == model_bytes, (rank, with_hpz)
        small = {op: nbytes for op, nbytes in plain["cross_node"].items() if op not in ("all-gather", "reduce-scatter")}
        assert {op: nbytes for op, nbytes in with_hpz["cross_node"].items() if op in small} == small
        assert sum(small.values()) < 0.01 * model_bytes, small  # bookkeeping, not the model
        assert with_hpz["losses"] == plain["losses"] and len(plain["losses"]) == hpz.STEPS
        assert with_hpz["secondary_elements"] == 2 * with_hpz["primary_elements"] > 0, with_hpz
        assert plain["secondary_elements"] == 0


def test_the_table_names_both_runs_and_where_the_bytes_went(runs):
    shown = hpz.table(runs)
    assert "ZeRO-3 + hpZ" in shown and f"{runs[0]['ZeRO-3 + hpZ']['in_node']['all-gather']:,}" in shown


def test_fully_shards_docstring_says_what_lesson_10_says():
    """Claim fsdp2-reshard-after-forward-int: torch 2.13's fully_shard takes reshard_after_forward as an int, "the
    world size to reshard to after forward", and with a 2-D mesh shards along one dimension and replicates along the
    other (HSDP)."""
    from torch.distributed.fsdp import fully_shard

    doc = " ".join(inspect.getdoc(fully_shard).split())
    assert "reshard_after_forward (Optional[Union[bool, int]])" in doc
    assert "If an ``int``, then this represents the world size to reshard to after forward." in doc
    assert "If 2D, then parameters are sharded across the 1st dim and replicated across the 0th dim (HSDP)" in doc
