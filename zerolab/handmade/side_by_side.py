"""Side by side, measured: ZeRO-1/2/3 built by hand, DeepSpeed stages 1/2/3 and PyTorch FSDP2, on the same model
(zerolab.handmade.zero3.model), data, hyper-parameters and ranks.

The hand-built ones are the learner's cells from the kernel's history (``ShardedAdamW``, ``Zero2Gradients``,
``Zero3``) when they run, else the course's own (zerolab.handmade.zero1.reference, compare_zero2, zero3_reference); each
row says which. Every rank measures, per system:

- ``losses``: the full batch's loss at each step (the mean of the ranks' losses on their rows);
- ``param_bytes``, ``grad_bytes``, ``optimizer_bytes``, ``master_bytes``: what the rank holds after backward
  (gradients) and after the last step (the rest), from the system's own tensors, each memory range once
  (zerolab.run.measure.union_bytes; DeepSpeed's through zerolab.run.measure);
- ``peak_grad_bytes``: the most gradient bytes alive at once during backward, sampled at every collective and
  every gradient hook: the parameters' ``.grad``, the system's gradient buffers and shards, and the tensors of
  the reduction being called; ``peak_param_bytes`` the same for parameters, during forward and backward: the
  module's parameters as they are at that moment (gathered or empty) and the system's shards;
- ``collectives``: what one step (the last) moved, by op, counted at torch.distributed (zero3_probe's
  accounting, the same as zerolab.run.meter's for DeepSpeed);
- ``shard_numels``: how many elements of each parameter this rank keeps between steps, where the system keeps
  parameters sharded (ZeRO-3, DeepSpeed stage 3, FSDP2).
"""
import os

import torch

from zerolab.handmade.core import live
from zerolab.handmade.core.learner import DEFAULT_HYPER
from zerolab.handmade.zero3 import model as deep

SYSTEMS = ("ZeRO-1 (hand)", "ZeRO-2 (hand)", "ZeRO-3 (hand)", "DeepSpeed stage 1", "DeepSpeed stage 2",
           "DeepSpeed stage 3", "DeepSpeed stage 3, live 0 reuse 0", "FSDP2")
BUCKET_ELEMENTS = 4096  # the hand-built ZeRO-2's bucket and DeepSpeed's reduce/allgather bucket sizes
LEARNER_NAMES = {"ZeRO-1 (hand)": "ShardedAdamW", "ZeRO-2 (hand)": "Zero2Gradients", "ZeRO-3 (hand)": "Zero3"}


def side_by_side(ranks=2, steps=3, hyper=None, learner=True, systems=SYSTEMS, timeout=120):
    """Run every system on ``ranks`` gloo ranks; each rank's measurements, in rank order ({system: {...}})."""
    from zerolab.handmade.core import harness

    job = {"kind": "zerolab.handmade.side_by_side:run_rank", "preimport_deepspeed": True, "steps": steps,
           "hyper": dict(hyper or DEFAULT_HYPER), "systems": list(systems), "cells": _learner_cells() if learner
           else {}}
    return harness.run(job, ranks, timeout=timeout)


def _learner_cells():
    from zerolab.lesson.source import SourceMissing, cell_defining, forbidden_use

    cells = {}
    for system, name in LEARNER_NAMES.items():
        try:
            text = cell_defining(name)
        except SourceMissing:
            continue
        if not forbidden_use(text):
            cells[system] = text
    return cells


def run_rank(job, namespace=None):
    """Rank side (job kind "zerolab.handmade.side_by_side:run_rank"): every system in turn."""
    import warnings

    from zerolab.handmade.zero3.probe import Probe

    warnings.filterwarnings("ignore")
    holder = {"grads": lambda: (), "params": lambda: (), "peak_params": 0}

    def measure(reducing):
        holder["peak_params"] = max(holder["peak_params"], _grad_bytes(holder["params"]()))
        return _grad_bytes(holder["grads"]() + list(reducing))

    probe = Probe(measure=measure).install(matmuls=False)
    results = {}
    for system in job["systems"]:
        try:
            results[system] = _run(system, job, probe, holder)
        except Exception as error:
            if system not in job["cells"]:
                raise
            # the learner's cell failed while training (every rank alike): the course's stands in, and says why
            results[system] = _run(system, dict(job, cells={}), probe, holder)
            results[system]["who"] = f"course (yours raised {type(error).__name__})"
    probe.uninstall()
    return results


