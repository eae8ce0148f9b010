"""What the ZeRO-2 exercise's test cell calls: the learner's Zero2Gradients on real ranks, judged, or the mistake
raised as AssertionError with one message."""
from zerolab.handmade.core.learner import DEFAULT_HYPER, learner_cell
from zerolab.handmade.core import harness
from zerolab.handmade.zero2 import verdict as zero2_verdict

BUCKET_ELEMENTS = 1500  # a bucket of one or two of the deeper model's layers


def zero2_hooks(ranks, hyper=None, steps=3, bucket_elements=BUCKET_ELEMENTS, cell=None, name="Zero2Gradients"):
    """Train with the learner's Zero2Gradients on ``ranks`` gloo ranks; raise what it got wrong; the ranks' results."""
    hyper = dict(hyper or DEFAULT_HYPER)
    text = learner_cell(name, cell)
    job = {"kind": "zerolab.handmade.zero2.rank:run", "cell": text, "name": name, "hyper": hyper, "steps": steps,
           "bucket_elements": bucket_elements}
    failed = "" if bucket_elements == BUCKET_ELEMENTS else f"with bucket_elements={bucket_elements}: "
    judged = lambda results: zero2_verdict.problem(results, hyper, steps, bucket_elements)  # noqa: E731
    return harness.run_checked(job, ranks, judged, failed=failed)
