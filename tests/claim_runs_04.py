"""Rank job for tests/test_claims_04.py (lesson 04, "Writing the config"): real DeepSpeed 0.19.8 engines on CPU
ranks, watched from inside, for the claims no config class shows. Run as kind "claim_runs_04:lesson04".

The job builds one engine per case, one after the other in the same ranks, trains a small model of Linear layers
on the fixed data of zerolab.handmade.core.model, and reports from DeepSpeed's own objects:

- stage1, stage2, stage3: the optimizer DeepSpeed built from the config's optimizer block, which micro-steps'
  step() updates the weights, and what each stage partitions: Adam's moments, the gradients a rank keeps inside an
  accumulation window, the parameters;
- buckets, buckets_loose: ZeRO-2's gradient bucket buffers with and without contiguous_gradients, and whether each
  gradient sits in the bucket's buffer right after its hook;
- param_offload_at_stage2: what DeepSpeed says and does when a stage-2 config has offload_param;
- param_offload: ZeRO-3 with parameters and optimizer offloaded, two micro-steps a step, with prefetch off and a
  reuse distance smaller than the model (as DeepSpeed's defaults are for a model of billions of parameters): where
  each rank's parameter partition lives, the partitions all-gathered in each forward and each backward, and the
  dtype of the gradient copies to the host (zerolab.run.meter);
- fp16: dynamic loss scaling on a real ZeRO-2 engine (the CPU accelerator is told fp16 works; torch runs fp16 on
  CPU): the first scale, skipped steps, hysteresis, the doubling after the window, the floor.
"""
import os

import torch

BUCKET = 1500  # elements: larger than any parameter of the model below, smaller than the model
LAYERS = 6  # Linear(16, 16) layers before the Linear(16, 23) head: Ψ = 6 * 272 + 391 = 2,023
REUSE = 1000  # stage3_max_reuse_distance of the param_offload case, elements


def lesson04(job, namespace):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed  # noqa: F401 - before the zerolab helpers that import it

    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    _cpu_info_once()
    return {name: case() for name, case in {
        "stage1": lambda: _partitioning(1),
        "stage2": lambda: _partitioning(2),
        "stage3": lambda: _partitioning(3),
        "buckets": lambda: _buckets(contiguous_gradients=True),
        "buckets_loose": lambda: _buckets(contiguous_gradients=False),
        "param_offload_at_stage2": _param_offload_at_stage2,
        "param_offload": _param_offload,
        "fp16": _fp16,  # last: it ends with the error DeepSpeed raises at the loss scale's floor
    }.items()}


def _cpu_info_once():
    """DeepSpeedCPUAdam asks py-cpuinfo about the CPU each time it is built (a subprocess, a second or more): ask
    once, for every engine of the job."""
    import cpuinfo

    info = cpuinfo.get_cpu_info()
    cpuinfo.get_cpu_info = lambda: info


def _model():
    from zerolab.handmade.core import model as fixed

    torch.manual_seed(0)
    layers = [module for _ in range(LAYERS) for module in (torch.nn.Linear(fixed.IN, fixed.IN), torch.nn.Tanh())]
    return torch.nn.Sequential(*layers, torch.nn.Linear(fixed.IN, fixed.OUT))


def _engine(config):
    import deepspeed

    from zerolab.handmade.core import model as fixed

    net = _model()
    config = {"train_micro_batch_size_per_gpu": fixed.GLOBAL_BATCH // 4, "steps_per_print": 10**9, **config}
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    return engine


def _micro_batches(step):
    """This rank's two micro-batches of step ``step``."""
    from zerolab.handmade.core import model as fixed

    rank, micro = int(os.environ["RANK"]), fixed.GLOBAL_BATCH // 4
    inputs, targets = (rows[fixed.rows(rank, 2)] for rows in fixed.batch(step))
    return [(inputs[first:first + micro], targets[first:first + micro]) for first in (0, micro)]


def _loss(engine, inputs, targets):
    outputs = engine(inputs.to(engine.get_data_types()[0]))
    return torch.nn.functional.mse_loss(outputs.float(), targets)


def _adam(**params):
    return {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.8, 0.9], "torch_adam": True, **params}}


