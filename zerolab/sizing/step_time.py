"""Time of one optimizer step (one micro-step, as `zerolab fit` configures it) on real GPUs, from stated assumptions.

  compute     6 x params x tokens FLOPs (forward 2, backward 4: Kaplan et al. 2020), 8 x with full recomputation (one
              more forward), at ``mfu`` (model FLOPs utilisation, default MFU) of the GPU's dense 16-bit peak (half of
              it in fp32, as TF32); attention's s^2 FLOPs are left out, so the MFU absorbs them
  collectives DeepSpeed 0.19.8's real volumes (zerolab.engine.comm.traffic with bucket_allreduce: ZeRO-1/2 all-reduce each
              gradient bucket and all-gather the parameters, 3 x params per step, as much as ZeRO-3; checked call for
              call in tests/test_traffic_measured.py), ring collectives over the slowest link they cross: NVLink
              (PCIe without it) inside a node, ``inter_node`` bytes/s per GPU once there are several nodes
  PCIe        DeepSpeed's offload copies (zerolab.engine.deepspeed_traffic) at the GPU's PCIe rate per direction
  CPU Adam    the node's ranks step their partitions at once on the node's cores: params per node / the node's
              CPU Adam throughput (measured by `zerolab fit --measure-host`, else CPU_ADAM_PARAMS_PER_S)
  NVMe        bytes swapped per node / NVME_BYTES_PER_S
  Muon        the busiest rank's Newton-Schulz FLOPs (zerolab.engine.muon.newton_schulz_rank_flops) at ``mfu`` of
              the same peak, inside step(): nothing runs beside it
What overlaps (zerolab.engine.comm.step_time, with overlap_comm as `zerolab fit` configures it): gradient reductions and
the gradient copies to the host run during backward and hide behind it, except the last bucket; ZeRO-3's forward
gathers hide behind forward compute through prefetching and its backward gathers behind backward compute. The
ZeRO-1/2 parameter all-gather after the step, the parameter copy back to the GPU after CPU Adam, CPU Adam itself
and NVMe swaps wait: nothing runs beside them. Stage 0 all-reduces after backward (DeepSpeed's engine).
"""
from dataclasses import dataclass

from zerolab.engine import comm

MFU = 0.4
CPU_ADAM_PARAMS_PER_S = 2e9  # per node: a stated guess, not a measurement; `zerolab fit --measure-host` replaces it
NVME_BYTES_PER_S = 6e9  # per node, read and write together: one PCIe 4 NVMe drive, a stated guess
INTER_NODE_BYTES_PER_S = comm.BANDWIDTHS["ib-ndr"]  # per GPU: one 400 Gb/s NDR port per GPU, as in a DGX H100


@dataclass(frozen=True)
class StepTime:
    tokens: int  # per GPU per step
    compute_s: float
    collectives_s: float  # every collective, as if nothing overlapped
    pcie_s: float  # offload copies, as if nothing overlapped
    exposed_s: float  # the part of collectives and PCIe copies the GPU waits for
    cpu_adam_s: float
    nvme_s: float
    link: float  # bytes/s the collectives ran at
    optimizer_s: float = 0.0  # Muon's Newton-Schulz on the GPU

    @property
    def total_s(self):
        return self.compute_s + self.exposed_s + self.cpu_adam_s + self.nvme_s + self.optimizer_s

    @property
    def tokens_per_s(self):
        """Per GPU."""
        return self.tokens / self.total_s

    def as_dict(self):
        return {"tokens_per_gpu": self.tokens, "compute_s": self.compute_s, "collectives_s": self.collectives_s,
                "pcie_s": self.pcie_s, "exposed_comm_s": self.exposed_s, "cpu_adam_s": self.cpu_adam_s,
                "nvme_s": self.nvme_s, "optimizer_s": self.optimizer_s, "total_s": self.total_s, "tokens_per_s_per_gpu": self.tokens_per_s,
                "collective_link_bytes_per_s": self.link}


def compute_flops(params, tokens, recompute="none"):
    """Model FLOPs of one forward and backward over ``tokens`` tokens: 6 per parameter and token, 8 recomputing all."""
    return (8 if recompute == "full" else 6) * params * tokens


def collective_link(gpu, nodes, inter_node=INTER_NODE_BYTES_PER_S):
    """Bytes/s a ring collective over every GPU runs at: its slowest hop."""
    return gpu.intra_node if nodes == 1 else min(gpu.intra_node, inter_node)


def step_time(params, stage, gpus_per_node, nodes, micro_batch, seq_len, gpu, recompute="none",
              offload_optimizer="none", offload_param="none", precision="bf16", mfu=MFU,
              inter_node=INTER_NODE_BYTES_PER_S, cpu_adam_params_per_s=CPU_ADAM_PARAMS_PER_S,
              nvme_bytes_per_s=NVME_BYTES_PER_S, overlap_comm=True, optimizer_flops=0, master="fp32"):
    """StepTime of one optimizer step with gradient accumulation 1, per GPU. ``gpu`` is a zerolab.sizing.gpus.GPU;
    ``optimizer_flops``: what the optimizer computes on the busiest GPU each step (Muon's Newton-Schulz); ``master``
    "bf16": bf16 master weights, whose offloaded gradients cross PCIe in bf16 (CPU Adam's speed is taken as
    fp32's: it has not been measured with bf16 masters)."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    world = gpus_per_node * nodes
    tokens = micro_batch * seq_len
    peak = gpu.bf16_flops / (2 if precision == "fp32" else 1)
    compute_s = compute_flops(params, tokens, recompute) / (peak * mfu)
    traffic = comm.traffic(params, stage, world, 1, precision, offload_optimizer=offload_optimizer,
                           offload_param=offload_param, bucket_allreduce=True, master=master)
    link = collective_link(gpu, nodes, inter_node)
    overlapped = comm.step_time(traffic, compute_s, link=link, host_link=gpu.pcie,
                                overlap_comm=overlap_comm and stage > 0)
    cpu_adam_s = 0.0
    if offload_optimizer != "none" and stage > 0:
        cpu_adam_s = params / world * gpus_per_node / cpu_adam_params_per_s
    nvme_s = traffic.nvme_bytes * gpus_per_node / nvme_bytes_per_s
    return StepTime(tokens, compute_s, overlapped.comm_s, overlapped.host_s, overlapped.exposed_s, cpu_adam_s,
                    nvme_s, link, optimizer_flops / (peak * mfu))
