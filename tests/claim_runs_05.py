"""Rank probe of tests/test_claims_05.py (lesson 05's claims that need a DeepSpeed run): one job, three engines.

- stage 0 and stage 2 (bf16, 2 micro-steps a step, 2 steps): what deepspeed.initialize logs on rank 0 (the ZeRO
  stage line), and at stage 2, per micro-step, the elements of every collective the backward sends, the full
  gradients left in .grad after it, and the gradient partition the optimizer holds at the boundary;
- stage 3 with the optimizer offloaded to "nvme" and no nvme_path: where deepspeed.initialize fails.
"""
import logging
import os
import traceback

COLLECTIVES = ("all_reduce", "reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "all_gather", "broadcast")


def lesson_05(job, namespace):
    import deepspeed
    import torch

    from zerolab.handmade.core import model as fixed
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    calls = _watch_collectives()
    log = _watch_log()
    results = {"psi": sum(fixed.numels(fixed.build()))}

    log.clear()
    net = fixed.build()
    deepspeed.initialize(model=net, model_parameters=net.parameters(), config=_config(0))
    results["stage0_log"] = [line for line in log if "ZeRO" in line]

    log.clear()
    net = fixed.build()
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(),
                                           config=_config(2, bf16={"enabled": True}, gradient_accumulation_steps=2))
    results["stage2_log"] = [line for line in log if "ZeRO" in line]
    micro, rank = engine.train_micro_batch_size_per_gpu(), int(os.environ["RANK"])
    steps = []
    for step in range(2):
        inputs, targets = (rows[fixed.rows(rank, 2)].to(torch.bfloat16) for rows in fixed.batch(step))
        for first in (0, micro):
            calls.clear()
            engine.backward(fixed.loss(engine, inputs[first:first + micro], targets[first:first + micro]))
            backward = list(calls)
            boundary = engine.is_gradient_accumulation_boundary()
            partition = sum(t.numel() for group in engine.optimizer.averaged_gradients.values() for t in group or [])
            steps.append({"backward": backward, "boundary": boundary, "partition": partition,
                          "held_grads": sum(p.grad.numel() for p in net.parameters() if p.grad is not None)})
            engine.step()
    results["stage2_micro_steps"] = steps
    results["stage2_partition_size"] = [int(n) for n in engine.optimizer.partition_size]

    net = fixed.build()
    nvme = _config(3, optimizer_offload={"device": "nvme"})
    try:
        deepspeed.initialize(model=net, model_parameters=net.parameters(), config=nvme)
        results["nvme"] = {"error": None}
    except Exception as error:  # noqa: BLE001 - what DeepSpeed raises, with where
        frames = traceback.extract_tb(error.__traceback__)
        results["nvme"] = {"error": type(error).__name__, "message": str(error),
                           "functions": [frame.name for frame in frames],
                           "files": [os.path.basename(frame.filename) for frame in frames]}
    return results


def _config(stage, optimizer_offload=None, **extra):
    zero = {"stage": stage}
    if optimizer_offload:
        zero["offload_optimizer"] = optimizer_offload
    return {"train_micro_batch_size_per_gpu": 3, "zero_optimization": zero, "steps_per_print": 10**9,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}, **extra}


def _watch_collectives():
    """[(name, elements)] of every collective DeepSpeed's comm backend sends, from now on."""
    from deepspeed.comm.torch import TorchBackend

    calls = []

    def counted(name, method):
        def call(self, *args, **kwargs):
            tensor = args[0] if args else next(iter(kwargs.values()))
            calls.append((name, tensor.numel() if hasattr(tensor, "numel") else None))
            return method(self, *args, **kwargs)
        return call

    for name in COLLECTIVES:
        setattr(TorchBackend, name, counted(name, getattr(TorchBackend, name)))
    return calls


def _watch_log():
    """The messages DeepSpeed's logger emits from now on, INFO and up."""
    from deepspeed.utils import logger

    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger.addHandler(Keep(logging.INFO))
    logger.setLevel(logging.INFO)
    return lines
