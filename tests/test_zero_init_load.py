"""Lesson 10 section 8: a Hugging Face Llama built on 2 CPU ranks, plainly and inside deepspeed.zero.Init
(zerolab.run.load), against the model's own parameter sizes and zerolab.engine.host_memory.built_on_every_rank."""
import math

import pytest
import torch

from leftovers import ranks_left
from zerolab.engine import host_memory
from zerolab.run import load

pytestmark = pytest.mark.slow
PLAIN, ZERO_INIT = load.MODES


@pytest.fixture(scope="module")
def sizes():
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        return [p.numel() for p in LlamaForCausalLM(LlamaConfig(**load.MODEL)).parameters()]


@pytest.fixture(scope="module")
def runs():
    found = load.compare(progress=False)
    assert not ranks_left(), "a rank outlived its run"
    return found


def test_zero_init_keeps_each_ranks_share_and_a_plain_build_the_whole_model(runs, sizes):
    """Claim zero-init-partitions-as-modules-are-built: built plainly, every rank holds every parameter whole (fp32:
    4 bytes an element); built inside deepspeed.zero.Init, each rank holds its ZeRO-3 share of each parameter, padded
    to a multiple of the 2 ranks, and its resident memory grows by about that much rather than by the whole model."""
    whole = 4 * sum(sizes)
    share = 4 * sum(math.ceil(size / load.RANKS) for size in sizes)
    assert len(runs) == load.RANKS
    for rank, found in enumerate(runs):
        assert found[PLAIN]["held"] == whole and found[ZERO_INIT]["held"] == share, (rank, found)
        assert found[PLAIN]["params"] == found[ZERO_INIT]["params"] == sum(sizes)
        assert found[PLAIN]["largest"] == max(sizes) == load.MODEL["vocab_size"] * load.MODEL["hidden_size"]
        assert 0.9 * whole <= found[PLAIN]["grew"] <= 1.3 * whole, (rank, found)
        assert found[ZERO_INIT]["grew"] <= 0.7 * whole, (rank, found)  # half the model, and some transient


def test_the_engines_rule_is_the_measured_bytes(runs, sizes):
    for zero_init, mode in ((False, PLAIN), (True, ZERO_INIT)):
        assert host_memory.built_on_every_rank(sizes, 4, load.RANKS, zero_init) == runs[0][mode]["held"]
    assert host_memory.built_on_every_rank(sum(sizes), 2, 8, False) == 2 * sum(sizes)


def test_the_table_names_both_builds(runs):
    shown = load.table(runs)
    assert PLAIN in shown and ZERO_INIT in shown
