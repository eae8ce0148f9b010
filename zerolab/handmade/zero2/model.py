"""The deeper model of the ZeRO-2 exercise: the fixed model's inputs and targets through six small layers.

On the two-layer model of the other exercises one bucket would hold most of the model, so "reduce a bucket at a
time" could not be told apart from "reduce everything at the end". Here the largest parameter is a fraction of
the whole, and a bucket of a few of them leaves most gradients to arrive after it was sent. Widths are odd so
that the ranks' shares end inside parameters. Data, rows per rank and the loss are zerolab.handmade.core.model's.
"""
import torch

from zerolab.handmade.core import model as fixed

WIDTH, HIDDEN_LAYERS = 31, 6


def build(seed=0):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(fixed.IN, WIDTH), torch.nn.Tanh()]
    for _ in range(HIDDEN_LAYERS - 1):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, fixed.OUT))


def reference(hyper, steps, seed=0, grad_scale=1.0):
    """Flat parameters after ``steps`` of torch.optim.AdamW on the full batch in one fp32 process."""
    return fixed.reference(hyper, steps, seed, grad_scale, build_model=build)


def full_gradient(seed=0, step=0, params=None):
    """Flat gradient of step ``step``'s full-batch loss at ``params`` (flat; default: the initial parameters)."""
    model = build(seed)
    if params is not None:
        fixed.load(model, params)
    fixed.loss(model, *fixed.batch(step, seed)).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).tolist()
