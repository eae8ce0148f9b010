"""Mixed precision on the fixed model: bf16 compute, fp32 master weights, the one-process references.

The ranks train the fixed model (zerolab.handmade.model) cast to bf16: forward and backward in bf16, the loss
taken in fp32 from the bf16 output. The references run in one process with torch's own pieces: for each rank's
rows the same bf16 backward, the gradients summed in fp32 and divided by the world size (data parallelism's
average, taken in fp32), then ``torch.nn.utils.clip_grad_norm_`` and ``torch.optim.AdamW`` on an fp32 master
copy of the model, whose values are copied (rounded) into the bf16 model after each step. The master starts as
the bf16 model's values: that is all a rank has.
"""
import torch

from zerolab.handmade import model as fixed
from zerolab.handmade.partition import flat_partition

COMPUTE = torch.bfloat16


def build(seed=0):
    return fixed.build(seed).to(COMPUTE)


def loss(model, inputs, targets):
    return torch.nn.functional.mse_loss(model(inputs.to(COMPUTE)).float(), targets)


def reference(hyper, steps, world_size, max_grad_norm, mistake=None, seed=0):
    """(flat fp32 master, flat bf16 parameters as floats, per step the gradient norm before clipping).

    ``mistake`` simulates one the verdict names: "per shard" clips each rank's share of the averaged gradient by
    that share's own norm (the norms are then per step a list, one per rank); "bf16 master" rounds the master to
    bf16 before each step, which is all a master rebuilt from the bf16 parameters holds.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the ranks run one thread: the same bf16 kernels, the same bits
    try:
        return _reference(hyper, steps, world_size, max_grad_norm, mistake, seed)
    finally:
        torch.set_num_threads(threads)


def _reference(hyper, steps, world_size, max_grad_norm, mistake, seed):
    compute = build(seed)
    master = build(seed).float()
    optimizer = torch.optim.AdamW(master.parameters(), lr=hyper["lr"], betas=tuple(hyper["betas"]),
                                  eps=hyper["eps"], weight_decay=hyper["weight_decay"])
    shares = flat_partition(fixed.numels(master), world_size)
    norms = []
    for step in range(steps):
        inputs, targets = fixed.batch(step, seed)
        grads = [torch.zeros_like(p) for p in master.parameters()]
        for rank in range(world_size):
            compute.zero_grad()
            part = fixed.rows(rank, world_size)
            loss(compute, inputs[part], targets[part]).backward()
            for total, p in zip(grads, compute.parameters()):
                total += p.grad.float()
        for p, total in zip(master.parameters(), grads):
            p.grad = total / world_size
        if mistake == "per shard":
            norms.append(_clip_per_shard(list(master.parameters()), shares, max_grad_norm))
        else:
            norms.append(float(torch.nn.utils.clip_grad_norm_(master.parameters(), max_grad_norm)))
        if mistake == "bf16 master":
            with torch.no_grad():
                for p in master.parameters():
                    p.copy_(p.to(COMPUTE))
        optimizer.step()
        with torch.no_grad():
            for bf16, fp32 in zip(compute.parameters(), master.parameters()):
                bf16.copy_(fp32)
    return fixed.flat(master), fixed.flat(compute), norms


def _clip_per_shard(params, shares, max_grad_norm):
    norms = []
    for ranges in shares:
        pieces = [params[index].grad.view(-1)[start:end] for index, start, end in ranges]
        norm = float(torch.cat(pieces).norm()) if pieces else 0.0
        for piece in pieces:
            piece.mul_(min(1.0, max_grad_norm / (norm + 1e-6)))
        norms.append(norm)
    return norms
