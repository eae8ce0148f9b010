"""Rank side of the ZeRO-2 exercise (job kind "zerolab.handmade.zero2.rank:run"): the learner's Zero2Gradients
trains the deeper model with the course's ZeRO-1 optimizer, while the grader counts its collectives and samples
its gradient memory.

The collective counter (zerolab.handmade.core.traffic) is installed before the learner's cell runs. Memory is sampled
in the first two steps (zerolab.handmade.zero2.memory; the second is where a learner's state from the first shows,
and every sample scans all live tensors, so later steps would cost seconds and find nothing new): at a grader hook
on every parameter, registered before the learner's, so it runs when the gradient has just arrived and the learner
has not yet seen it; before every collective the learner makes; and when backward returns. After each backward
the rank reports which parameters still hold a .grad, each grad_shard, and the parameters that backward started
from: a learner whose hooks work in the first backward only (a counter never reset) is wrong from the second on.
"""
import gc

import torch

from zerolab.handmade.core import model as fixed
from zerolab.handmade.zero2 import model as deep
from zerolab.handmade.core.rank import adamw_kwargs, learner_namespace, local_batch
from zerolab.handmade.zero1.reference import ShardedAdamW
from zerolab.handmade.core.traffic import CollectiveCounter
from zerolab.handmade.zero2.memory import GradientMemory


MEMORY_STEPS = (0, 1)


def run(job, _namespace=None):
    memory = None
    counter = CollectiveCounter(on_call=lambda op, tensors: memory and memory.sample(f"before a {op}")).install()
    namespace = learner_namespace(job["cell"])
    net = deep.build()
    optimizer = ShardedAdamW(net.parameters(), **adamw_kwargs(job["hyper"]))
    params = list(net.parameters())
    memory = GradientMemory(params)
    for index, p in enumerate(params):
        p.register_post_accumulate_grad_hook(lambda p, index=index: memory.sample(f"when parameter {index}'s "
                                                                                  "gradient arrived"))
    learner = namespace[job.get("name", "Zero2Gradients")](net, job["bucket_elements"])
    result = {"owned": _plain_ranges(getattr(learner, "owned", None)), "traffic": [], "steps": []}
    for step in range(job["steps"]):
        optimizer.zero_grad()
        if step in MEMORY_STEPS:
            gc.collect()  # garbage of the step before (cycles not yet collected) is no gradient this step holds
        inputs, targets = local_batch(step)
        memory.active, memory.step = step in MEMORY_STEPS, step
        counter.label = step
        started_from = fixed.flat(net)
        loss = fixed.loss(net, inputs, targets)
        memory.ignore(inputs, targets, loss, *_adam_state(optimizer))
        loss.backward()
        memory.sample("when backward returned")
        counter.label, memory.active = None, False
        result["traffic"].append(counter.summary(step))
        result["steps"].append({"started_from": started_from, **_gradients(params)})
        result.update(memory_peak=memory.peak, memory_where=memory.where)
        if not _all_ranks(_shards_usable(params, optimizer.owned)):
            return result  # the verdict names what is missing; the optimizer could not step
        optimizer.step()
    result["params"] = fixed.flat(net)
    return result


def _adam_state(optimizer):
    """The grader's optimizer state (its moments, from the first step on): not the learner's gradient memory."""
    return [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]


def _gradients(params):
    """After a backward: which parameters still have .grad, and each one's grad_shard as a list."""
    grads, shards = [], []
    for p in params:
        shard = getattr(p, "grad_shard", None)
        grads.append(p.grad is not None)
        shards.append(shard.detach().float().reshape(-1).tolist() if torch.is_tensor(shard) else
                      (None if shard is None else type(shard).__name__))
    return {"grads": grads, "shards": shards}


def _shards_usable(params, owned):
    for index, start, end in owned:
        shard = getattr(params[index], "grad_shard", None)
        if params[index].grad is None and not (torch.is_tensor(shard) and shard.numel() == end - start):
            return False
    return True


def _all_ranks(flag):
    """Whether ``flag`` holds on every rank (one all-reduce the counter does not count: it has no label then)."""
    import torch.distributed as dist

    agreed = torch.tensor([int(flag)])
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    return bool(agreed.item())


def _plain_ranges(owned):
    try:
        return [[int(i), int(s), int(e)] for i, s, e in owned]
    except (TypeError, ValueError):
        return None
