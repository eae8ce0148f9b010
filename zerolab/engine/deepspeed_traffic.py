"""DeepSpeed 0.19.8's own traffic per rank and optimizer step: collectives and offload copies, as the meter measured them.

zerolab.engine.comm.traffic counts volumes the ZeRO paper's way. This module models what DeepSpeed 0.19.8 really does on
one rank, checked call for call against zerolab.run.meter on real 2-rank runs (tests/test_traffic_measured.py):

ZeRO-1/2 (stage_1_and_2.py), the flat parameter buffer padded to a multiple of 2 x ranks elements:
- each gradient bucket is all-reduced (``use_multi_rank_bucket_allreduce``), on every micro-step at stage 2 and at
  the accumulation boundary at stage 1, in the training dtype;
- the updated parameters come back with one all_gather_into_tensor of the whole padded flat buffer per parameter
  group (runtime/utils.py ``all_gather_dp_groups``);
- the gradient norm is one all-reduce of one fp32 element; in fp16, and in bf16 with ``bf16.check_grad_overflow``
  (default true), the overflow flag is one all-reduce of one uint8 (``has_overflow``).

Offload to the CPU, ZeRO-1/2 (``copy_grads_in_partition``): at the boundary the rank's gradient partition is cast to
fp32 on the device and copied to the host fp32 gradient (``async_inplace_copy_grad_to_fp32_buffer_from_gpu``): 4
bytes per element. With gradient accumulation every micro-step also copies the 16-bit gradient of each parameter
the rank owns (whole parameters, ``async_accumulate_grad_in_cpu_via_gpu``) to a host accumulation buffer, and from
the second micro-step on brings that buffer back first to add to it (stage 2 only: stage 1 reduces once, at the
boundary, and skips the buffer). After CPU Adam the updated 16-bit partition goes back to the device once per step.
"""
import math

ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "float32": 4, "float16": 2, "bfloat16": 2, "uint8": 1}
DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # torch's names, as the meter reports them
ALIGNMENT = 2  # stage_1_and_2.py nccl_start_alignment_factor: partitions start on 4-byte boundaries of 16-bit values


def flat_partition(param_sizes, world_size, rank):
    """(padded partition size, elements of the whole parameters that overlap ``rank``'s partition) for ZeRO-1/2."""
    total = sum(param_sizes)
    padded = math.ceil(total / (ALIGNMENT * world_size)) * ALIGNMENT * world_size
    size = padded // world_size
    start, end = rank * size, (rank + 1) * size
    owned, offset = 0, 0
    for numel in param_sizes:
        if offset < end and offset + numel > start:
            owned += numel
        offset += numel
    return size, owned, padded


def zero12_offload_bytes(partition, owned, grad_accum, element, stage, master="fp32"):
    """(device-to-host, host-to-device) bytes of one rank per optimizer step, ZeRO-1/2 with CPU optimizer offload.
    ``master`` "bf16" (bf16.bf16_master_weights_and_grads): the gradient partition is copied in bf16, and it is the
    accumulation buffer itself, so accumulating copies are the partition's size (measured on 2 CPU ranks,
    tests/test_traffic_measured.py)."""
    # Stage 1 reduces (and offloads) only at the boundary, where the micro-step counter is back at 0 (measured): no
    # accumulation buffer. Stage 2 offloads on every micro-step.
    accumulating_copies = grad_accum if grad_accum > 1 and stage == 2 else 0
    kept, accumulated = (4, owned) if master == "fp32" else (2, partition)
    d2h = kept * partition + element * accumulated * accumulating_copies
    h2d = element * partition + element * accumulated * max(0, accumulating_copies - 1)
    return d2h, h2d


def _collective(op, dtype, calls, elements):
    return {"op": op, "dtype": dtype, "calls": calls, "elements": elements,
            "bytes": elements * ELEMENT_BYTES[dtype]}


def step_traffic(param_sizes, stage, world_size, rank=0, grad_accum=1, precision="bf16", offload_optimizer="none",
                 offload_param="none", device="cpu", master="fp32"):
    """One rank's collectives and offload bytes in one optimizer step of DeepSpeed 0.19.8, in the meter's shape.

    ``param_sizes`` are the model's parameter sizes in order (one parameter group, default bucket sizes, as
    zerolab.run.make_config builds it). Returns {"collectives": [{op, dtype, calls, elements, bytes}],
    "device_to_host_bytes", "host_to_device_bytes"}, or None for stage 0 (no ZeRO optimizer to model).
    """
    if stage not in (1, 2, 3):
        return None
    element = ELEMENT_BYTES[precision]
    total = sum(param_sizes)
    d2h = h2d = 0
    if stage in (1, 2):
        partition, owned, padded = flat_partition(param_sizes, world_size, rank)
        reductions = grad_accum if stage == 2 else 1
        collectives = [_collective("all-reduce", DTYPE[precision], reductions, reductions * total),
                       _collective("all-reduce", "float32", 1, 1),
                       _collective("all-gather", DTYPE[precision], 1, padded)]
        if precision != "fp32":
            collectives.append(_collective("all-reduce", "uint8", 1, 1))
        if offload_optimizer == "cpu":
            d2h, h2d = zero12_offload_bytes(partition, owned, grad_accum, element, stage, master)
    else:
        collectives = zero3_collectives(param_sizes, world_size, grad_accum, precision)
        d2h, h2d = zero3_offload_bytes(param_sizes, world_size, rank, grad_accum, element, offload_optimizer,
                                       offload_param, device, master)
    merged = {}
    for row in collectives:
        key = (row["op"], row["dtype"])
        if key in merged:
            for field in ("calls", "elements", "bytes"):
                merged[key][field] += row[field]
        else:
            merged[key] = dict(row)
    return {"collectives": list(merged.values()), "device_to_host_bytes": d2h, "host_to_device_bytes": h2d}


