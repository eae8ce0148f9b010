"""Rank side of the ZeRO-2 exercise (job kind "zerolab.handmade.zero2_rank:run"): the learner's Zero2Gradients
trains the deeper model with the course's ZeRO-1 optimizer, while the grader counts its collectives and samples
its gradient memory.

The collective counter (zerolab.handmade.traffic) is installed before the learner's cell runs. Memory is sampled
in the first step only (zerolab.handmade.zero2_memory): at a grader hook on every parameter, registered before the
learner's, so it runs when the gradient has just arrived and the learner has not yet seen it; before every
collective the learner makes; and when backward returns.
"""
import torch

from zerolab.handmade import model as fixed
from zerolab.handmade import zero2_model as deep
from zerolab.handmade.rank import _hyper, _local_batch, learner_namespace
from zerolab.handmade.sharded import ShardedAdamW
from zerolab.handmade.traffic import CollectiveCounter
from zerolab.handmade.zero2_memory import GradientMemory


def run(job, _namespace=None):
    memory = None
    counter = CollectiveCounter(on_call=lambda op, tensors: memory and memory.sample(f"before a {op}")).install()
    namespace = learner_namespace(job["cell"])
    net = deep.build()
    optimizer = ShardedAdamW(net.parameters(), **_hyper(job["hyper"]))
    params = list(net.parameters())
    memory = GradientMemory(params)
    for index, p in enumerate(params):
        p.register_post_accumulate_grad_hook(lambda p, index=index: memory.sample(f"when parameter {index}'s "
                                                                                  "gradient arrived"))
    learner = namespace[job.get("name", "Zero2Gradients")](net, job["bucket_elements"])
    result = {"owned": _plain_ranges(getattr(learner, "owned", None)), "traffic": []}
    for step in range(job["steps"]):
        optimizer.zero_grad()
        inputs, targets = _local_batch(step)
        memory.active = step == 0
        counter.label = step
        loss = fixed.loss(net, inputs, targets)
        memory.ignore(inputs, targets, loss)
        loss.backward()
        memory.sample("when backward returned")
        counter.label, memory.active = None, False
        result["traffic"].append(counter.summary(step))
        if step == 0:
            result.update(memory_peak=memory.peak, memory_where=memory.where, **_gradients(params))
            if not _all_ranks(_shards_usable(params, optimizer.owned)):
                return result  # the verdict names what is missing; the optimizer could not step
        optimizer.step()
    result["params"] = fixed.flat(net)
    return result


def _gradients(params):
    """After the first backward: which parameters still have .grad, and each one's grad_shard as a list."""
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
