"""Rank functions for tests/test_claims_02.py (lesson 02, CPU and NVMe offload), run by
zerolab.handmade.core.harness as kind "claim_runs_02:offload" on 2 CPU ranks.

One job trains a few DeepSpeed 0.19.8 engines on the fixed model (zerolab.handmade.core.model), one optimizer step
each, and reports what DeepSpeed's own objects show: which optimizer the engine built and where its ZeRO optimizer
put each buffer, which tensors it asked the accelerator to pin, the 16-bit accumulation buffers, the collectives of
each micro-step, and what an NVMe offload below stage 3 wrote to its nvme_path. On CPU ranks the accelerator's
device is CPU memory too, so placement is read from DeepSpeed's decisions (its `cpu_offload` flag and `device`,
the optimizer it built, the buffers it pins) rather than from tensor.device alone.
"""
import logging
import os

# name: (zero stage, offload_optimizer block or None, gradient_accumulation_steps[, what the bf16 block adds])
BF16_MASTER_AND_MOMENTS = {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
CONFIGS = {
    "zero2_cpu": (2, {"device": "cpu"}, 2),
    "zero2_cpu_unpinned": (2, {"device": "cpu", "pin_memory": False}, 2),
    "zero1_nvme": (1, {"device": "nvme"}, 2),
    "zero2_nvme": (2, {"device": "nvme"}, 1),
    "zero2_none": (2, None, 2),
    "zero2_cpu_bf16_master": (2, {"device": "cpu"}, 2, BF16_MASTER_AND_MOMENTS),
    "zero1_cpu_bf16_master_fp32_moments": (1, {"device": "cpu"}, 1, {"bf16_master_weights_and_grads": True}),
}


def offload(job, namespace):
    """{config name: what its engine showed}, for every config of CONFIGS."""
    import warnings

    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator
    from deepspeed.utils import logger
    from deepspeed.comm.torch import TorchBackend

    from zerolab.handmade.core import model as fixed
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    accelerator = get_accelerator()
    pinned, calls = [], []

    real_pin = type(accelerator).pin_memory

    def pin(self, tensor, *args, **kwargs):
        out = real_pin(self, tensor, *args, **kwargs)
        pinned.append((out.data_ptr(), out.numel(), str(out.dtype)))
        return out

    type(accelerator).pin_memory = pin
    for name, method in list(vars(TorchBackend).items()):
        if name in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "reduce", "broadcast",
                    "all_gather", "reduce_scatter", "all_reduce_coalesced"):
            setattr(TorchBackend, name, _recorded(name, method, calls))

    said = _Said()
    logger.addHandler(said)
    rank = int(os.environ["RANK"])
    results = {}
    for name, (stage, offload_block, accumulation, *bf16_extra) in CONFIGS.items():
        pinned.clear()
        nvme = None
        zero = {"stage": stage}
        if offload_block is not None:
            zero["offload_optimizer"] = dict(offload_block)
            if offload_block["device"] == "nvme":
                nvme = os.path.join(job["result_dir"], f"nvme_{name}_rank{rank}")
                os.makedirs(nvme)
                zero["offload_optimizer"]["nvme_path"] = nvme
        params = {"lr": 1e-3, **({} if offload_block else {"torch_adam": True})}
        config = {"train_micro_batch_size_per_gpu": fixed.GLOBAL_BATCH // (2 * accumulation),
                  "gradient_accumulation_steps": accumulation, "bf16": {"enabled": True, **dict(*bf16_extra)},
                  "optimizer": {"type": "AdamW", "params": params}, "zero_optimization": zero}
        net = fixed.build()
        said.records.clear()
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
        optimizer = engine.optimizer
        inner = optimizer.optimizer
        masters_before = [t.detach().float().sum().item() for t in optimizer.single_partition_of_fp32_groups]
        inputs, targets = (rows[fixed.rows(rank, 2)].bfloat16() for rows in fixed.batch(0))
        micro = fixed.GLOBAL_BATCH // (2 * accumulation)
        per_micro_step = []
        for first in range(0, accumulation * micro, micro):
            calls.clear()
            engine.backward(fixed.loss(engine, inputs[first:first + micro], targets[first:first + micro]))
            engine.step()
            per_micro_step.append([call for call in calls if call[2] > 1])  # scalars: the norm, overflow flags
        warnings_said = [str(w.message) for w in warned] + [r.getMessage() for r in said.records
                                                            if r.levelno >= logging.WARNING]
        accumulated = getattr(optimizer, "accumulated_grads_in_cpu", {}) or {}
        bit16 = list(optimizer.bit16_groups_flat)
        results[name] = {
            "stage": stage,
            "steps": engine.global_steps,
            "params": sum(p.numel() for p in net.parameters()),
            "wrapper": type(optimizer).__name__,
            "inner": type(inner).__name__,
            "fp32_optimizer_states": getattr(inner, "fp32_optimizer_states", None),
            "cpu_offload": optimizer.cpu_offload,
            "device": optimizer.device,
            "accelerator_device": accelerator.current_device_name(),
            "masters": [_describe(t) for t in optimizer.single_partition_of_fp32_groups],
            "master_grads": [_describe(t.grad) for t in optimizer.single_partition_of_fp32_groups],
            "masters_moved": [t.detach().float().sum().item() != before for t, before in
                              zip(optimizer.single_partition_of_fp32_groups, masters_before)],
            "states": sorted((key, *_describe(value)) for state in inner.state.values()
                             for key, value in state.items() if torch.is_tensor(value) and key != "step"),
            "bit16_flat": [_describe(t) for t in bit16],
            "params_inside_bit16_flat": all(any(_inside(p, flat) for flat in bit16) for p in net.parameters()),
            "param_dtypes": sorted({str(p.dtype) for p in net.parameters()}),
            "accumulated": [_describe(t) for t in accumulated.values()],
            "pinned": [list(entry) for entry in pinned],
            "buffers": _buffers(optimizer, accumulated, bit16),
            "collectives": per_micro_step,
            "swaps_optimizer_to_nvme": engine.zero_nvme_offload_optimizer(),
            "warnings": warnings_said,
            "nvme_files": sorted(os.path.relpath(os.path.join(folder, file), nvme) for folder, _, files in
                                 os.walk(nvme) for file in files) if nvme else None,
        }
        engine.destroy()
    logger.removeHandler(said)
    return results


