"""Muon's optimizer state on 2 CPU ranks (DeepSpeed 0.19.8's optimizer type "Muon") against zerolab.engine.muon, and
against zerolab.engine.memory.estimate(optimizer="muon") where the shapes do not matter: stages 1-3, bf16 and fp32.

The model (tests/muon_runs.py) has three matrices of different shapes, so Muon's sorting shows, and on 2 ranks
the middle one of the sorted three straddles the ranks' partitions at stages 1-2. `zerolab run --optimizer muon`
predicts the same rank by rank for the course's tiny GPT."""
import math

import pytest

from conftest import probe_launcher
from leftovers import ranks_left
from zerolab.engine import memory, muon

pytestmark = pytest.mark.slow
RANKS = 2
CASES = [(1, "bf16"), (2, "bf16"), (3, "bf16"), (2, "fp32")]


@pytest.fixture(scope="module")
def measured():
    """[rank][case] what each rank reported."""
    from zerolab.handmade.core import harness

    with probe_launcher():
        results = harness.run({"kind": "muon_runs:states", "cases": CASES, "preimport_deepspeed": True}, RANKS,
                              timeout=300, progress=False)
    assert not ranks_left(), "a rank outlived its run"
    return results


@pytest.mark.parametrize("index", range(len(CASES)))
def test_each_rank_holds_what_zerolab_engine_muon_says(measured, index):
    for rank, cases in enumerate(measured):
        case = cases[index]
        assert case["optimizer"] == "MuonWithAuxAdam" and case["other_state"] == [], case
        predicted = muon.rank_bytes(case["shapes"], case["use_muon"], case["stage"], RANKS, rank, case["precision"])
        assert {key: case[key] for key in predicted} == predicted, (rank, case)
        assert case["momentum_dtypes"] == ["torch.bfloat16" if case["precision"] == "bf16" else "torch.float32"]


def test_a_matrix_straddling_two_partitions_keeps_its_whole_momentum_on_both_ranks(measured):
    """At stages 1-2 the ranks together hold more momentum than there are Muon elements (the straddling matrix's
    twice); at stage 3, each parameter partitioned on its own, exactly one copy."""
    for index, (stage, precision) in enumerate(CASES):
        shapes, tagged = measured[0][index]["shapes"], measured[0][index]["use_muon"]
        elements = sum(math.prod(shape) for shape, muon_step in zip(shapes, tagged) if muon_step)
        held = sum(cases[index]["momentum"] for cases in measured) // muon.ELEMENT[precision]
        sorted_sizes = [math.prod(shape) for shape in muon.muon_order([s for s, t in zip(shapes, tagged) if t])]
        assert sorted_sizes == [9216, 6144, 6144], "the model no longer has a matrix straddling the partitions"
        assert held == (elements + sorted_sizes[1] if stage < 3 else elements), (stage, held, elements)


def test_the_paper_style_estimate_matches_stage_3_where_every_parameter_divides(measured):
    """memory.estimate(optimizer="muon") counts 4 bytes of master weight per parameter, the momentum in the training
    dtype for the Muon parameters and Adam's 8 bytes for the rest; at stage 3 on 2 ranks (every size even) that is
    each rank's figure to the byte."""
    index = CASES.index((3, "bf16"))
    shapes, tagged = measured[0][index]["shapes"], measured[0][index]["use_muon"]
    params = sum(math.prod(shape) for shape in shapes)
    muon_params = sum(math.prod(shape) for shape, muon_step in zip(shapes, tagged) if muon_step)
    parts = memory.estimate(params, 3, RANKS, precision="bf16", optimizer="muon", muon_params=muon_params).breakdown
    for cases in measured:
        assert cases[index]["master_weights"] == parts["gpu"]["master_weights"]
        assert cases[index]["momentum"] + cases[index]["adam_moments"] == parts["gpu"]["optimizer_states"]


def test_what_the_muon_model_does_not_cover_is_refused():
    for options, words in (({"stage": 0}, "stages 1-3"), ({"stage": 2, "offload_optimizer": "cpu"}, "offload"),
                           ({"stage": 2, "muon_params": 10**9}, "from 0 to params"),
                           ({"stage": 2, "accounting": "deepspeed"}, "paper accounting only")):
        arguments = {"muon_params": 100, **options}
        stage = arguments.pop("stage")
        with pytest.raises(ValueError, match=words):
            memory.estimate(1000, stage, 2, precision="bf16", optimizer="muon", **arguments)


def test_zerolab_run_predicts_each_ranks_muon_state():
    """`zerolab run --optimizer muon` (zerolab.run with make_config(optimizer="muon")) trains the tiny GPT with
    DeepSpeed's Muon and predicts each rank's master weights and optimizer states to the byte, rank by rank: at stage
    2 the ranks differ (a matrix straddles the partitions) and the table says why."""
    from zerolab.run import make_config, run

    result = run(make_config(stage=2, optimizer="muon"), ranks=RANKS, steps=2, progress=False)
    assert result.setup["update_rule"] == "muon" and result.setup["optimizer"] == "MuonWithAuxAdam"
    for rank, predicted in zip(result.ranks, result.predicted_ranks):
        for key in ("master_weight_bytes", "optimizer_state_bytes"):
            assert rank[key] == predicted[key], (key, rank[key], predicted[key])
    states = [rank["optimizer_state_bytes"] for rank in result.ranks]
    assert len(set(states)) == 2, "no matrix of the tiny GPT straddles the partitions any more"
    assert "keeps its whole momentum on both" in result.table()
    assert result.loss[-1] < result.loss[0]


def test_a_muon_run_it_cannot_predict_is_refused_before_any_rank_starts():
    import subprocess
    import sys

    for args in (["--offload-optimizer", "cpu"], ["--stage", "0"]):
        done = subprocess.run([sys.executable, "-m", "zerolab", "run", "--optimizer", "muon", "--stage", "2", *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert [line for line in done.stderr.splitlines() if line.startswith("zerolab:")] == \
            [line for line in done.stderr.splitlines() if line.strip()], done.stderr
        assert "without offload" in done.stderr and "rank 0" not in done.stderr, done.stderr
