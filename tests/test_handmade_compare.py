"""The side-by-side of lesson 08 (zerolab.handmade.side_by_side) on 2 gloo ranks, checked against independent sources:
one-process torch.optim.AdamW (losses and parameters), DeepSpeed's own partition of each parameter
(``ds_tensor.ds_numel``), torch.chunk's split of dim 0 (FSDP2's shards), and the collectives each design must
make. Nothing is left running."""
import pytest
import torch

from leftovers import ranks_left
from zerolab.handmade import side_by_side as compare
from zerolab.handmade.zero3 import model as deep

ATOL = 1e-5
RANKS = 2


@pytest.fixture(scope="module")
def measured():
    results = compare.side_by_side(ranks=RANKS, learner=False)
    assert not ranks_left(), "a rank outlived its run"
    return results


pytestmark = pytest.mark.slow


def _gap(a, b):
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b))


def test_every_system_trains_like_adamw_on_the_full_batch(measured):
    losses = deep.reference_losses(compare.DEFAULT_HYPER, 3)
    params = deep.reference(compare.DEFAULT_HYPER, 3)
    for rank in range(RANKS):
        assert set(measured[rank]) == set(compare.SYSTEMS)
        for system, result in measured[rank].items():
            assert _gap(result["losses"], losses) < ATOL, system
            assert _gap(result["params"], params) < ATOL, system


def test_zero3_shards_are_deepspeeds_per_parameter_partition(measured):
    for rank in range(RANKS):
        deepspeed = measured[rank]["DeepSpeed stage 3"]["shard_numels"]
        assert measured[rank]["ZeRO-3 (hand)"]["shard_numels"] == deepspeed
        assert measured[rank]["DeepSpeed stage 3"]["param_bytes"] == 4 * sum(deepspeed)
        assert measured[rank]["ZeRO-3 (hand)"]["param_bytes"] == 4 * sum(deepspeed)


def test_fsdp2_shards_dim_0_as_torch_chunk_does(measured):
    want = [torch.empty(p.shape).chunk(RANKS)[0].numel() for p in deep.build().parameters()]
    for rank in range(RANKS):
        assert measured[rank]["FSDP2"]["shard_numels"] == want


def test_each_design_makes_the_collectives_it_should(measured):
    psi = sum(p.numel() for p in deep.build().parameters())
    padded = sum(deep.padded_numel(p.numel(), RANKS) for p in deep.build().parameters())
    for rank in range(RANKS):
        ops = {system: {op: entry["elements"] for op, entry in result["collectives"].items()}
               for system, result in measured[rank].items()}
        assert ops["ZeRO-3 (hand)"] == {"all-gather": 2 * padded, "reduce-scatter": padded}
        # DeepSpeed's stage 3 with no parameter kept live gathers twice too; its reductions are the same
        assert ops["DeepSpeed stage 3, live 0 reuse 0"]["all-gather"] == 2 * padded
        assert ops["DeepSpeed stage 3, live 0 reuse 0"]["reduce-scatter"] == padded
        # ZeRO-1 by hand and DeepSpeed's stages 1 and 2 all-reduce every gradient, then all-gather the parameters
        # (DeepSpeed's flat buffer padded to a multiple of 2N: a few elements more)
        for system in ("ZeRO-1 (hand)", "DeepSpeed stage 1", "DeepSpeed stage 2"):
            assert psi <= ops[system]["all-reduce"] < psi + 2 * RANKS, system
            assert psi <= ops[system]["all-gather"] < psi + 2 * RANKS, system


def test_the_table_shows_the_padding_a_rounded_psi_would_hide(measured):
    psi = sum(p.numel() for p in deep.build().parameters())
    padding = sum(deep.padded_numel(p.numel(), RANKS) for p in deep.build().parameters()) - psi
    assert padding > 0, "the lesson's model must need padding for this table to show it"
    line = next(line for line in compare.table_text(measured).splitlines() if line.startswith("ZeRO-3 (hand)"))
    assert f"all-gather 2Ψ+{2 * padding}, reduce-scatter Ψ+{padding}" in line