def _partitioning(stage):
    """Two micro-steps a step at ZeRO stage ``stage``: what a rank keeps inside the window and after the step."""
    engine = _engine({"gradient_accumulation_steps": 2, "bf16": {"enabled": True}, "optimizer": _adam(),
                      "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}})
    module, optimizer = engine.module, engine.optimizer
    window, global_steps, changed = {}, [], []
    for index, (inputs, targets) in enumerate(_micro_batches(0)):
        engine.backward(_loss(engine, inputs, targets))
        if index == 0:
            window = {"grad_elements": sum(p.grad.numel() for p in module.parameters() if p.grad is not None),
                      "partition_gradients": getattr(optimizer, "partition_gradients", None)}
        before = _weights(module)
        engine.step()
        global_steps.append(engine.global_steps)
        changed.append(any(not torch.equal(b, a) for b, a in zip(before, _weights(module))))
    inner = optimizer.optimizer
    return {"psi": sum(getattr(p, "ds_numel", p.numel()) for p in module.parameters()),
            "optimizer": f"{type(inner).__module__}.{type(inner).__name__}",
            "lr": inner.param_groups[0]["lr"], "betas": list(inner.param_groups[0]["betas"]),
            "moment_elements": sum(state["exp_avg"].numel() for state in inner.state.values() if "exp_avg" in state),
            "param_elements_held": sum(p.numel() for p in module.parameters()),
            "param_partition_elements": sum(p.ds_tensor.numel() for p in module.parameters()) if stage == 3 else None,
            "global_steps": global_steps, "changed": changed, **window}


def _weights(module):
    """Copies of what this rank holds of each parameter (its partition at stage 3)."""
    return [getattr(p, "ds_tensor", p).detach().clone() for p in module.parameters()]


def _buckets(contiguous_gradients):
    """One ZeRO-2 step in bf16 (overlap_comm off): the buffers of the bucket each gradient joins, read right after
    the gradient's hook, and whether the gradient then lives in one of them."""
    engine = _engine({"bf16": {"enabled": True}, "optimizer": _adam(),
                      "zero_optimization": {"stage": 2, "overlap_comm": False, "reduce_bucket_size": BUCKET,
                                            "contiguous_gradients": contiguous_gradients}})
    optimizer = engine.optimizer
    seen, storages = {"buffers": [], "in_bucket": []}, set()
    original_hook = optimizer.reduce_independent_p_g_buckets_and_remove_grads

    def hook(param, i):
        original_hook(param, i)
        bucket = optimizer.ipg_buckets[optimizer.get_param_comm_dtype(param)]
        seen["buffers"].append([[buffer.numel(), str(buffer.dtype)] for buffer in bucket.buffer])
        grad = optimizer.get_gradient_for_reduction(param)
        buffers = {buffer.untyped_storage().data_ptr() for buffer in bucket.buffer}
        storages.update(buffers)
        seen["in_bucket"].append(grad is not None and grad.untyped_storage().data_ptr() in buffers)

    optimizer.reduce_independent_p_g_buckets_and_remove_grads = hook
    inputs, targets = _micro_batches(0)[0]
    engine.backward(_loss(engine, inputs, targets))
    engine.step()
    return dict(seen, reduce_bucket_size=optimizer.reduce_bucket_size, distinct_buffers=len(storages))


def _param_offload_at_stage2():
    """ZeRO-2 given offload_param: the warnings DeepSpeed logs while it builds the engine and trains a step (and, to
    show they would be heard, those of a config with the deprecated cpu_offload), and where the parameters are."""
    import logging

    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.utils import logger

    said = []

    class Said(logging.Handler):
        def emit(self, record):
            said.append(f"{record.levelname}: {record.getMessage()}")

    handler, level = Said(level=logging.WARNING), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        engine = _engine({"bf16": {"enabled": True}, "optimizer": _adam(),
                          "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu", "pin_memory": False}}})
        inputs, targets = _micro_batches(0)[0]
        engine.backward(_loss(engine, inputs, targets))
        engine.step()
        quiet = list(said)
        # a config DeepSpeed warns about, to show the handler would hear a warning
        DeepSpeedConfig({"train_batch_size": 8, "zero_optimization": {"stage": 2, "cpu_offload": True}})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    optimizer, params = engine.optimizer, list(engine.module.parameters())
    return {"said": quiet, "heard_a_warning": said[len(quiet):], "optimizer": type(optimizer).__name__,
            "offload_param_on_the_optimizer": getattr(optimizer, "offload_param", None),
            "params_partitioned": any(hasattr(p, "ds_tensor") for p in params),
            "param_elements_held": sum(p.numel() for p in params),
            "config_offload_param": engine.zero_offload_param().device if engine.zero_offload_param() else None}


