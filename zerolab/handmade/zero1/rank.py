"""Rank side of lesson 08's ZeRO-1 exercises: the learner's ShardedAdamW trained on the fixed model
(job kind "zerolab.handmade.zero1.rank:zero1_run"), beside DeepSpeed stage 1 ("...:zero1_bytes_run") and DeepSpeed
stage 1 alone ("...:deepspeed_run"). The rank process, the learner's namespace and the failure context are
zerolab.handmade.core.rank's.
"""
from zerolab.handmade.core import rank as core_rank

GRAD_SHARD_CONTEXT = {
    "before": "with each .grad None and the averaged gradient of the rank's own elements in .grad_shard (how "
              "exercise 3 hands gradients over)",
    "after": "when a parameter has no .grad, use its .grad_shard as it is (it holds only this rank's elements), "
             "and skip the parameters with neither"}


def zero1_run(job, namespace):
    from zerolab.handmade.core import live
    from zerolab.handmade.core import model as fixed
    from zerolab.handmade.zero1 import verdict

    hyper, steps, groups = job["hyper"], job["steps"], job.get("groups")
    net = fixed.build()
    numels = fixed.group_numels(net, groups)
    optimizer = namespace["ShardedAdamW"](fixed.param_groups(net, groups), **core_rank.adamw_kwargs(hyper))
    owned = _everyones_owned(optimizer)
    if None not in owned and verdict.ownership_problem(owned, numels, groups):
        return {"owned": _mine(owned)}  # training would wait in collectives of different sizes until the timeout
    # measured: the second step, where the moments exist and buffers have been reused
    memory, all_gathered, measured = None, None, min(1, steps - 1)
    for step in range(steps):
        optimizer.zero_grad()
        core_rank.local_loss(net, step).backward()
        if step == measured:
            live.forget_collectives()
        optimizer.step()
        if step == measured:
            memory, all_gathered = rank_memory(net), live.all_gathered_elements()
    owned = _everyones_owned(optimizer)  # `owned` may be filled in by step()
    as_asked = None not in owned and not (verdict.ownership_problem(owned, numels, groups)
                                          or verdict.group_partition_problem(owned, groups))

    decay = dict(lr=0.1, betas=hyper["betas"], eps=hyper["eps"], weight_decay=0.5)
    frozen = fixed.build()
    optimizer = namespace["ShardedAdamW"](frozen.parameters(), **core_rank.adamw_kwargs(decay))
    before = fixed.flat(frozen)
    optimizer.zero_grad()
    (frozen(fixed.batch(0)[0]).sum() * 0).backward()  # zero gradients: only weight decay moves a parameter
    optimizer.step()
    return {"params": fixed.flat(net), "memory": memory, "all_gathered": all_gathered, "owned": _mine(owned),
            "decay": {"hyper": decay, "before": before, "after": fixed.flat(frozen)},
            # exercise 3's hand-over assumes partition's shares: a run with others would fail for that reason alone
            "grad_shard": _grad_shard_run(namespace, hyper, groups) if as_asked else None}


def _everyones_owned(optimizer):
    """Every rank's `owned` list (None where a rank has none), the same on all ranks."""
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, _plain_ranges(getattr(optimizer, "owned", None)))
    return everyone


def _mine(everyone):
    import torch.distributed as dist

    return everyone[dist.get_rank()]


def _grad_shard_run(namespace, hyper, groups):
    """Train as exercise 3 hands the gradients over: each .grad None, the averaged gradient of the elements this
    rank owns in .grad_shard. {"params": after model.GRAD_SHARD_STEPS steps}; the learner's error propagates (so
    the launcher stops the other ranks, which may be waiting in a collective) with CONTEXT saying where."""
    import torch.distributed as dist

    from zerolab.handmade.core import model as fixed
    from zerolab.handmade.core.partition import group_partition

    world_size, rank = dist.get_world_size(), dist.get_rank()
    net = fixed.build()
    params = fixed.params_in_group_order(net, groups)
    mine = {index: (start, end) for index, start, end in
            group_partition(fixed.numels_per_group(net, groups), world_size)[rank]}
    core_rank.CONTEXT = GRAD_SHARD_CONTEXT
    optimizer = namespace["ShardedAdamW"](fixed.param_groups(net, groups), **core_rank.adamw_kwargs(hyper))
    for step in range(fixed.GRAD_SHARD_STEPS):
        optimizer.zero_grad()
        core_rank.local_loss(net, step).backward()
        for index, p in enumerate(params):
            grad, p.grad = p.grad, None
            dist.all_reduce(grad)
            start, end = mine.get(index, (0, 0))  # (0, 0): a parameter this rank owns nothing of
            p.grad_shard = (grad / world_size).view(-1)[start:end].clone() if end else None
        optimizer.step()
    core_rank.CONTEXT = None
    return {"params": fixed.flat(net)}


