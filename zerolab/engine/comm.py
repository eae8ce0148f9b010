"""Communication per training step and per rank, for DDP (ZeRO stage 0) and ZeRO-1/2/3, and what it costs in time.

Volumes follow the ZeRO paper (arXiv:1910.02054, section 7), which counts *elements* Psi per step:
- DDP: an all-reduce is a reduce-scatter plus an all-gather, "2Psi data movement during each training step" (7.1);
- ZeRO-1/2 (P_os, P_os+g): a reduce-scatter of the gradients (Psi) plus an all-gather of the updated
  parameters (Psi): 2Psi, "exactly the same as the baseline DP" (7.2.1);
- ZeRO-3 (P_os+g+p): parameters all-gathered for the forward pass and "once again for the backward
  propagation", plus the gradient reduce-scatter: 3Psi, 1.5x the baseline (7.2.2).

What gradient accumulation changes (GAS = gradient_accumulation_steps micro-steps per optimizer step):
- stage 0 and ZeRO-1 reduce only at the accumulation boundary (DeepSpeed engine.allreduce_gradients);
- ZeRO-2 and ZeRO-3 reduce on every micro-step ("ZeRO stage >= 2 communicates during non gradient
  accumulation boundaries as well", engine.py), so their gradient traffic is GAS x Psi;
- ZeRO-3 also gathers the parameters twice on every micro-step.

Bytes on the wire per rank use the ring algorithm: a reduce-scatter or an all-gather of n elements makes each
rank send (N-1)/N * n elements; an all-reduce twice that (NCCL's documented "algorithm bandwidth" factors).
Elements are 16-bit under fp16/bf16 training and 32-bit under fp32.
"""
import math
import re
from dataclasses import dataclass

# Link bandwidths in bytes per second, one direction.
BANDWIDTHS = {
    "pcie3": 15.75e9,  # PCIe 3.0 x16: 8 GT/s x 16 lanes x 128b/130b (PCI-SIG base spec) ~ 15.75 GB/s
    "pcie4": 31.5e9,  # PCIe 4.0 x16: 16 GT/s, same encoding ~ 31.5 GB/s
    "pcie5": 63e9,  # PCIe 5.0 x16: 32 GT/s ~ 63 GB/s
    "nvlink3": 300e9,  # A100 NVLink 3: 600 GB/s total, 300 GB/s per direction (NVIDIA A100 datasheet)
    "nvlink4": 450e9,  # H100 SXM NVLink 4: 900 GB/s total, 450 GB/s per direction (NVIDIA H100 datasheet)
    "ib-hdr": 25e9,  # InfiniBand HDR: 200 Gb/s per port = 25 GB/s (NVIDIA ConnectX-6 spec)
    "ib-ndr": 50e9,  # InfiniBand NDR: 400 Gb/s per port = 50 GB/s (NVIDIA ConnectX-7 spec)
    "ethernet-100g": 12.5e9,  # 100 Gb/s Ethernet = 12.5 GB/s (IEEE 802.3)
    "ethernet-25g": 3.125e9,  # 25 Gb/s Ethernet
    "ethernet-10g": 1.25e9,  # 10 Gb/s Ethernet
}
BACKWARD_SHARE = 2 / 3  # backward costs about twice the forward FLOPs (Kaplan et al. 2020, C ~ 6N = 2N fwd + 4N bwd)
DEFAULT_BUCKET = 500_000_000  # reduce_bucket_size and allgather_bucket_size default, elements (zero/config.py)
DEFAULT_PREFETCH_BUCKET = 50_000_000  # stage3_prefetch_bucket_size default, elements
# When a collective runs. "last backward" is the backward pass of the boundary micro-step only.
WHEN = ("forward", "backward", "last backward", "after backward", "after step")

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(GB/s|Gb/s|Gbps|MB/s|B/s)?\s*$", re.IGNORECASE)


