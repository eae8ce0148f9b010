"""Will a model fit? Every ZeRO stage x offload x recomputation, with the largest micro-batch that fits each.

A setup fits when its whole per-GPU budget (zerolab.budget) at micro-batch >= 1 stays within the GPU's memory and,
when a host limit is given, DeepSpeed's host figure per node (zerolab.memory) within it. The ones that fit are
ranked by traffic per optimizer step (collectives on the wire, the ZeRO paper's volumes with ring collectives, one
micro-step per step), then by offload traffic over PCIe, then by recomputation (none, selective, full: the
least compute first), then by the larger micro-batch. Each rejected one names the line that overflows.
"""
from dataclasses import dataclass

from zerolab import budget as budgets
from zerolab import comm, memory
from zerolab.activations import RECOMPUTE, activation_memory


@dataclass(frozen=True)
class Option:
    stage: int
    offload_optimizer: str
    offload_param: str
    recompute: str
    micro_batch: int  # the largest that fits; 0 when rejected
    budget: budgets.Budget  # at micro_batch (at 1 when rejected)
    traffic: comm.Traffic
    reason: str = ""  # why it does not fit; empty when it does

    @property
    def fits(self):
        return not self.reason

    @property
    def pcie_bytes(self):
        return self.traffic.host_to_device_bytes + self.traffic.device_to_host_bytes

    def as_dict(self):
        return {"stage": self.stage, "offload_optimizer": self.offload_optimizer, "offload_param": self.offload_param,
                "recompute": self.recompute, "fits": self.fits, "micro_batch": self.micro_batch,
                "gpu_bytes": self.budget.gpu_bytes, "gpu_lines": dict(self.budget.gpu),
                "host_bytes_per_node": self.budget.host_bytes, "nvme_bytes_per_node": self.budget.nvme_bytes,
                "wire_bytes_per_step": self.traffic.wire_bytes, "pcie_bytes_per_step": self.pcie_bytes,
                "nvme_traffic_bytes_per_step": self.traffic.nvme_bytes, "reason": self.reason}


@dataclass(frozen=True)
class Fit:
    model: object  # zerolab.models.Decoder
    seq_len: int
    gpu_memory: int
    host_memory: int | None
    gpus_per_node: int
    nodes: int
    precision: str
    attention: str
    rows: tuple  # the Options that fit, ranked
    rejected: tuple

    @property
    def world_size(self):
        return self.gpus_per_node * self.nodes


def fit(model, seq_len, gpu_memory, gpus_per_node=1, nodes=1, host_memory=None, precision="bf16", attention="flash"):
    """Every stage / offload / recomputation combination for ``model``, the ones that fit ranked first."""
    if isinstance(gpu_memory, bool) or not isinstance(gpu_memory, int) or gpu_memory < 1:
        raise ValueError(f"gpu_memory must be a whole number of bytes >= 1, got {gpu_memory!r}")
    rows, rejected = [], []
    one_sequence = {recompute: activation_memory(model, seq_len, 1, precision, attention, recompute)
                    for recompute in RECOMPUTE}
    for stage, offload_optimizer, offload_param in memory.combinations():
        traffic = comm.traffic(model.params(), stage, gpus_per_node * nodes, precision=precision,
                               offload_optimizer=offload_optimizer, offload_param=offload_param)
        states = budgets.model_states(model, stage, gpus_per_node, nodes, offload_optimizer, offload_param, precision)
        buckets = budgets.bucket_bytes(stage, precision)
        for recompute in RECOMPUTE:
            micro = budgets.largest_micro_batch(gpu_memory, states, one_sequence[recompute], buckets)
            acts = one_sequence[recompute]
            if micro > 1:
                acts = activation_memory(model, seq_len, micro, precision, attention, recompute)
            plan = budgets.combine(states, acts, buckets)
            reason = ""
            if micro == 0:
                line = plan.overflow(gpu_memory)
                reason = (f"GPU: {line} overflows; one sequence needs {_gb(plan.gpu_bytes)} per GPU "
                          f"({_lines(plan)}), the GPU has {_gb(gpu_memory)}")
            elif host_memory is not None and plan.host_bytes > host_memory:
                reason = f"host: needs {_gb(plan.host_bytes)} per node, the node has {_gb(host_memory)}"
            option = Option(stage, offload_optimizer, offload_param, recompute, 0 if reason else micro, plan,
                            traffic, reason)
            (rejected if reason else rows).append(option)
    rows.sort(key=lambda o: (o.traffic.wire_bytes, o.pcie_bytes, o.traffic.nvme_bytes, RECOMPUTE.index(o.recompute),
                             -o.micro_batch, o.stage))
    return Fit(model, seq_len, gpu_memory, host_memory, gpus_per_node, nodes, precision, attention, tuple(rows),
               tuple(rejected))


def ds_config(option, world_size, precision="bf16"):
    """A ds_config for one fitting Option: its stage, offload and largest micro-batch, one micro-step per step."""
    if not option.fits:
        raise ValueError("this combination does not fit; only a fitting row has a config")
    zero = {"stage": option.stage}
    if option.stage > 0:
        zero.update(overlap_comm=True, contiguous_gradients=True, reduce_bucket_size=comm.DEFAULT_BUCKET)
    for key, device in (("offload_optimizer", option.offload_optimizer), ("offload_param", option.offload_param)):
        if device != "none":
            zero[key] = {"device": device, "pin_memory": True}
            if device == "nvme":
                zero[key]["nvme_path"] = "/local_nvme"
    config = {"train_batch_size": option.micro_batch * world_size,
              "train_micro_batch_size_per_gpu": option.micro_batch,
              "gradient_accumulation_steps": 1,
              "zero_optimization": zero}
    if precision in ("fp16", "bf16"):
        config[precision] = {"enabled": True}
    return config


def _gb(nbytes):
    return f"{nbytes / 1e9:.1f} GB"


def _lines(plan):
    return ", ".join(f"{name} {_gb(nbytes)}" for name, nbytes in plan.gpu.items())