def zero1_bytes_run(job, namespace):
    """The learner's ZeRO-1 and DeepSpeed stage 1 side by side in the same ranks: parameters and bytes."""
    from zerolab.handmade.core import live
    from zerolab.handmade.core import model as fixed

    net = fixed.build()
    optimizer = namespace["ShardedAdamW"](net.parameters(), **core_rank.adamw_kwargs(job["hyper"]))
    for step in range(job["steps"]):
        optimizer.zero_grad()
        core_rank.local_loss(net, step).backward()
        grad_bytes = held_bytes([p.grad for p in net.parameters()])
        live.forget_collectives()
        optimizer.step()
    memory = rank_memory(net)
    mine = {"params": fixed.flat(net), "param_bytes": memory["parameters"], "grad_bytes": grad_bytes,
            "optimizer_state_bytes": memory[live.OTHER], "communication_bytes": memory[live.COMMUNICATION]}
    del optimizer, net, memory
    return {"handmade": mine, "deepspeed": deepspeed_run(job)}


def deepspeed_run(job, namespace=None):
    """DeepSpeed stage 1 with the learner's config (no learner code runs in these ranks)."""
    import deepspeed
    import torch.distributed as dist

    from zerolab.handmade.core import model as fixed
    from zerolab.run import measure
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()  # no compile, and no compiler in the grading sandbox
    net = fixed.build()
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=job["config"])
    grad_bytes = {}
    # The micro-batch and accumulation DeepSpeed resolved from the config (it may derive either one).
    micro, accumulation = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    for step in range(job["steps"]):
        inputs, targets = fixed.batch(step)
        part = fixed.rows(dist.get_rank(), dist.get_world_size())
        inputs, targets = inputs[part], targets[part]
        for micro_step in range(accumulation):
            rows = slice(micro_step * micro, (micro_step + 1) * micro)
            engine.backward(fixed.loss(engine, inputs[rows], targets[rows]) * job.get("loss_scale", 1))
            grad_bytes = measure.gradient_bytes(engine)
            engine.step()
    return {"params": fixed.flat(engine.module), **measure.model_state_bytes(engine, grad_bytes),
            "micro_batch": micro, "accumulation": accumulation,
            "wrapper": type(engine.optimizer).__name__, "optimizer": type(measure.inner_optimizer(engine)).__name__}


def rank_memory(net):
    """Bytes of every tensor alive in this rank (zerolab.handmade.core.live) apart from what existed before the learner's
    cell ran: {"parameters", "gradients", "buffers", "communication buffers" (storages that went through a
    collective in this step and are still alive), "other"}. "other" is what the learner's optimizer keeps: its
    state, wherever it is stored."""
    from zerolab.handmade.core import live

    lines = dict(live.model_lines(net), **{live.COMMUNICATION: live.communication_storages()})
    return live.settled_breakdown(lines, exclude=[core_rank.BASELINE])


def held_bytes(tensors, exclude=()):
    """Bytes of the storages behind `tensors`, each once, leaving out storages of `exclude` and their .grad.

    Whole storages, not views: a "shard" that is a slice of a full-size buffer keeps the full buffer alive.
    """
    import torch

    skip = set()
    for t in exclude:
        for tensor in (t, getattr(t, "grad", None)):
            if torch.is_tensor(tensor):
                skip.add(tensor.untyped_storage().data_ptr())
    seen, total = set(), 0
    for t in tensors:
        if not torch.is_tensor(t):
            continue
        storage = t.untyped_storage()
        if storage.data_ptr() in skip or storage.data_ptr() in seen or storage.nbytes() == 0:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def _plain_ranges(owned):
    try:
        return [[int(i), int(s), int(e)] for i, s, e in owned]
    except (TypeError, ValueError):
        return None
