"""What lesson 08's ZeRO-3 test cell calls: run the learner's Zero3 on real ranks and raise the named mistake."""
from zerolab.handmade.core import harness
from zerolab.handmade.core.learner import DEFAULT_HYPER, learner_cell
from zerolab.handmade.zero3 import verdict as zero3_verdict

KIND = "zerolab.handmade.zero3.rank:run"
ACCUMULATION = {"steps": 2, "micro_steps": 2}  # the second run: two backward() calls before each step


def zero3(ranks, hyper=None, steps=3, name="Zero3", cell=None):
    """Train the learner's ``Zero3`` on ``ranks`` gloo ranks; AssertionError naming what it got wrong. Then, once
    that run is right, a short run with gradient accumulation: each step's .grad must add up two backward()s."""
    hyper = dict(hyper or DEFAULT_HYPER)
    results = run(ranks, hyper=hyper, steps=steps, name=name, cell=cell,
                  verdict=lambda results: zero3_verdict.zero3_problem(results, hyper, steps))
    run(ranks, hyper=hyper, name=name, cell=cell, **ACCUMULATION,
        verdict=lambda results: zero3_verdict.accumulation_problem(results, hyper, ACCUMULATION["steps"]))
    return results


def run(ranks, hyper=None, steps=3, name="Zero3", cell=None, prefetch=None, reference=False, micro_steps=1,
        verdict=None):
    """Each rank's measurements of one run: the learner's cell, or the course's own Zero3 with ``reference``;
    ``verdict(results)``'s problem raised as AssertionError."""
    job = {"kind": KIND, "hyper": dict(hyper or DEFAULT_HYPER), "steps": steps, "name": name,
           "micro_steps": micro_steps}
    if not reference:
        job["zero3_source"] = learner_cell(name, cell)
    if prefetch is not None:
        job["prefetch"] = prefetch
    return harness.run_checked(job, ranks, verdict)
