"""What the mixed-precision exercise's test cell calls: the learner's MixedShardedAdamW trained in bf16 on real
ranks, judged against the one-process fp32-master reference, or the mistake raised as AssertionError."""
from zerolab.handmade.core.learner import DEFAULT_HYPER, learner_cell
from zerolab.handmade.core import harness
from zerolab.handmade.mixed import verdict as mixed_verdict

MAX_GRAD_NORM = 0.1  # below the fixed model's gradient norm: every step clips


def mixed_precision(ranks, hyper=None, steps=4, max_grad_norm=MAX_GRAD_NORM, cell=None, name="MixedShardedAdamW"):
    """Train with the learner's MixedShardedAdamW on ``ranks`` gloo ranks; raise what it got wrong; the results."""
    hyper = dict(hyper or DEFAULT_HYPER)
    text = learner_cell(name, cell)
    job = {"kind": "zerolab.handmade.mixed.rank:run", "cell": text, "name": name, "hyper": hyper, "steps": steps,
           "max_grad_norm": max_grad_norm}
    return harness.run_checked(job, ranks, lambda results: mixed_verdict.problem(results, hyper, steps, max_grad_norm))