def zero3_partition(numel, world_size, rank):
    """(padded partition size, whether ``rank``'s piece holds real data) of one parameter under ZeRO-3."""
    size = math.ceil(numel / world_size)
    return size, size * rank < numel


PREFETCH_BUCKET = 50_000_000  # stage3_prefetch_bucket_size default, elements


def zero3_collectives(param_sizes, world_size, grad_accum, precision):
    """ZeRO-3 (persistence threshold 0): parameter all-gathers, one gradient reduce-scatter per micro-step, the norm.

    Measured for a model smaller than ``stage3_prefetch_bucket_size``: the first fetch of a micro-step prefetches
    every parameter in one all-gather, and backward reuses them (``stage3_max_reuse_distance``), so one call per
    micro-step, not the paper's forward and backward gathers. Larger models gather per submodule and bucket; that
    count (forward and backward, one call per parameter) is a rough figure, not measured here.
    """
    dtype = DTYPE[precision]
    gathered = sum(zero3_partition(n, world_size, 0)[0] * world_size for n in param_sizes)
    if gathered <= PREFETCH_BUCKET:
        gathers = _collective("all-gather", dtype, grad_accum, grad_accum * gathered)
    else:
        gathers = _collective("all-gather", dtype, 2 * grad_accum * len(param_sizes), 2 * grad_accum * gathered)
    return [gathers, _collective("reduce-scatter", dtype, grad_accum, grad_accum * gathered),
            _collective("all-reduce", "float32", 1, 1)]


def zero3_offload_bytes(param_sizes, world_size, rank, grad_accum, element, offload_optimizer, offload_param,
                        device="cpu", master="fp32"):
    """(device-to-host, host-to-device) bytes of one rank per optimizer step under ZeRO-3 offload.

    stage3.py ``partition_grads``: the first micro-step copies the gradient partition into the host buffer and takes
    that buffer back to the device; on a GPU each later micro-step brings the buffer to the device, adds, and copies
    it back, while on CPU ranks (the buffer counts as on the accelerator) it adds in place. At the boundary the
    partition goes to the host gradient in the master weights' dtype (fp32, or bf16 with ``master="bf16"``). After
    the step the updated 16-bit partition is copied into the device's flat buffer, unless the parameters are
    offloaded too; then every fetch (forward and backward, each micro-step) brings the partition from the host.
    """
    d2h = h2d = 0
    owned = sum(size for size, real in (zero3_partition(n, world_size, rank) for n in param_sizes) if real)
    mine = sum(zero3_partition(n, world_size, rank)[0] for n in param_sizes)
    if offload_optimizer == "cpu":
        round_trips = grad_accum if device != "cpu" else 1
        d2h += element * owned * round_trips
        kept = 4 if master == "fp32" else 2
        if device != "cpu" or element != kept:
            d2h += kept * owned  # on CPU ranks a buffer of the master's dtype already is its gradient: no copy
        h2d += element * owned * round_trips
        if offload_param == "none":
            h2d += element * mine
    if offload_param == "cpu":
        small = sum(n for n in param_sizes) <= PREFETCH_BUCKET
        fetches = 1 if small else 2  # one prefetch per micro-step reused by backward (measured), else fwd + bwd
        h2d += fetches * grad_accum * element * mine
    return d2h, h2d


def offload_bytes(params, stage, world_size, grad_accum=1, precision="fp16", offload_optimizer="cpu",
                  offload_param="none", device="cuda", master="fp32"):
    """(device-to-host, host-to-device) bytes per GPU and optimizer step for a large model (partitions of params/N)."""
    element = ELEMENT_BYTES[precision]
    if stage in (1, 2):
        if offload_optimizer == "none":
            return 0, 0
        partition = params / world_size
        return tuple(round(x) for x in zero12_offload_bytes(partition, partition, grad_accum, element, stage,
                                                             master))
    if stage == 3:
        sizes = [params]
        d2h, h2d = zero3_offload_bytes(sizes, world_size, 0, grad_accum, element, offload_optimizer, offload_param,
                                       device, master)
        return d2h, h2d
    return 0, 0