def _run(system, job, probe, holder):
    import torch.distributed as dist

    world_size, rank = dist.get_world_size(), dist.get_rank()
    hyper, steps = job["hyper"], job["steps"]
    net = deep.build()
    runner = _SYSTEM_RUNNERS[system.split(" (")[0] if "hand" in system else system]
    trainer = runner(net, hyper, job["cells"].get(system), world_size)
    holder["grads"], holder["params"], holder["peak_params"] = trainer.grad_tensors, trainer.param_tensors, 0
    for p in trainer.model_parameters():
        p.register_post_accumulate_grad_hook(lambda p: probe.sample("gradient hook"))
    first = len(probe.steps)
    losses, grad_bytes = [], 0
    for step in range(steps):
        if step == steps - 1:
            live.forget_collectives()  # what goes through a collective from here on is a communication buffer
        trainer.zero_grad()
        inputs, targets = deep.local_batch(step, rank, world_size)
        with probe.step(sample_memory=True):
            loss = trainer.backward(inputs, targets)
            probe.sampling = False  # gradients are sampled during backward; the step's traffic is counted too
            grad_bytes = _grad_bytes(trainer.grad_tensors())
            trainer.step()
        total = loss.detach().clone()
        probe.original("all_reduce")(total)
        losses.append(total.item() / world_size)
    holder["grads"] = holder["params"] = lambda: ()
    measured = probe.steps[first:]
    return {"who": trainer.who, "losses": losses, "grad_bytes": grad_bytes,
            "peak_grad_bytes": max(s["peak_param_bytes"] or 0 for s in measured),
            "peak_param_bytes": holder["peak_params"],
            "collectives": measured[-1]["collectives"], **trainer.state_bytes(),
            "shard_numels": trainer.shard_numels(), "params": trainer.full_params(),
            "meter": trainer.metered() if hasattr(trainer, "metered") else None}


def _grad_bytes(tensors):
    from zerolab.run.measure import union_bytes

    return union_bytes([_local(t) for t in tensors if torch.is_tensor(t)])


