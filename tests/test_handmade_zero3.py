"""Lesson 08's ZeRO-3 exercise on real gloo ranks: the solution passes on 2 and 3 ranks (with and without
prefetch), each known wrong implementation fails with the message that names its mistake, and no rank outlives
a run. The measurements are checked against independent sources: the per-parameter padding against DeepSpeed's
own partition_parameters, the numbers against one-process torch.optim.AdamW."""
from pathlib import Path

import pytest

from leftovers import cpu_seconds, ranks_left
import handmade_cases
from handmade_cases import HIDDEN, WRONG_ZERO3 as WRONG
from zerolab.handmade.zero3 import grade as zero3_grade, verdict as zero3_verdict
from zerolab.handmade.zero3 import model as deep

ROOT = Path(__file__).resolve().parent.parent
GRADE_ID = "ex5_zero3"


def solution_cell():
    """The exercise cell as a learner who solved it would have it (markers removed)."""
    return handmade_cases.solution_cell(GRADE_ID)


def test_per_parameter_padding_is_deepspeeds():
    """zero3_model.padded_numel against DeepSpeed's own Init._padding_size, on every parameter, 2 and 3 ranks."""
    from types import SimpleNamespace

    from deepspeed.runtime.zero.partition_parameters import Init

    for world_size in (2, 3):
        fake = SimpleNamespace(_partition_world_size=lambda param: world_size)
        for p in deep.build().parameters():
            param = SimpleNamespace(ds_numel=p.numel())
            want = p.numel() + Init._padding_size(fake, param)
            assert deep.padded_numel(p.numel(), world_size) == want


def test_the_limits_leave_no_room_for_a_rank_that_keeps_every_layer():
    for world_size in (2, 3):
        sizes = zero3_verdict.layout(world_size)
        assert zero3_verdict.memory_limit(world_size) < sizes["all_bytes"] + sizes["shard_bytes"] - sizes["slack_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("repeat", range(3))
def test_the_solution_passes_what_its_test_cell_runs(repeat):
    """The visible (2 ranks) and hidden (3 ranks) calls of the test cell, three times in a row (races would show
    as flakes). CPU seconds, not wall time: the machine running this suite is shared."""
    started = cpu_seconds()
    results = zero3_grade.zero3(2, cell=solution_cell())
    zero3_grade.zero3(3, hyper=HIDDEN, steps=4, cell=solution_cell())
    cpu = cpu_seconds() - started
    print(f"ZeRO-3 visible + hidden: {cpu:.1f} CPU seconds")
    assert cpu / 2 < 90
    sizes = zero3_verdict.layout(2)
    for result in results:
        step = result["steps"][0]
        assert step["collectives"]["all-gather"]["elements"] == 2 * sizes["psi_padded"]
        assert step["collectives"]["reduce-scatter"]["elements"] == sizes["psi_padded"]
        assert "all-reduce" not in step["collectives"]
    assert not ranks_left(), "a rank outlived its run"


@pytest.mark.slow
def test_the_solution_passes_without_prefetch_and_holds_less_at_its_peak():
    with_prefetch = zero3_grade.run(2, reference=True, prefetch=True)
    without = zero3_grade.run(2, reference=True, prefetch=False)
    assert zero3_verdict.zero3_problem(without, zero3_grade.DEFAULT_HYPER, 3) is None
    peak = [max(s["peak_param_bytes"] for s in r["steps"] if s["peak_param_bytes"] is not None) for r in (
        with_prefetch[0], without[0])]
    assert peak[1] < peak[0], peak
    assert not ranks_left(), "a rank outlived its run"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WRONG))
def test_each_wrong_implementation_gets_its_named_verdict(name):
    build, fragment = WRONG[name]
    with pytest.raises(AssertionError) as failure:
        zero3_grade.zero3(2, cell=build())
    assert fragment in str(failure.value), str(failure.value)
    assert not ranks_left(), "a rank outlived its run"


def _clean_run(world_size, **changes):
    sizes = zero3_verdict.layout(world_size)
    step = {"collectives": {"all-gather": {"calls": 24, "elements": 2 * sizes["psi_padded"], "bytes": 0},
                            "reduce-scatter": {"calls": 12, "elements": sizes["psi_padded"], "bytes": 0}},
            "matmuls": sizes["layers"], "peak_param_bytes": sizes["shard_bytes"], "peak_at": "matmul"}
    result = {"problem": None, "construction": dict(step, collectives={}, matmuls=0), "steps": [step],
              "baseline_bytes": 0, "full_grads_kept": [], "params": deep.reference(zero3_grade.DEFAULT_HYPER, 1)}
    result.update(changes)
    return [result] * world_size


@pytest.mark.parametrize("changes, fragment", [
    ({"problem": {"kind": "missing", "name": "Zero3"}}, "missing class: your cell defines no Zero3"),
    ({"problem": {"kind": "not_a_list", "type": "generator"}}, "wrong type: shards() returned a generator"),
    ({"problem": {"kind": "count", "got": 6, "want": 12}}, "wrong count: shards() returned 6 tensors"),
    ({"construction": {"collectives": {}, "matmuls": 0, "peak_param_bytes": 10 ** 6, "peak_at": "matmul"}},
     "the whole parameters are not freed after sharding"),
    ({"params": deep.reference(zero3_grade.DEFAULT_HYPER, 1, grad_scale=2)}, "summed over the 2 ranks"),
    ({"params": deep.reference(zero3_grade.DEFAULT_HYPER, 1, seed=1)}, "differ from torch.optim.AdamW"),
])
def test_what_the_verdict_names(changes, fragment):
    assert zero3_verdict.zero3_problem(_clean_run(2), zero3_grade.DEFAULT_HYPER, 1) is None
    assert fragment in zero3_verdict.zero3_problem(_clean_run(2, **changes), zero3_grade.DEFAULT_HYPER, 1)


def test_more_traffic_than_two_gathers_and_a_reduce_scatter_is_named():
    results = _clean_run(2)
    step = dict(results[0]["steps"][0])
    step["collectives"] = dict(step["collectives"], broadcast={"calls": 1, "elements": 5000, "bytes": 0})
    results = _clean_run(2, steps=[step])
    problem = zero3_verdict.zero3_problem(results, zero3_grade.DEFAULT_HYPER, 1)
    assert "more than gathering the parameters twice" in problem
