"""What lesson 08's test cells call: take the learner's cell, run it on real ranks, raise the named mistake.

Each function raises AssertionError with one message (no traceback of ours) and returns what the lesson may
print once the test has passed.
"""
from zerolab.handmade.core import harness
from zerolab.handmade.core.learner import DEFAULT_HYPER, learner_cell
from zerolab.handmade.zero1 import verdict
from zerolab.lesson import source


def check_partition(partition, cases, cell=None):
    """Run the learner's partition on (numels, world_size) cases and check the properties of each answer.

    Its cell (``cell``, else the kernel's last cell defining ``partition``) may not use the course's reference
    partition: that scores 0 with a message saying what to write instead."""
    _refuse_reference(partition, cell)
    for numels, world_size in cases:
        first = partition(list(numels), world_size)
        problem = verdict.partition_problem(first, list(numels), world_size)
        if problem is None and _plain(partition(list(numels), world_size)) != _plain(first):
            problem = f"partition({list(numels)}, {world_size}) gives a different answer on a second call"
        if problem:
            raise AssertionError(problem)


def zero1(ranks, hyper=None, steps=4, name="ShardedAdamW", cell=None, groups="no_decay_on_biases"):
    """Train the learner's ShardedAdamW on ``ranks`` gloo ranks; raise what it got wrong. ``groups``: a layout of
    zerolab.handmade.core.model.param_groups (model.NO_DECAY_ON_BIASES, the default: weights decayed, biases not; None:
    one group)."""
    hyper = dict(hyper or DEFAULT_HYPER)
    job = {"kind": "zerolab.handmade.zero1.rank:zero1_run", "source": learner_cell(name, cell), "hyper": hyper, "steps": steps, "groups": groups}
    return harness.run_checked(job, ranks, lambda results: verdict.zero1_problem(results, hyper, steps, groups))


def _refuse_reference(partition, cell):
    module = getattr(partition, "__module__", None) or ""
    used = "zerolab.handmade" if module.startswith("zerolab") else None
    if used is None:
        try:
            text = cell if cell is not None else source.cell_defining("partition")
        except source.SourceMissing:
            text = None  # called outside a notebook with a function: its module was checked above
        used = source.reference_use(text) if text else None
    if used:
        raise AssertionError(f"your partition uses the course's reference answer ({used}); this exercise scores 0 "
                             "until partition computes the shares itself: pad the total to a multiple of 2N, cut "
                             "it into N equal shares and turn each share into (param_index, start, end) ranges, in "
                             "your own code")


def _raise(problem):
    if problem:
        raise AssertionError(problem)


def _plain(value):
    try:
        return [[tuple(item) for item in ranges] for ranges in value]
    except TypeError:
        return repr(value)


def deepspeed_stage1(stage1_config, ranks, hyper=None, steps=4):
    """Train DeepSpeed stage 1 with the learner's config on ``ranks`` ranks; raise where it departs from AdamW."""
    from zerolab.handmade.core import model as fixed
    from zerolab.lesson.checks import plain

    hyper = dict(hyper or DEFAULT_HYPER)
    config = plain(stage1_config(dict(hyper), fixed.GLOBAL_BATCH, ranks), "stage1_config(...)")
    _raise(verdict.stage1_config_problem(config) or verdict.batch_problem(config, fixed.GLOBAL_BATCH, ranks))
    scale = fixed.DEEPSPEED_LOSS_SCALE
    job = {"kind": "zerolab.handmade.zero1.rank:deepspeed_run", "preimport_deepspeed": True, "config": config,
           "steps": steps, "loss_scale": scale}
    return harness.run_checked(job, ranks,
                               lambda results: verdict.deepspeed_problem(results, hyper, steps, config, scale),
                               timeout=120, failed="DeepSpeed did not train with your config: ")


def side_by_side(stage1_config, ranks=2, hyper=None, steps=4, cell=None):
    """The learner's ShardedAdamW and DeepSpeed stage 1 in the same ranks: per-rank bytes and parameter gap."""
    from zerolab.handmade.core import model as fixed

    hyper = dict(hyper or DEFAULT_HYPER)
    config = stage1_config(dict(hyper), fixed.GLOBAL_BATCH, ranks)
    job = {"kind": "zerolab.handmade.zero1.rank:zero1_bytes_run", "source": learner_cell("ShardedAdamW", cell),
           "config": config, "hyper": hyper, "steps": steps}
    return harness.run_checked(job, ranks, timeout=120)