def _local(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _storage_tensor(tensor):
    """A tensor over the whole storage of ``tensor``: FSDP2 pads a shard in its storage, past its own elements."""
    return torch.empty(0, dtype=tensor.dtype).set_(tensor.untyped_storage())


def _learner_class(cell, name):
    """The learner's class when the cell defines it and it is answered; None otherwise (the course's stands in)."""
    if not cell:
        return None
    from zerolab.handmade.core import rank as rank_module

    try:
        return rank_module.learner_namespace(cell).get(name)
    except Exception:  # an unanswered or broken cell: the course's solution stands in
        return None


class _Hand:
    """What every hand-built system shares: a model trained on its rows, AdamW-style optimizer, bytes by storage."""
    who = "course"

    def __init__(self, net, hyper):
        self.net, self.hyper = net, hyper

    def options(self):
        return dict(lr=self.hyper["lr"], betas=tuple(self.hyper["betas"]), eps=self.hyper["eps"],
                    weight_decay=self.hyper["weight_decay"])

    def model_parameters(self):
        return list(self.net.parameters())

    def forward(self, inputs):
        return self.net(inputs)

    def backward(self, inputs, targets):
        loss = deep.loss(self.forward(inputs), targets)
        loss.backward()
        return loss

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        self.optimizer.step()

    def grad_tensors(self):
        return [p.grad for p in self.net.parameters()] + [getattr(p, "grad_shard", None)
                                                          for p in self.net.parameters()]

    def state_bytes(self):
        """The optimizer's bytes are whatever it holds, in ``optimizer.state`` or in attributes of its own (ex2
        allows either), but for the parameters, their gradients and buffers that went through a collective in the
        last step (kept communication buffers, not Adam's moments)."""
        from zerolab.run.measure import union_bytes

        params = self.param_tensors()
        exclude = [params, list(self.grad_tensors()), live.communication_storages()]
        return {"param_bytes": union_bytes(params), "optimizer_bytes": live.held_by(self.optimizer, exclude),
                "master_bytes": 0}

    def param_tensors(self):
        return [p.data for p in self.net.parameters()]

    def shard_numels(self):
        return None

    def full_params(self):
        return torch.cat([p.detach().reshape(-1) for p in self.net.parameters()]).tolist()


class _Zero1(_Hand):
    def __init__(self, net, hyper, cell, world_size):
        super().__init__(net, hyper)
        optimizer_class = _learner_class(cell, "ShardedAdamW")
        if optimizer_class is not None:
            try:
                self.optimizer = optimizer_class(net.parameters(), **self.options())
                self.who = "yours"
                return
            except Exception:
                pass
        from zerolab.handmade.zero1.reference import ShardedAdamW

        self.optimizer = ShardedAdamW(net.parameters(), **self.options())


class _Zero2(_Zero1):
    def __init__(self, net, hyper, cell, world_size):
        _Hand.__init__(self, net, hyper)
        from zerolab.handmade.zero1.reference import ShardedAdamW

        self.optimizer = ShardedAdamW(net.parameters(), **self.options())
        hooks_class = _learner_class(cell, "Zero2Gradients")
        if hooks_class is not None:
            try:
                self.hooks = hooks_class(net, BUCKET_ELEMENTS)
                self.who = "yours"
                return
            except Exception:
                pass
        from zerolab.handmade.zero2.reference import Zero2Gradients

        self.hooks = Zero2Gradients(net, BUCKET_ELEMENTS)

    def grad_tensors(self):
        return super().grad_tensors() + [getattr(self.hooks, "bucket", None)]


class _Zero3(_Hand):
    def __init__(self, net, hyper, cell, world_size):
        super().__init__(net, hyper)
        self.sizes = [p.numel() for p in net.parameters()]
        self.world_size = world_size
        wrapper_class = _learner_class(cell, "Zero3")
        self.wrapped = None
        if wrapper_class is not None:
            try:
                self.wrapped = wrapper_class(net)
                self.shards = list(self.wrapped.shards())
                self.who = "yours"
            except Exception:
                self.wrapped = None
        if self.wrapped is None:  # the learner's may have emptied some parameters before failing: start afresh
            from zerolab.handmade.zero3.reference import Zero3

            self.net = deep.build()
            self.sizes = [p.numel() for p in self.net.parameters()]
            self.wrapped = Zero3(self.net)
            self.shards = self.wrapped.shards()
        self.optimizer = torch.optim.AdamW(self.shards, **self.options())

    def forward(self, inputs):
        return self.wrapped(inputs)

    def grad_tensors(self):
        return [p.grad for p in self.net.parameters()] + [s.grad for s in self.shards]

    def param_tensors(self):
        return list(self.shards) + [p.data for p in self.net.parameters()]

    def shard_numels(self):
        return [s.numel() for s in self.shards]

    def full_params(self):
        import torch.distributed as dist

        flat = []
        for shard, size in zip(self.shards, self.sizes):
            pieces = [torch.empty_like(shard) for _ in range(self.world_size)]
            getattr(dist.all_gather, "__wrapped__", dist.all_gather)(pieces, shard.detach())
            flat.append(torch.cat(pieces)[:size])
        return torch.cat(flat).tolist()


def deepspeed_config(stage, hyper, world_size, **zero_options):
    """fp32, torch's AdamW, the model's rows per rank, and the hand-built ZeRO-2's bucket size; stage 3 keeps no
    parameter whole (its persistence threshold, 1e5 elements by default, would keep every one of this model's).
    ``zero_options`` are more zero_optimization keys."""
    zero = {"stage": stage, "reduce_bucket_size": BUCKET_ELEMENTS, "allgather_bucket_size": BUCKET_ELEMENTS,
            **zero_options}
    if stage == 3:
        zero.update(stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=BUCKET_ELEMENTS)
    return {"train_micro_batch_size_per_gpu": deep.GLOBAL_BATCH // world_size, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": hyper["lr"], "betas": list(hyper["betas"]),
                                                      "eps": hyper["eps"], "weight_decay": hyper["weight_decay"],
                                                      "torch_adam": True}},
            "zero_optimization": zero, "gradient_clipping": 0.0}  # DeepSpeed's default, 1.0, is not AdamW's