def test_in_psi_names_the_elements_beyond_a_whole_multiple():
    assert compare.in_psi(1000, 1000) == "Ψ"
    assert compare.in_psi(1004, 1000) == "Ψ+4"
    assert compare.in_psi(1998, 1000) == "2Ψ-2"
    assert compare.in_psi(2, 1000) == "2 elements" and compare.in_psi(1, 1000) == "1 element"
    assert compare.in_psi(2040, 1000) == "2.04Ψ"


def test_zero3_holds_a_shard_of_everything(measured):
    for rank in range(RANKS):
        for system in ("ZeRO-3 (hand)", "DeepSpeed stage 3", "FSDP2"):
            result = measured[rank][system]
            assert result["param_bytes"] < 4 * sum(p.numel() for p in deep.build().parameters()) * 0.6, system
        assert (measured[rank]["ZeRO-3 (hand)"]["peak_param_bytes"]
                == measured[rank]["DeepSpeed stage 3, live 0 reuse 0"]["peak_param_bytes"])


def test_deepspeeds_collectives_counted_at_torch_equal_its_own_comm_layers_count(measured):
    """zero3_probe counts at torch.distributed; zerolab.run.meter counts at DeepSpeed's comm backend."""
    for rank in range(RANKS):
        for system, result in measured[rank].items():
            if system.startswith("DeepSpeed"):
                counted = {op: entry["elements"] for op, entry in result["collectives"].items()}
                assert counted == result["meter"], system


def test_the_learners_cell_runs_and_the_courses_stands_in_when_it_fails():
    from zerolab.handmade.core import harness
    from test_handmade_zero3 import solution_cell

    broken = solution_cell().replace("        mine /= self.world_size\n",
                                     "        mine /= self.world_size\n        raise ValueError('oops')\n")
    for cell, who in ((solution_cell(), "yours"), (broken, "course (yours raised ValueError)")):
        job = {"kind": "zerolab.handmade.side_by_side:run_rank", "steps": 2, "hyper": compare.DEFAULT_HYPER,
               "systems": ["ZeRO-3 (hand)"], "cells": {"ZeRO-3 (hand)": cell}}
        for rank_result in harness.run(job, RANKS):
            assert rank_result["ZeRO-3 (hand)"]["who"] == who
            assert _gap(rank_result["ZeRO-3 (hand)"]["losses"], deep.reference_losses(compare.DEFAULT_HYPER, 2)) < ATOL
    assert not ranks_left(), "a rank outlived its run"


def test_a_zero1_keeping_its_moments_outside_optimizer_state_shows_the_same_adam_bytes():
    """Exercise 2 lets the moments live anywhere; the side-by-side counts what the optimizer holds, not
    optimizer.state alone (it showed 0 for such a ZeRO-1). Its kept communication buffers are not moments."""
    from handmade_cases import ZERO1, mutate, solution_cell
    from zerolab.handmade.core import harness

    elsewhere = mutate(ZERO1, "state = self.state[p]",
                       'state = self.__dict__.setdefault("moments", {}).setdefault((index, start), {})')
    kept_buffers = mutate(ZERO1, "outgoing = torch.zeros(size)",
                          'outgoing = self.__dict__.setdefault("out", {}).setdefault(size, torch.zeros(size))')
    held = {}
    for name, cell in (("solution", solution_cell(ZERO1)), ("elsewhere", elsewhere), ("kept", kept_buffers)):
        job = {"kind": "zerolab.handmade.side_by_side:run_rank", "steps": 2, "hyper": compare.DEFAULT_HYPER,
               "systems": ["ZeRO-1 (hand)"], "cells": {"ZeRO-1 (hand)": cell}}
        results = harness.run(job, RANKS)
        assert all(r["ZeRO-1 (hand)"]["who"] == "yours" for r in results), name
        held[name] = [r["ZeRO-1 (hand)"]["optimizer_bytes"] for r in results]
    psi = sum(p.numel() for p in deep.build().parameters())
    assert all(8 * psi / RANKS - 64 <= b <= 8 * psi / RANKS + 64 for b in held["solution"]), held  # m and v: 1/N
    assert held["elsewhere"] == held["kept"] == held["solution"], held
    assert not ranks_left(), "a rank outlived its run"
