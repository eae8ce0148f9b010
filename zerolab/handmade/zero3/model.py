"""The deeper model of the ZeRO-3 exercise, its data, and its one-process torch.optim.AdamW reference.

ZeRO-3's memory bound is "this rank's shard of everything plus the layers being gathered"; with the two layers of
zerolab.handmade.core.model that is the whole model, so a rank that never frees would pass. Six Linear layers of odd
widths (every parameter needs padding on 2 and 3 ranks) make "two layers' worth" much less than all of it, and
stay small enough for a multi-rank test to take seconds. The global batch divides by 2 and 3 ranks.
"""
import torch

WIDTHS = (16, 45, 51, 47, 53, 49, 23)
GLOBAL_BATCH = 12


def build(seed=0):
    torch.manual_seed(seed)
    layers = []
    for index, (width_in, width_out) in enumerate(zip(WIDTHS, WIDTHS[1:])):
        layers.append(torch.nn.Linear(width_in, width_out))
        if index < len(WIDTHS) - 2:
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


def batch(step, seed=0):
    """The full batch of step ``step`` (inputs, targets), the same in every process."""
    generator = torch.Generator().manual_seed(7000 + 1000 * seed + step)
    return (torch.randn(GLOBAL_BATCH, WIDTHS[0], generator=generator),
            torch.randn(GLOBAL_BATCH, WIDTHS[-1], generator=generator))


def local_batch(step, rank, world_size, seed=0):
    inputs, targets = batch(step, seed)
    share = GLOBAL_BATCH // world_size
    rows = slice(rank * share, (rank + 1) * share)
    return inputs[rows], targets[rows]


def loss(output, targets):
    return torch.nn.functional.mse_loss(output, targets)


def layers(model):
    """The modules that hold parameters of their own, in forward order (what ZeRO-3 gathers one at a time)."""
    return [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]


def padded_numel(numel, world_size):
    """A parameter's length padded to a multiple of the world size (DeepSpeed's partition_parameters.py)."""
    return -(-numel // world_size) * world_size


def reference(hyper, steps, seed=0, grad_scale=1.0):
    """Flat parameters after ``steps`` of torch.optim.AdamW on the full batch, in one process (fp32)."""
    from zerolab.handmade.core import model as fixed

    def step_loss(model, step, seed):
        inputs, targets = batch(step, seed)
        return loss(model(inputs), targets)

    return fixed.reference(hyper, steps, seed, grad_scale, build_model=build, step_loss=step_loss)


def reference_losses(hyper, steps, seed=0):
    """The full batch's loss before each of ``steps`` AdamW steps, in one process."""
    model = build(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=hyper["lr"], betas=tuple(hyper["betas"]),
                                  eps=hyper["eps"], weight_decay=hyper["weight_decay"])
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        value = loss(model(batch(step, seed)[0]), batch(step, seed)[1])
        losses.append(value.item())
        value.backward()
        optimizer.step()
    return losses
