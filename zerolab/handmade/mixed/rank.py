"""Rank side of the mixed-precision exercise (job kind "zerolab.handmade.mixed.rank:run"): the learner's
optimizer trains the fixed model in bf16 for a few steps; the rank reports the norms its step() returned, its
fp32 master shard (``optimizer.master``: one 1-D tensor per range of ``optimizer.owned``) and the bf16
parameters after every step, and the collectives each step made (zerolab.handmade.core.traffic, installed before the
learner's cell runs)."""
import math

import torch

from zerolab.handmade.mixed import model as mixed_model
from zerolab.handmade.core import model as fixed
from zerolab.handmade.core.rank import adamw_kwargs, learner_namespace, local_batch
from zerolab.handmade.core.traffic import CollectiveCounter


def run(job, _namespace=None):
    counter = CollectiveCounter().install()
    namespace = learner_namespace(job["cell"])
    net = mixed_model.build()
    optimizer = namespace[job.get("name", "MixedShardedAdamW")](net.parameters(), **adamw_kwargs(job["hyper"]),
                                                                  max_grad_norm=job["max_grad_norm"])
    norms, traffic, params_after, masters_after = [], [], [], []
    for step in range(job["steps"]):
        optimizer.zero_grad()
        mixed_model.loss(net, *local_batch(step)).backward()
        counter.label = step
        norms.append(_number(optimizer.step()))
        counter.label = None
        traffic.append(counter.summary(step))
        params_after.append(fixed.flat(net))
        masters_after.append(_master(getattr(optimizer, "master", None)))
    return {"owned": _plain_ranges(getattr(optimizer, "owned", None)), "norms": norms,
            "master": masters_after[-1] if masters_after else _master(getattr(optimizer, "master", None)),
            "traffic": traffic, "params": params_after[-1] if params_after else fixed.flat(net),
            "params_after": params_after, "masters_after": masters_after,
            "param_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in net.parameters()})}


def _number(value):
    if torch.is_tensor(value) and value.numel() == 1:
        value = value.item()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None if value is None else type(value).__name__


def _master(master):
    """{"dtypes": [...], "values": [...] (the pieces concatenated)} or the type found, for the verdict."""
    if not isinstance(master, (list, tuple)) or not all(torch.is_tensor(t) for t in master):
        return type(master).__name__
    return {"dtypes": [str(t.dtype).replace("torch.", "") for t in master],
            "lengths": [t.numel() for t in master],
            "values": [float(v) for t in master for v in t.detach().float().reshape(-1).tolist()]}


def _plain_ranges(owned):
    try:
        return [[int(i), int(s), int(e)] for i, s, e in owned]
    except (TypeError, ValueError):
        return None
