"""What one rank really holds, read from the DeepSpeed engine's own tensors (DeepSpeed 0.19.8).

Where DeepSpeed keeps each model state, by the optimizer wrapper the engine built:

==========================  ===========================================  ============================================
wrapper (stage)             parameters / gradients                       fp32 master weights / Adam states
==========================  ===========================================  ============================================
client optimizer (0, fp32)  the model's parameters and their .grad        none: Adam updates the parameters in place
FP16_UnfusedOptimizer,      the model's 16-bit parameters, .grad          ``fp32_groups`` (whole copies); the inner
FP16_Optimizer (0, 16-bit)                                                optimizer's ``state`` (exp_avg, exp_avg_sq)
DeepSpeedZeroOptimizer      ``bit16_groups_flat`` (whole); gradient       ``single_partition_of_fp32_groups`` (this
(stage_1_and_2.py)          partition in ``averaged_gradients``, or the   rank's partition); the inner optimizer's
                            fp32 ``.grad`` of the master partition when   ``state``
                            the optimizer is offloaded
DeepSpeedZeroOptimizer_     ``fp16_partitioned_groups_flat`` (this        ``fp32_partitioned_groups_flat`` (a copy of
Stage3 (stage3.py)          rank's partition); ``grad_partitions_flat_    its own also when training in fp32: stage3.py
                            buffer``, or the master partition's fp32      means to reuse the partition, but compares a
                            ``.grad`` under offload                       torch.device with a str); the inner
                                                                          optimizer's ``state``
==========================  ===========================================  ============================================

Rather than trusting the names alone, bytes are summed over the union of the memory ranges the tensors
cover, so a view into a flat buffer is never counted twice and a master copy that is really the parameter
tensor itself (a client optimizer) counts as no extra memory (claim zero3-fp32-master-copy-in-fp32-training).
"""
import resource

import torch

# Keys of the measurement, in the order reports show them (bytes on one rank).
COMPONENTS = ("param_bytes", "grad_bytes", "fp32_grad_bytes", "master_weight_bytes", "optimizer_state_bytes")


def inner_optimizer(engine):
    """The torch optimizer that owns the Adam states (DeepSpeed's wrappers keep it as .optimizer)."""
    optimizer = engine.optimizer
    while not isinstance(optimizer, torch.optim.Optimizer) and hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


def parameter_tensors(engine):
    """The rank's copy of the training-precision parameters: whole below stage 3, its partition at stage 3."""
    wrapper = engine.optimizer
    tensors = list(getattr(wrapper, "fp16_partitioned_groups_flat", []))
    # Under stage 3 a parameter's .data is empty unless it is gathered or kept whole (persistence threshold).
    tensors += [p.data for p in engine.module.parameters() if p.data.numel() > 0]
    return tensors


def master_tensors(engine):
    """What the inner optimizer steps on: fp32 copies (whole or a partition), or the parameters themselves."""
    wrapper = engine.optimizer
    for name in ("fp32_partitioned_groups_flat", "single_partition_of_fp32_groups"):  # stage 3, stage 1/2
        if hasattr(wrapper, name):
            return list(getattr(wrapper, name))
    # Stage 3 hands its partitions to the inner optimizer only during step(); the others keep them there.
    return [p for group in inner_optimizer(engine).param_groups for p in group["params"]]


def optimizer_state_tensors(engine):
    """Adam's exp_avg and exp_avg_sq (any tensor state but the step counter)."""
    return [value for state in inner_optimizer(engine).state.values()
            for key, value in state.items() if torch.is_tensor(value) and key != "step"]


def gradient_tensors(engine):
    """Gradients held after backward, before step: (training-precision grads, fp32 grads of the master partition)."""
    wrapper = engine.optimizer
    grads = [p.grad for p in engine.module.parameters() if p.grad is not None]
    averaged = getattr(wrapper, "averaged_gradients", None) or {}
    for value in averaged.values():
        grads += [value] if torch.is_tensor(value) else [t for t in (value or []) if torch.is_tensor(t)]
    flat = getattr(wrapper, "grad_partitions_flat_buffer", None)
    if flat is not None:
        grads.append(flat)
    masters = master_tensors(engine)
    fp32_grads = [m.grad for m in masters if m.grad is not None]
    return grads, fp32_grads


def union_bytes(tensors, exclude=()):
    """Bytes covered by the tensors' memory ranges, each byte once, leaving out the ranges in ``exclude``."""
    def ranges(group):
        return sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                      for t in group if t is not None and t.numel() > 0)

    covered = _merge(ranges(tensors))
    for start, end in _merge(ranges(exclude)):
        covered = [piece for a, b in covered for piece in ((a, min(b, start)), (max(a, end), b)) if piece[0] < piece[1]]
    return sum(b - a for a, b in covered)


def _merge(spans):
    merged = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def gradient_bytes(engine):
    """Gradient bytes held right now; call it after backward and before step, while they are alive."""
    grads, fp32_grads = gradient_tensors(engine)
    return {"grad_bytes": union_bytes(grads), "fp32_grad_bytes": union_bytes(fp32_grads, exclude=grads)}


def model_state_bytes(engine, grad_bytes):
    """Per-component bytes on this rank, after a step; ``grad_bytes`` from :func:`gradient_bytes`."""
    params = parameter_tensors(engine)
    return {
        "param_bytes": union_bytes(params),
        **grad_bytes,
        "master_weight_bytes": union_bytes(master_tensors(engine), exclude=params),
        "optimizer_state_bytes": union_bytes(optimizer_state_tensors(engine)),
    }


def peak_memory_bytes(device):
    """Peak resident memory of this process on CPU; peak allocated CUDA memory on a GPU."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def current_memory_bytes(device):
    """Memory in use now: allocated CUDA memory on a GPU, resident memory of this process on CPU."""
    if device == "cuda":
        return torch.cuda.memory_allocated()
    import psutil

    return psutil.Process().memory_info().rss