class _DeepSpeed:
    who = "DeepSpeed 0.19.8"

    def __init__(self, net, hyper, cell, world_size, stage, **zero):
        import deepspeed

        from zerolab.run.op_cache import skip_shm_comm_op

        skip_shm_comm_op()
        self.engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(),
                                                    config=deepspeed_config(stage, hyper, world_size, **zero))
        self.stage, self.world_size = stage, world_size
        self.grads = {}
        from zerolab.run.meter import TrafficMeter

        self.meter = TrafficMeter(self.engine)  # DeepSpeed's own comm layer: a second count of its collectives
        self._metered = None

    def model_parameters(self):
        return list(self.engine.module.parameters())

    def zero_grad(self):
        pass  # the engine's step clears its gradients

    def backward(self, inputs, targets):
        self._metered = self.meter.step()
        self._metered.__enter__()
        loss = deep.loss(self.engine(inputs), targets)
        self.engine.backward(loss)
        return loss

    def step(self):
        from zerolab.run import measure

        self.grads = measure.gradient_bytes(self.engine)
        self.engine.step()
        self._metered.__exit__(None, None, None)

    def metered(self):
        """The last step's collectives as zerolab.run.meter counted them: {op: elements}."""
        counted = {}
        for row in self.meter.as_dicts()[-1]["collectives"]:
            counted[row["op"]] = counted.get(row["op"], 0) + row["elements"]
        return counted

    def grad_tensors(self):
        from zerolab.run import measure

        grads, fp32_grads = measure.gradient_tensors(self.engine)
        buffers = getattr(self.engine.optimizer, "ipg_buffer", None) or []
        return grads + fp32_grads + [b for b in buffers if torch.is_tensor(b)]

    def param_tensors(self):
        from zerolab.run import measure

        return measure.parameter_tensors(self.engine)

    def state_bytes(self):
        from zerolab.run import measure

        state = measure.model_state_bytes(self.engine, self.grads or {"grad_bytes": 0, "fp32_grad_bytes": 0})
        return {"param_bytes": state["param_bytes"], "optimizer_bytes": state["optimizer_state_bytes"],
                "master_bytes": state["master_weight_bytes"]}

    def shard_numels(self):
        if self.stage != 3:
            return None
        return [p.ds_tensor.ds_numel for p in self.engine.module.parameters()]

    def full_params(self):
        if self.stage != 3:
            return torch.cat([p.detach().reshape(-1) for p in self.engine.module.parameters()]).tolist()
        import deepspeed

        params = list(self.engine.module.parameters())
        with deepspeed.zero.GatheredParameters(params):
            return torch.cat([p.detach().reshape(-1).clone() for p in params]).tolist()


class _FSDP2:
    who = "torch " + torch.__version__.split("+")[0]

    def __init__(self, net, hyper, cell, world_size):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world_size,))
        for layer in deep.layers(net):
            fully_shard(layer, mesh=mesh)
        fully_shard(net, mesh=mesh)
        self.net = net
        self.sharded = list(net.parameters())  # the DTensors; in forward and backward the module shows unsharded ones
        self.optimizer = torch.optim.AdamW(net.parameters(), lr=hyper["lr"], betas=tuple(hyper["betas"]),
                                           eps=hyper["eps"], weight_decay=hyper["weight_decay"])

    model_parameters = _Hand.model_parameters
    zero_grad = _Hand.zero_grad
    step = _Hand.step

    def backward(self, inputs, targets):
        loss = deep.loss(self.net(inputs), targets)
        loss.backward()
        return loss

    def grad_tensors(self):
        return [p.grad for p in self.net.parameters()] + [p.grad for p in self.sharded]

    def param_tensors(self):
        return [_storage_tensor(_local(p.data)) for p in self.sharded] + [
            p.data for p in self.net.parameters() if not hasattr(p, "to_local")]

    def state_bytes(self):
        from zerolab.run.measure import union_bytes

        params = [_local(p.data) for p in self.net.parameters()]
        state = [_local(v) for s in self.optimizer.state.values() for v in s.values() if torch.is_tensor(v)
                 and v.dim()]
        return {"param_bytes": union_bytes([_storage_tensor(p) for p in params]),
                "optimizer_bytes": union_bytes(state), "master_bytes": 0}

    def shard_numels(self):
        """Elements of each parameter's local storage: FSDP2 pads dim 0 to a multiple of N rows, in the storage."""
        return [_local(p.data).untyped_storage().nbytes() // _local(p.data).element_size()
                for p in self.net.parameters()]

    def full_params(self):
        return torch.cat([p.full_tensor().detach().reshape(-1) for p in self.net.parameters()]).tolist()