def bandwidth(link):
    """Bytes per second for a preset name ('pcie4', 'nvlink3', 'ib-ndr', ...), '25GB/s', '200Gbps' or a number of bytes/s."""
    if isinstance(link, (int, float)) and not isinstance(link, bool):
        if link <= 0:
            raise ValueError(f"bandwidth must be > 0 bytes/s, got {link!r}")
        return float(link)
    key = str(link).strip().lower()
    if key in BANDWIDTHS:
        return BANDWIDTHS[key]
    match = _RATE.match(str(link))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"unknown bandwidth {link!r}: use one of {', '.join(BANDWIDTHS)}, or e.g. '25GB/s', '200Gbps'")
    value, unit = float(match.group(1)), (match.group(2) or "B/s")
    if unit == "Gb/s" or unit.lower() == "gbps":
        return value * 1e9 / 8
    return value * {"gb/s": 1e9, "mb/s": 1e6, "b/s": 1.0}[unit.lower()]


@dataclass(frozen=True)
class Collective:
    """One kind of collective in a training step, for one rank."""

    op: str  # all-reduce, reduce-scatter, all-gather
    purpose: str
    when: str  # one of WHEN: the phase of the step it runs in
    elements: int  # elements reduced or gathered each time it runs
    times: int  # how many times per optimizer step
    buckets: int  # calls per run, from the bucket size (stage 3 gathers: at least this many)
    element_bytes: int
    world_size: int

    @property
    def volume(self):
        """Paper volume per step, in elements (an all-reduce counts twice)."""
        return (2 if self.op == "all-reduce" else 1) * self.elements * self.times

    @property
    def wire_bytes(self):
        """Bytes this rank sends per step with ring collectives."""
        n = self.world_size
        return round(self.volume * (n - 1) / n * self.element_bytes)


@dataclass(frozen=True)
class Traffic:
    params: int
    stage: int
    world_size: int
    grad_accum: int
    collectives: tuple
    host_to_device_bytes: int  # PCIe, per rank per step, under offload: DeepSpeed 0.19.8's (zerolab.engine.deepspeed_traffic)
    device_to_host_bytes: int
    nvme_bytes: int  # read + written on NVMe per rank per step

    @property
    def volume(self):
        return sum(c.volume for c in self.collectives)

    @property
    def volume_in_params(self):
        """Volume per step as a multiple of Psi: 2 for DDP and ZeRO-1, GAS+1 for ZeRO-2, 3*GAS for ZeRO-3."""
        return self.volume / self.params

    @property
    def wire_bytes(self):
        return sum(c.wire_bytes for c in self.collectives)

    @property
    def calls(self):
        return sum(c.buckets * c.times for c in self.collectives)

    def as_dict(self):
        return {
            "params": self.params, "stage": self.stage, "world_size": self.world_size,
            "grad_accum": self.grad_accum, "volume_elements": self.volume,
            "volume_in_params": self.volume_in_params, "wire_bytes": self.wire_bytes, "calls": self.calls,
            "host_to_device_bytes": self.host_to_device_bytes,
            "device_to_host_bytes": self.device_to_host_bytes, "nvme_bytes": self.nvme_bytes,
            "collectives": [dict(op=c.op, purpose=c.purpose, when=c.when, elements=c.elements, times=c.times,
                                 buckets=c.buckets, wire_bytes=c.wire_bytes) for c in self.collectives],
        }


