"""Rank side of the ZeRO-3 exercise: train the learner's wrapper (or the course's) on the deeper model and report.

Job kind "zerolab.handmade.zero3.rank:run". The learner's cell travels as job["zero3_source"] (not "source"), so
that the collectives are wrapped before the cell runs: a cell that binds ``dist.all_gather`` to a name of its own
is counted too. Each rank: checks the shards the wrapper made, trains ``steps`` steps of torch.optim.AdamW on
them (each of ``micro_steps`` backward() calls: gradient accumulation), samples live bytes in the first two steps, and all-gathers the shards at the end to compare with the
one-process reference.
"""
import time
import warnings

import torch
import torch.distributed as dist

from zerolab.handmade.zero3 import model as deep
from zerolab.handmade.zero3.probe import Probe, live_storages, storage_key

MEMORY_STEPS = (0, 1)


def run(job, namespace=None):
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*is deprecated.*")
    world_size, rank = dist.get_world_size(), dist.get_rank()
    held = {"batch": [], "activations": [], "optimizer": None, "shards": [], "net": None, "grader": []}
    probe = Probe(excluded=lambda: _excluded(held), deliver_on_wait=True).install()
    wrapper_class = _wrapper_class(job)
    if wrapper_class is None:
        return {"problem": {"kind": "missing", "name": job.get("name", "Zero3")}}
    baseline = _live_bytes(held)
    expected = held["grader"] = _expected_shards(world_size, rank)
    net = deep.build()
    held["net"] = net
    sizes = [p.numel() for p in net.parameters()]
    _record_activations(net, held, probe)
    options = {"prefetch": job["prefetch"]} if "prefetch" in job else {}
    with probe.step(sample_memory=True):
        wrapped = wrapper_class(net, **options)
        probe.sample("after the wrapper was built")
    shards = wrapped.shards()
    problem = _shard_problem(shards, expected, world_size, rank)
    del expected
    held["grader"] = []
    if problem:
        return {"problem": problem}
    shards = list(shards)
    held["shards"] = shards
    hyper = job["hyper"]
    optimizer = torch.optim.AdamW(shards, lr=hyper["lr"], betas=tuple(hyper["betas"]), eps=hyper["eps"],
                                  weight_decay=hyper["weight_decay"])
    held["optimizer"] = optimizer
    losses, seconds, full_grads_kept, shard_grad_problem = [], [], [], None
    micro_steps = job.get("micro_steps", 1)
    for step in range(job["steps"]):
        optimizer.zero_grad(set_to_none=True)
        inputs, targets = deep.local_batch(step, rank, world_size)
        held["batch"] = [inputs, targets]
        started = time.perf_counter()
        with probe.step(sample_memory=step in MEMORY_STEPS):
            # micro_steps > 1: gradient accumulation, the rank's rows in equal micro-batches, each loss scaled so
            # that the gradients add up to the whole rows' (torch adds each backward's gradient to .grad)
            loss = 0.0
            for part_inputs, part_targets in zip(inputs.chunk(micro_steps), targets.chunk(micro_steps)):
                part = deep.loss(wrapped(part_inputs), part_targets)
                part = part / micro_steps if micro_steps > 1 else part
                held["batch"].append(part)
                part.backward()
                loss = loss + part.detach()
            probe.sample("after backward")
        seconds.append(time.perf_counter() - started)
        held["activations"].clear()
        full_grads_kept += [i for i, p in enumerate(net.parameters())
                            if p.grad is not None and i not in full_grads_kept]
        shard_grad_problem = shard_grad_problem or _shard_grad_problem(shards, rank)
        if shard_grad_problem:
            break
        optimizer.step()
        losses.append(_mean_over_ranks(loss.detach().clone(), probe))
    result = {"problem": shard_grad_problem, "construction": probe.steps[0], "steps": probe.steps[1:],
              "baseline_bytes": baseline, "losses": losses,
              "seconds": seconds, "full_grads_kept": full_grads_kept, "world_size": world_size}
    if not shard_grad_problem:
        result["params"] = _gathered(shards, sizes, world_size, probe)
    probe.uninstall()
    return result


def _wrapper_class(job):
    if "zero3_source" in job:
        from zerolab.handmade.core import rank as rank_module

        namespace = rank_module.learner_namespace(job["zero3_source"])
        return namespace.get(job.get("name", "Zero3"))
    from zerolab.handmade.zero3.reference import Zero3

    return Zero3


def _expected_shards(world_size, rank):
    """This rank's slice of each initial parameter, padded per parameter (built, sliced, and the model dropped)."""
    shards = []
    for p in deep.build().parameters():
        size = deep.padded_numel(p.numel(), world_size) // world_size
        padded = torch.zeros(size * world_size)
        padded[:p.numel()] = p.detach().reshape(-1)
        shards.append(padded[rank * size:(rank + 1) * size].clone())
    return shards


def _shard_problem(shards, expected, world_size, rank):
    try:
        shards = list(shards)
    except TypeError:
        return {"kind": "not_a_list", "type": type(shards).__name__}
    if len(shards) != len(expected):
        return {"kind": "count", "got": len(shards), "want": len(expected)}
    for index, (shard, want) in enumerate(zip(shards, expected)):
        if not (torch.is_tensor(shard) and shard.is_leaf and shard.requires_grad and shard.dim() == 1):
            return {"kind": "not_a_leaf", "index": index, "type": type(shard).__name__}
        if shard.numel() != want.numel():
            return {"kind": "size", "index": index, "got": shard.numel(), "rank": rank}
        if not torch.equal(shard.detach(), want):
            return {"kind": "owners", "index": index, "rank": rank}
    return None


def _shard_grad_problem(shards, rank):
    for index, shard in enumerate(shards):
        if shard.grad is None or shard.grad.shape != shard.shape:
            return {"kind": "no_grad", "index": index, "rank": rank}
    return None


def _record_activations(net, held, probe):
    """Every module's inputs and output are activations, kept by autograd: left out of the parameter bytes."""
    def record(module, args, output):
        held["activations"] += [t for t in (*args, output) if torch.is_tensor(t)]
        probe.sample(f"after forward of {type(module).__name__}")

    for module in net.modules():
        module.register_forward_hook(record)


def _excluded(held):
    tensors = list(held["batch"]) + list(held["activations"]) + list(held["grader"])
    net = held["net"]
    if net is not None:
        tensors += [p.grad for p in net.parameters()]
    tensors += [s.grad for s in held["shards"]]
    optimizer = held["optimizer"]
    if optimizer is not None:
        tensors += [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    return tensors


def _live_bytes(held):
    live = live_storages()
    for tensor in _excluded(held):
        if torch.is_tensor(tensor):
            live.pop(storage_key(tensor)[0], None)
    return sum(live.values())


def _mean_over_ranks(value, probe):
    probe.original("all_reduce")(value)
    return value.item() / dist.get_world_size()


def _gathered(shards, sizes, world_size, probe):
    """The whole parameters, put together from every rank's shards with the grader's own (uncounted) all-gather."""
    flat = []
    for shard, size in zip(shards, sizes):
        pieces = [torch.empty_like(shard) for _ in range(world_size)]
        probe.original("all_gather")(pieces, shard.detach())
        flat.append(torch.cat(pieces)[:size])
    return torch.cat(flat).tolist()
