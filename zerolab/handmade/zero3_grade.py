"""What lesson 08's ZeRO-3 test cell calls: run the learner's Zero3 on real ranks and raise the named mistake."""
from zerolab.handmade import harness, zero3_verdict
from zerolab.handmade.grade import learner_cell

DEFAULT_HYPER = {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}
KIND = "zerolab.handmade.zero3_rank:run"


ACCUMULATION = {"steps": 2, "micro_steps": 2}  # the second run: two backward() calls before each step


def zero3(ranks, hyper=None, steps=3, name="Zero3", cell=None):
    """Train the learner's ``Zero3`` on ``ranks`` gloo ranks; AssertionError naming what it got wrong. Then, once
    that run is right, a short run with gradient accumulation: each step's .grad must add up two backward()s."""
    hyper = dict(hyper or DEFAULT_HYPER)
    results = run(ranks, hyper=hyper, steps=steps, name=name, cell=cell)
    problem = zero3_verdict.zero3_problem(results, hyper, steps)
    if problem:
        raise AssertionError(problem)
    accumulated = run(ranks, hyper=hyper, name=name, cell=cell, **ACCUMULATION)
    problem = zero3_verdict.accumulation_problem(accumulated, hyper, ACCUMULATION["steps"])
    if problem:
        raise AssertionError(problem)
    return results


def run(ranks, hyper=None, steps=3, name="Zero3", cell=None, prefetch=None, reference=False, micro_steps=1):
    """Each rank's measurements of one run: the learner's cell, or the course's own Zero3 with ``reference``."""
    job = {"kind": KIND, "hyper": dict(hyper or DEFAULT_HYPER), "steps": steps, "name": name,
           "micro_steps": micro_steps}
    if not reference:
        job["zero3_source"] = learner_cell(name, cell)
    if prefetch is not None:
        job["prefetch"] = prefetch
    try:
        return harness.run(job, ranks)
    except harness.RanksFailed as failure:
        raise AssertionError(str(failure)) from None
