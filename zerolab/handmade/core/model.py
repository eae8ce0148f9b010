"""The small fixed model every rank trains, its data, and the reference: one process, full batch, AdamW.

Sizes are odd on purpose: the flat buffer then needs padding for some world sizes and shares end inside
parameters, which is where hand-written partitions go wrong. The global batch divides by 2 and 3 ranks; each
rank trains on its own rows, so the average of the ranks' gradients is the full batch's gradient.
"""
import torch

IN, HIDDEN, OUT = 16, 61, 23
GLOBAL_BATCH = 12
HYPER_KEYS = ("lr", "betas", "eps", "weight_decay")
NO_DECAY_ON_BIASES = "no_decay_on_biases"  # the usual two groups: weights decayed, biases not
# Exercise 4 trains DeepSpeed on this multiple of the loss: AdamW's steps are the same (up to eps), and the
# gradient norm (about 0.5 unscaled) passes any usual gradient_clipping, so a clipping config shows.
DEEPSPEED_LOSS_SCALE = 100
GRAD_SHARD_STEPS = 2  # ZeRO-1's steps trained on gradients handed over as .grad_shard (how ZeRO-2 leaves them)


def build(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, OUT))


def batch(step, seed=0):
    """The full batch of step `step` (inputs, targets), the same in every process."""
    generator = torch.Generator().manual_seed(1000 * seed + step)
    return torch.randn(GLOBAL_BATCH, IN, generator=generator), torch.randn(GLOBAL_BATCH, OUT, generator=generator)


def rows(rank, world_size):
    share = GLOBAL_BATCH // world_size
    return slice(rank * share, (rank + 1) * share)


def loss(model, inputs, targets):
    return torch.nn.functional.mse_loss(model(inputs), targets)


def numels(model):
    return [p.numel() for p in model.parameters()]


def flat(model):
    """The model's parameters as one flat list of floats (what ranks report)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def load(model, values):
    """Set the model's parameters from a flat list of floats (the inverse of flat), in the model's own dtype."""
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.tensor(values, dtype=torch.float32).to(
            next(model.parameters()).dtype), model.parameters())


def param_groups(model, layout=None):
    """What the tests pass to an optimizer: the parameters (one group), or NO_DECAY_ON_BIASES's two groups."""
    if layout is None:
        return model.parameters()
    if layout == NO_DECAY_ON_BIASES:
        named = list(model.named_parameters())
        return [{"params": [p for name, p in named if not name.endswith("bias")]},
                {"params": [p for name, p in named if name.endswith("bias")], "weight_decay": 0.0}]
    raise ValueError(f"unknown parameter group layout {layout!r}")


def numels_per_group(model, layout=None):
    """Element counts of each group's parameters, group by group."""
    groups = param_groups(model, layout)
    if layout is None:
        return [[p.numel() for p in groups]]
    return [[p.numel() for p in group["params"]] for group in groups]


def group_numels(model, layout=None):
    """Element counts in the order of the optimizer's groups (how a rank's ``owned`` indices count)."""
    return [numel for numels in numels_per_group(model, layout) for numel in numels]


def params_in_group_order(model, layout=None):
    """The parameters in the order of the optimizer's groups (what a rank's ``owned`` param_index points at)."""
    groups = param_groups(model, layout)
    if layout is None:
        return list(groups)
    return [p for group in groups for p in group["params"]]


def reference(hyper, steps, seed=0, grad_scale=1.0, groups=None, optimizer_class=torch.optim.AdamW,
              build_model=build, step_loss=None):
    """Flat parameters after `steps` of torch.optim.AdamW on the full batch, in one process (fp32).

    ``grad_scale`` multiplies every gradient before the step: with the world size it gives what ranks that sum
    their gradients instead of averaging them would compute. ``groups`` is a layout of param_groups();
    ``optimizer_class`` torch.optim.Adam gives what Adam's coupled L2 decay computes. ``build_model`` and
    ``step_loss(model, step, seed)`` give another model and its full batch's loss (the deeper models of the ZeRO-2
    and ZeRO-3 exercises).
    """
    model = build_model(seed)
    optimizer = optimizer_class(param_groups(model, groups), lr=hyper["lr"], betas=tuple(hyper["betas"]),
                                eps=hyper["eps"], weight_decay=hyper["weight_decay"])
    for step in range(steps):
        optimizer.zero_grad()
        (step_loss(model, step, seed) if step_loss else loss(model, *batch(step, seed))).backward()
        for p in model.parameters():
            p.grad.mul_(grad_scale)
        optimizer.step()
    return flat(model)


def scaled_loss(scale):
    """step_loss for reference(): the full batch's loss times ``scale``."""
    return lambda model, step, seed: loss(model, *batch(step, seed)) * scale


def zero_gradient_step(hyper, optimizer_class=torch.optim.AdamW, seed=0):
    """Flat parameters after one step of torch's optimizer with all gradients zero: weight decay alone."""
    model = build(seed)
    optimizer = optimizer_class(model.parameters(), lr=hyper["lr"], betas=tuple(hyper["betas"]), eps=hyper["eps"],
                                weight_decay=hyper["weight_decay"])
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    return flat(model)


def full_gradient(seed=0, step=0):
    """Flat gradient of the full batch's loss at the initial parameters (what averaged rank gradients equal)."""
    model = build(seed)
    loss(model, *batch(step, seed)).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).tolist()


def adam_state_bytes(seed=0):
    """Bytes of torch.optim.AdamW's state after one step on the whole model: what each rank holds unsharded."""
    model = build(seed)
    optimizer = torch.optim.AdamW(model.parameters())
    loss(model, *batch(0, seed)).backward()
    optimizer.step()
    return sum(t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values()
               if torch.is_tensor(t))