_SYSTEM_RUNNERS = {
    "ZeRO-1": _Zero1, "ZeRO-2": _Zero2, "ZeRO-3": _Zero3,
    "DeepSpeed stage 1": lambda *a: _DeepSpeed(*a, stage=1),
    "DeepSpeed stage 2": lambda *a: _DeepSpeed(*a, stage=2),
    "DeepSpeed stage 3": lambda *a: _DeepSpeed(*a, stage=3),
    "DeepSpeed stage 3, live 0 reuse 0": lambda *a: _DeepSpeed(*a, stage=3, stage3_max_live_parameters=0,
                                                              stage3_max_reuse_distance=0),
    "FSDP2": _FSDP2,
}


def skipped_under_grading():
    """True while nbgrader grades (the side-by-side is a demonstration, never graded)."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


COLUMNS = (("loss", "loss after K steps"), ("param_bytes", "parameters B"),
           ("peak_param_bytes", "peak parameters B"), ("grad_bytes", "gradients B"),
           ("peak_grad_bytes", "peak gradients B"), ("optimizer_bytes", "Adam moments B"),
           ("master_bytes", "fp32 master B"), ("volume", "volume per step"), ("traffic", "moved per step"))


def rows(results, rank=0):
    """One row per system for ``rank``: what it is, the loss after the last step, bytes, traffic in Ψ by op."""
    psi = sum(p.numel() for p in deep.build().parameters())
    table = []
    for system, measured in results[rank].items():
        traffic = {op: entry["elements"] / psi for op, entry in measured["collectives"].items()}
        table.append({"system": system, "who": measured["who"], "loss": measured["losses"][-1], "psi": psi,
                      "elements": {op: entry["elements"] for op, entry in measured["collectives"].items()},
                      **{key: measured[key] for key, _ in COLUMNS[1:-2]}, "traffic": traffic,
                      "volume": _volume(measured["collectives"], len(results)) / psi,
                      "volume_by_op": {op: _volume({op: entry}, len(results)) / psi
                                       for op, entry in measured["collectives"].items()}})
    return table


def _volume(collectives, world_size):
    """The ZeRO paper's volume of one step's collectives, in elements (zerolab.engine.comm: an all-reduce counts twice)."""
    from zerolab.engine.comm import Collective

    return sum(Collective(op, "measured", "step", entry["elements"], 1, entry["calls"], 4, world_size).volume
               for op, entry in collectives.items())


def in_psi(elements, psi):
    """Elements as a multiple of Ψ that keeps the padding in sight: 'Ψ+4' where a rounded '1Ψ' would hide 4 elements,
    a count of elements for a collective far smaller than Ψ (a norm, a flag)."""
    whole = round(elements / psi)
    if whole == 0:
        return f"{elements} element" + ("" if elements == 1 else "s")
    rest = elements - whole * psi
    if abs(rest) > psi // 100:
        return f"{elements / psi:.3g}Ψ"
    return ("Ψ" if whole == 1 else f"{whole}Ψ") + (f"{rest:+d}" if rest else "")


def table_text(results, rank=0):
    """The side-by-side as fixed-width text, in the learner's language."""
    from zerolab.base.i18n import tr

    steps = len(next(iter(results[rank].values()))["losses"])
    header = [tr("system"), tr("whose"), tr(f"loss after {steps} steps")] + [tr(label) for _, label in COLUMNS[1:]]
    lines = [header]
    for row in rows(results, rank):
        moved = ", ".join(f"{op} {in_psi(elements, row['psi'])}" for op, elements in row["elements"].items()) or "-"
        lines.append([row["system"], tr(row["who"]), f"{row['loss']:.6f}"] +
                     [str(row[key]) for key, _ in COLUMNS[1:-2]] + [f"{row['volume']:.3g}Ψ", moved])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)