def _fp16():
    """ZeRO-2 in fp16 with dynamic loss scaling; an overflow is a loss multiplied by inf."""
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    original = accelerator.is_fp16_supported
    accelerator.is_fp16_supported = lambda: True
    try:
        engine = _engine({"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 8, "hysteresis": 2,
                                   "loss_scale_window": 3, "min_loss_scale": 100},
                          "optimizer": _adam(), "zero_optimization": {"stage": 2}})
    finally:
        accelerator.is_fp16_supported = original
    optimizer, steps, error = engine.optimizer, [], ""
    first = optimizer.loss_scale
    for overflow in (True, True, False, False, False, False, True, True, True, True):
        before = [p.detach().clone() for p in engine.module.parameters()]
        inputs, targets = _micro_batches(len(steps))[0]
        loss = _loss(engine, inputs, targets)
        engine.backward(loss * float("inf") if overflow else loss)
        try:
            engine.step()
        except Exception as failure:  # noqa: BLE001 - DeepSpeed's own exception at the floor
            error = str(failure)
            break
        after = [p.detach() for p in engine.module.parameters()]
        steps.append({"overflow": overflow, "scale": optimizer.loss_scale, "skipped": engine.skipped_steps,
                      "changed": any(not torch.equal(b, a) for b, a in zip(before, after))})
    return {"first_scale": first, "steps": steps, "error": error, "scaler": type(optimizer.loss_scaler).__name__}


def _param_offload():
    """ZeRO-3, parameters and optimizer offloaded to the CPU, two micro-steps a step, two steps."""
    from deepspeed.runtime.zero import partition_parameters

    from zerolab.run.meter import TrafficMeter

    engine = _engine({"gradient_accumulation_steps": 2, "bf16": {"enabled": True},
                      "optimizer": _adam(torch_adam=False),
                      "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                            "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": REUSE,
                                            "offload_optimizer": {"device": "cpu", "pin_memory": False},
                                            "offload_param": {"device": "cpu", "pin_memory": False}}})
    optimizer, params = engine.optimizer, list(engine.module.parameters())
    host = {buffer.untyped_storage().data_ptr() for buffer in optimizer.param_groups_fp16_flat_cpu_memory}
    original, phase, gathered = partition_parameters._dist_allgather_fn, [None], []

    def all_gather(input_tensor, output_tensor, group=None):
        gathered.append([phase[0], input_tensor.numel()])
        return original(input_tensor, output_tensor, group)

    meter = TrafficMeter(engine)
    partition_parameters._dist_allgather_fn = all_gather
    try:
        for step in range(2):
            for micro, (inputs, targets) in enumerate(_micro_batches(step)):
                phase[0] = f"step {step} micro {micro} forward"
                loss = _loss(engine, inputs, targets)
                phase[0] = f"step {step} micro {micro} backward"
                with meter.step():
                    engine.backward(loss)
                phase[0] = f"step {step} micro {micro} step"
                engine.step()
    finally:
        partition_parameters._dist_allgather_fn = original
    return {"partitions": [p.ds_tensor.numel() for p in params], "param_elements": [p.ds_numel for p in params],
            "partitions_in_host_buffer": [p.ds_tensor.untyped_storage().data_ptr() in host for p in params],
            "host_buffer_devices": sorted({b.device.type for b in optimizer.param_groups_fp16_flat_cpu_memory}),
            "offload_param": optimizer.offload_param, "gathered": gathered,
            "backward_to_host": [[[c["dtype"], c["elements"]] for c in record["copies"]
                                  if c["direction"] == "device_to_host"] for record in meter.as_dicts()]}