class _Said(logging.Handler):
    """Keeps what DeepSpeed's logger says (on every rank: its handler writes rank 0's only to the log)."""

    def __init__(self):
        super().__init__(level=0)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def _describe(tensor):
    if tensor is None:
        return None
    return [str(tensor.dtype), tensor.numel(), str(tensor.device)]


def _inside(tensor, flat):
    start, end = flat.data_ptr(), flat.data_ptr() + flat.numel() * flat.element_size()
    return start <= tensor.data_ptr() < end


def _buffers(optimizer, accumulated, bit16):
    """{buffer kind: [data_ptr, ...]} of the ZeRO optimizer's buffers, to tell which of them were pinned."""
    found = {"fp32_master_partition": [t.data_ptr() for t in optimizer.single_partition_of_fp32_groups],
             "fp32_gradient_partition": [t.grad.data_ptr() for t in optimizer.single_partition_of_fp32_groups
                                         if t.grad is not None],
             "accumulation_buffers": [t.data_ptr() for t in accumulated.values()],
             "bit16_parameters": [t.data_ptr() for t in bit16]}
    if optimizer.cpu_offload:
        found["bit16_staging_buffer"] = [t.data_ptr() for t in optimizer.param_buffer_of_bit16_for_cpu_offload_groups]
        found["temp_gradient_buffer"] = [optimizer.temp_grad_buffer_for_cpu_offload.data_ptr()]
    return found


def _recorded(name, method, calls):
    def recording(self, *args, **kwargs):
        tensor = args[0] if args else next(iter(kwargs.values()))
        tensors = tensor if isinstance(tensor, (list, tuple)) else [tensor]
        calls.append((name, str(tensors[0].dtype), sum(t.numel() for t in tensors)))
        return method(self, *args, **kwargs)
    return recording
