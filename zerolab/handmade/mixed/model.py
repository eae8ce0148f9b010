"""Mixed precision on the fixed model: bf16 compute, fp32 master weights, the one-process references.

The ranks train the fixed model (zerolab.handmade.core.model) cast to bf16: forward and backward in bf16, the loss
taken in fp32 from the bf16 output. The references run in one process with torch's own pieces: for each rank's
rows the same bf16 backward, the gradients summed in fp32 and divided by the world size (data parallelism's
average, taken in fp32), then ``torch.nn.utils.clip_grad_norm_`` and ``torch.optim.AdamW`` on an fp32 master
copy of the model. The master starts as the bf16 model's values: that is all a rank has.

bf16 training is chaotic: two right answers whose fp32 arithmetic differs by one ulp (another order of the same
sums) now and then round a weight to the neighbouring bf16 value, and from there their runs drift apart step by
step. So the verdict compares each step against ``reference_fed``: the reference's step taken from the learner's
own parameters and master before that step, which only the learner's arithmetic of that one step can move.
"""
import torch

from zerolab.handmade.core import model as fixed
from zerolab.handmade.core.partition import flat_partition

COMPUTE = torch.bfloat16


def build(seed=0):
    return fixed.build(seed).to(COMPUTE)


def loss(model, inputs, targets):
    return torch.nn.functional.mse_loss(model(inputs.to(COMPUTE)).float(), targets)


def reference_fed(hyper, world_size, max_grad_norm, before, mistake=None, seed=0):
    """Per step, the reference's step from the learner's state: ``before`` is one (flat bf16 parameters, flat fp32
    master) pair per step, what the learner's ranks held before it (the first: the model as built). Returns (the
    flat fp32 master after each step, the gradient norm before clipping of each step).

    ``mistake`` simulates one the verdict names: "per shard" clips each rank's share of the averaged gradient by
    that share's own norm (the norms are then per step a list, one per rank); "bf16 master" rounds the master to
    bf16 before each step, which is all a master rebuilt from the bf16 parameters holds; "no clipping" steps with
    the unclipped gradient; "bf16 sum" sums the ranks' gradients in bf16 (DeepSpeed's default communication
    dtype) before the fp32 average.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the ranks run one thread: the same bf16 kernels, the same bits
    try:
        return _reference(hyper, world_size, max_grad_norm, mistake, seed, before)
    finally:
        torch.set_num_threads(threads)


def _reference(hyper, world_size, max_grad_norm, mistake, seed, before):
    compute = build(seed)
    master = build(seed).float()
    optimizer = torch.optim.AdamW(master.parameters(), lr=hyper["lr"], betas=tuple(hyper["betas"]),
                                  eps=hyper["eps"], weight_decay=hyper["weight_decay"])
    shares = flat_partition(fixed.numels(master), world_size)
    norms, masters = [], []
    for step, (params, master_values) in enumerate(before):
        fixed.load(compute, params)  # the learner's state before this step; Adam's moments stay the reference's
        fixed.load(master, master_values)
        inputs, targets = fixed.batch(step, seed)
        summed_in = COMPUTE if mistake == "bf16 sum" else torch.float32
        grads = [torch.zeros_like(p, dtype=summed_in) for p in master.parameters()]
        for rank in range(world_size):
            compute.zero_grad()
            part = fixed.rows(rank, world_size)
            loss(compute, inputs[part], targets[part]).backward()
            for total, p in zip(grads, compute.parameters()):
                total += p.grad.to(summed_in)
        for p, total in zip(master.parameters(), grads):
            p.grad = total.float() / world_size
        if mistake == "per shard":
            norms.append(_clip_per_shard(list(master.parameters()), shares, max_grad_norm))
        elif mistake == "no clipping":
            norms.append(float(torch.nn.utils.get_total_norm([p.grad for p in master.parameters()])))
        else:
            norms.append(float(torch.nn.utils.clip_grad_norm_(master.parameters(), max_grad_norm)))
        if mistake == "bf16 master":
            with torch.no_grad():
                for p in master.parameters():
                    p.copy_(p.to(COMPUTE))
        optimizer.step()
        masters.append(fixed.flat(master))
    return masters, norms


def _clip_per_shard(params, shares, max_grad_norm):
    norms = []
    for ranges in shares:
        pieces = [params[index].grad.view(-1)[start:end] for index, start, end in ranges]
        norm = float(torch.cat(pieces).norm()) if pieces else 0.0
        for piece in pieces:
            piece.mul_(min(1.0, max_grad_norm / (norm + 1e-6)))
        norms.append(norm)
    return norms
