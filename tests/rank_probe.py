"""A job for zerolab.handmade.core.harness that reports where its rank ran (tests/test_rank_launcher.py)."""
import os

import psutil


def where(job, namespace):
    launcher = psutil.Process(os.getppid())
    return {"launcher": launcher.pid, "launcher_parent": launcher.ppid(), "cwd": os.getcwd(),
            "probe": os.environ.get("ZEROLAB_PROBE"), "rank": os.environ["RANK"]}


def deepspeed_collectives(job, namespace):
    """Two steps of two micro-steps of DeepSpeed training at ZeRO stage job["stage"], the shm comm op skipped as the
    course's runs skip it: whether DeepSpeed offered the op and built it, and the calls of each method of its
    comm backend."""
    import deepspeed
    import deepspeed.comm.comm as comm
    import deepspeed.ops
    from deepspeed.comm.torch import TorchBackend

    from zerolab.handmade.core import model as fixed
    from zerolab.run.op_cache import skip_shm_comm_op

    offered = deepspeed.ops.__compatible_ops__.get("deepspeed_shm_comm", False)
    calls = {}
    for name, method in vars(TorchBackend).items():
        if callable(method) and not name.startswith("_"):
            setattr(TorchBackend, name, _counted(name, method, calls))
    skip_shm_comm_op()
    net = fixed.build()
    config = {"train_micro_batch_size_per_gpu": fixed.GLOBAL_BATCH // 4, "gradient_accumulation_steps": 2,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": job["stage"]}}
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    mine, micro = fixed.rows(int(os.environ["RANK"]), 2), fixed.GLOBAL_BATCH // 4
    for step in range(2):
        inputs, targets = (rows[mine] for rows in fixed.batch(step))
        for first in (0, micro):
            engine.backward(fixed.loss(engine, inputs[first:first + micro], targets[first:first + micro]))
            engine.step()
    return {"offered": offered, "built": comm.cdb.shm_comm_op is not None, "calls": calls,
            "steps": engine.global_steps}


def _counted(name, method, calls):
    def counting(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return method(*args, **kwargs)
    return counting


def deepspeed_initializes(job, namespace):
    """[{"accepted": bool, "error": its message, "optimizer": the engine's optimizer class, "inner": the optimizer
    that one wraps, "trained": bool}] of deepspeed.initialize with each config of job["configs"] on the fixed model,
    each on a fresh copy of it, then (with job["train"]) one training step: a key DeepSpeed reads can fail there
    (tests/test_config_initialize.py)."""
    import deepspeed

    from zerolab.handmade.core import model as fixed
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    outcomes = []
    for config in job["configs"]:
        net, outcome = fixed.build(), {"accepted": False, "error": "", "optimizer": None, "trained": False}
        try:
            engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
            outcome.update(accepted=True, optimizer=type(engine.optimizer).__name__,
                           inner=type(getattr(engine.optimizer, "optimizer", None)).__name__)
            if job.get("train"):
                inputs, targets = fixed.batch(0)
                micro = engine.train_micro_batch_size_per_gpu()
                engine.backward(fixed.loss(engine, inputs[:micro], targets[:micro]))
                engine.step()
                outcome["trained"] = True
        except Exception as error:  # noqa: BLE001 - any refusal, with DeepSpeed's words (ZenFlow raises Warning)
            outcome["error"] = f"{type(error).__name__}: {error}"
        outcomes.append(outcome)
    return outcomes


def muon_tags(job, namespace):
    """{parameter name: use_muon} after deepspeed.initialize with optimizer type Muon, on a model with an embedding,
    a hidden matrix, a norm and an output head, whose bias was tagged use_muon=True (and the matrix False) by hand
    (tests/test_config_initialize.py)."""
    import deepspeed
    import torch

    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(32, 16)
            self.hidden = torch.nn.Linear(16, 16)
            self.norm = torch.nn.LayerNorm(16)
            self.lm_head = torch.nn.Linear(16, 32, bias=False)

        def forward(self, ids):
            return self.lm_head(self.norm(self.hidden(self.embed_tokens(ids))))

    net = Tiny()
    net.hidden.bias.use_muon, net.hidden.weight.use_muon = True, False
    config = {"train_micro_batch_size_per_gpu": 1,
              "optimizer": {"type": "Muon", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": job["stage"]}}
    deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    return {name: param.use_muon for name, param in net.named_parameters()}