def traffic(params, stage, world_size, grad_accum=1, precision="fp16", reduce_bucket_size=DEFAULT_BUCKET,
            allgather_bucket_size=DEFAULT_BUCKET, prefetch_bucket_size=DEFAULT_PREFETCH_BUCKET,
            offload_optimizer="none", offload_param="none", bucket_allreduce=False, master="fp32"):
    """Traffic of one optimizer step (grad_accum micro-steps) for one rank. ``master`` "bf16": DeepSpeed's bf16 master
    weights, whose offloaded gradient crosses PCIe in bf16 (zerolab.engine.deepspeed_traffic).

    bucket_allreduce=True models what DeepSpeed 0.19.8 does by default in ZeRO-1/2
    (zero_optimization.use_multi_rank_bucket_allreduce = true, stage_1_and_2.py average_tensor): each gradient
    bucket is all-reduced and every rank keeps only its partition of the result, so the gradients cost twice
    the paper's reduce-scatter. The default (False) is the paper's accounting.
    """
    for name, value in (("params", params), ("world_size", world_size), ("grad_accum", grad_accum),
                        ("reduce_bucket_size", reduce_bucket_size),
                        ("allgather_bucket_size", allgather_bucket_size),
                        ("prefetch_bucket_size", prefetch_bucket_size)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1:
            raise ValueError(f"{name} must be a number >= 1, got {value!r}")
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    element = 4 if precision == "fp32" else 2
    psi, gas, n = int(params), int(grad_accum), int(world_size)

    def coll(op, purpose, when, times, bucket):
        return Collective(op, purpose, when, psi, times, math.ceil(psi / bucket), element, n)

    # ZeRO-1/2 gather the updated parameters with one all_gather_into_tensor per parameter group whenever torch has
    # it (runtime/utils.py all_gather_dp_groups); allgather_bucket_size only shapes the legacy all_gather fallback.
    allgather_bucket_size = psi

    if stage == 0:
        # DeepSpeed's stage 0 averages the gradients in engine.allreduce_gradients, after backward returns.
        collectives = (coll("all-reduce", "average gradients", "after backward", 1, reduce_bucket_size),)
    elif stage in (1, 2) and bucket_allreduce:
        times, when = (1, "last backward") if stage == 1 else (gas, "backward")
        collectives = (coll("all-reduce", "gradients, each rank keeps its partition", when, times, reduce_bucket_size),
                       coll("all-gather", "updated parameters", "after step", 1, allgather_bucket_size))
    elif stage == 1:
        collectives = (coll("reduce-scatter", "gradients to their owners", "last backward", 1, reduce_bucket_size),
                       coll("all-gather", "updated parameters", "after step", 1, allgather_bucket_size))
    elif stage == 2:
        collectives = (coll("reduce-scatter", "gradients to their owners", "backward", gas, reduce_bucket_size),
                       coll("all-gather", "updated parameters", "after step", 1, allgather_bucket_size))
    else:
        collectives = (coll("all-gather", "parameters for forward", "forward", gas, prefetch_bucket_size),
                       coll("all-gather", "parameters for backward", "backward", gas, prefetch_bucket_size),
                       coll("reduce-scatter", "gradients to their owners", "backward", gas, reduce_bucket_size))
    from zerolab.engine.deepspeed_traffic import offload_bytes

    partition = psi / n
    nvme = 0
    offloaded = "cpu" if offload_optimizer in ("cpu", "nvme") else "none"
    d2h, h2d = offload_bytes(psi, stage, n, gas, precision, offloaded,
                             "cpu" if offload_param in ("cpu", "nvme") and stage == 3 else "none", master=master)
    if offload_optimizer == "nvme" and stage >= 1:
        nvme += 2 * partition * 16  # fp32 master, grads and Adam moments swapped in and out (16 B/param)
    if offload_param == "nvme" and stage == 3:
        nvme += 2 * gas * partition * element
    return Traffic(psi, stage, n, gas, collectives, round(h2d), round(d2h), round(nvme))


ZERO_PLUS_PLUS = ("forward all-gather", "backward all-gather", "gradient reduce-scatter")


def zero_plus_plus_cross_node(model_bytes, qwz=False, hpz=False, qgz=False):
    """Bytes each rank moves across nodes per step under ZeRO-3, with any of ZeRO++'s three parts, in the ZeRO++
    blog's accounting (DeepSpeed, blogs/zeropp; arXiv:2306.10209): M = the 16-bit model's bytes; ZeRO-3 all-gathers
    M for forward, M again for backward and reduce-scatters M of gradients, 3M; qwZ sends the forward all-gather as
    int8 (0.5M), hpZ gathers for backward inside the node from its secondary copy (0 across nodes), qgZ sends the
    gradients as int4 through its all-to-all (0.25M). All three: 0.75M."""
    return {"forward all-gather": model_bytes * (0.5 if qwz else 1),
            "backward all-gather": 0 if hpz else model_bytes,
            "gradient reduce-scatter": model_bytes * (0.25 if qgz else 1)}


def bucket_buffer_bytes(reduce_bucket_size=DEFAULT_BUCKET, precision="fp16", overlap_comm=False,
                        contiguous_gradients=True):
    """GPU bytes ZeRO-1/2 keeps for gradient buckets (DeepSpeed 0.19.8, stage_1_and_2.py setup_buckets).

    With contiguous_gradients, one buffer of reduce_bucket_size elements in the gradient dtype; with overlap_comm,
    a second one ("double buffers to avoid data access conflict"), so one bucket is reduced while the next fills.
    The "4.5x reduce_bucket_size" figure still quoted in tutorials was removed from DeepSpeed in 2021.
    """
    if not contiguous_gradients:
        return 0
    element = 4 if precision == "fp32" else 2
    return (2 if overlap_comm else 1) * int(reduce_bucket_size) * element


def transfer_time(nbytes, link):
    """Seconds to move nbytes over a link (preset name, rate string or bytes/s)."""
    return nbytes / bandwidth(link)


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    comm_s: float  # all collectives, if nothing overlapped
    host_s: float  # PCIe traffic of offload, if nothing overlapped
    exposed_s: float  # communication the GPU waits for
    overlap_comm: bool

    @property
    def total_s(self):
        return self.compute_s + self.exposed_s

    @property
    def hidden_s(self):
        return self.comm_s + self.host_s - self.exposed_s


def step_time(t, compute_s, link="nvlink3", host_link="pcie4", overlap_comm=False):
    """Time of one optimizer step given the compute time (forward + backward of all micro-steps).

    Without overlap_comm every collective and host copy waits for compute and compute waits for it.
    With overlap_comm, what runs during the backward pass (gradient reduction, the gradient copy to the
    host) hides behind backward compute, except the last bucket, which can only start when backward
    ends; ZeRO-3's prefetched forward gathers hide behind forward compute the same way. The all-gather
    of updated parameters after the optimizer step (ZeRO-1/2) and the parameter upload of offload have
    nothing to hide behind. CPU Adam's own time is not modelled.
    """
    if compute_s < 0:
        raise ValueError(f"compute_s must be >= 0, got {compute_s!r}")
    rate = bandwidth(link)
    seconds = {c: c.wire_bytes / rate for c in t.collectives}
    d2h_s = transfer_time(t.device_to_host_bytes, host_link)
    h2d_s = transfer_time(t.host_to_device_bytes, host_link)
    comm_s = sum(seconds.values())
    host_s = d2h_s + h2d_s
    if not overlap_comm:
        return StepTime(compute_s, comm_s, host_s, comm_s + host_s, False)
    backward_s = compute_s * BACKWARD_SHARE
    forward_s = compute_s - backward_s
    hideable = ("backward", "last backward")
    if not any(c.when == "backward" for c in t.collectives):
        backward_s /= t.grad_accum  # only the boundary micro-step's backward has work to hide behind
    during_backward = d2h_s + sum(s for c, s in seconds.items() if c.when in hideable)
    during_forward = sum(s for c, s in seconds.items() if c.when == "forward")
    not_hidden = h2d_s + sum(s for c, s in seconds.items() if c.when in ("after backward", "after step"))
    tail = max((s / (c.buckets * c.times) for c, s in seconds.items() if c.when in hideable), default=0.0)
    exposed = max(0.0, during_forward - forward_s) + max(tail, during_backward - backward_s) + not_hidden
    exposed = min(exposed, comm_s + host_s)
    return StepTime(compute_s, comm_s, host_s, exposed, True)
