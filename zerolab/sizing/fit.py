"""Will a model fit, and which way trains fastest? Every ZeRO stage x offload x recomputation, ranked by throughput.

A setup fits when its whole per-GPU budget (zerolab.sizing.budget: the larger of the backward and the step peak) at
micro-batch >= 1 stays within the GPU's memory and, when a host limit is given, its runtime host memory per node
(zerolab.engine.host_memory) within it. Each fitting setup runs the largest micro-batch that leaves ``headroom`` of the GPU's
memory free (allocator behaviour the budget only allows for can take it), one micro-step per optimizer step; when
even one sequence needs the headroom, the row runs the largest micro-batch that fits and is marked tight.
zerolab.sizing.step_time gives each row's time per step, and the rows are ranked by tokens per second (time per step over
the tokens it trains), the less recomputation first on a tie. Each rejected setup names the line that overflows.
"""
import math
from dataclasses import dataclass

from zerolab.sizing import budget as budgets
from zerolab.engine import comm, memory, muon
from zerolab.sizing import gpus, host_speed, step_time
from zerolab.engine.activations import RECOMPUTE, activation_memory
from zerolab.engine.activations_hf import RECOMPUTE as HF_RECOMPUTE

HEADROOM = 0.05


@dataclass(frozen=True)
class Option:
    stage: int
    offload_optimizer: str
    offload_param: str
    recompute: str
    micro_batch: int  # the largest that leaves the headroom free (else the largest that fits); 0 when rejected
    budget: budgets.Budget  # at micro_batch (at 1 when rejected)
    traffic: comm.Traffic
    reason: str = ""  # why it does not fit; empty when it does
    time: step_time.StepTime | None = None  # at micro_batch; None when rejected
    tight: bool = False  # within the headroom of the GPU's memory even at micro_batch
    largest_micro_batch: int = 0  # the largest that fits at all
    master: str = "fp32"  # the master weights' (and Adam moments') dtype: "bf16" is DeepSpeed's bf16 optimizer states
    optimizer: str = "adamw"  # "muon": DeepSpeed's Muon for the matrices, Adam for the rest

    @property
    def fits(self):
        return not self.reason

    @property
    def pcie_bytes(self):
        return self.traffic.host_to_device_bytes + self.traffic.device_to_host_bytes

    def as_dict(self):
        return {"stage": self.stage, "offload_optimizer": self.offload_optimizer, "offload_param": self.offload_param,
                "master": self.master, "optimizer": self.optimizer, "recompute": self.recompute, "fits": self.fits,
                "micro_batch": self.micro_batch,
                "gpu_bytes": self.budget.gpu_bytes, "gpu_peak": self.budget.peak,
                "gpu_lines": dict(self.budget.gpu), "gpu_backward_lines": dict(self.budget.backward),
                "gpu_step_lines": dict(self.budget.step), "model_state_terms": {
                    "backward": dict(self.budget.states.backward), "step": dict(self.budget.states.step)},
                "host_bytes_per_node": self.budget.host_bytes, "host_lines_per_node": dict(self.budget.host),
                "deepspeed_loading_estimate_bytes_per_node": self.budget.host_loading_bytes,
                "nvme_bytes_per_node": self.budget.nvme_bytes,
                "wire_bytes_per_step": self.traffic.wire_bytes, "pcie_bytes_per_step": self.pcie_bytes,
                "nvme_traffic_bytes_per_step": self.traffic.nvme_bytes, "tight": self.tight,
                "largest_micro_batch": self.largest_micro_batch,
                "time": self.time.as_dict() if self.time else None, "reason": self.reason}


@dataclass(frozen=True)
class Fit:
    model: object  # zerolab.engine.models.Decoder
    seq_len: int
    gpu_memory: int
    host_memory: int | None
    gpus_per_node: int
    nodes: int
    precision: str
    attention: str
    rows: tuple  # the Options that fit, ranked
    rejected: tuple
    gpu: gpus.GPU = None  # whose speeds the times assume
    assumptions: dict = None  # mfu, inter_node, cpu_adam_params_per_s (and where it came from), headroom
    implementation: str = "megatron"  # whose activations: zerolab.engine.activations' implementation
    masters: tuple = ("fp32",)  # the master-weight dtypes the rows were tried with
    optimizers: tuple = ("adamw",)  # the optimizers the rows were tried with

    @property
    def world_size(self):
        return self.gpus_per_node * self.nodes


def fit(model, seq_len, gpu_memory=None, gpus_per_node=1, nodes=1, host_memory=None, precision="bf16",
        attention="flash", gpu=None, mfu=step_time.MFU, inter_node=step_time.INTER_NODE_BYTES_PER_S,
        cpu_adam_params_per_s=None, headroom=HEADROOM, implementation="megatron", masters=("fp32",),
        optimizers=("adamw",)):
    """Every stage / offload / recomputation combination for ``model``, the fitting ones ranked fastest first.

    ``implementation`` says whose code keeps the activations (zerolab.engine.activations): "megatron" (Korthikanti et al.,
    with selective recomputation) or "hf" (Hugging Face's Llama code, which recomputes whole layers or nothing);
    ``implementation_for`` picks the one that runs a model.

    ``masters`` ("fp32", "bf16" or both): the master weights' dtype, each a set of rows. "bf16" is DeepSpeed's
    bf16.bf16_master_weights_and_grads with bf16_optimizer_states (zerolab.engine.zero_terms), tried at stages 1-3
    without offload and at stages 1-2 with the optimizer in CPU memory (the setups modelled); on a tie in speed the
    fp32 row ranks first, as it costs no accuracy.

    ``optimizers`` ("adamw", "muon" or both): "muon" is DeepSpeed's Muon (zerolab.engine.muon: one momentum in the
    training dtype for the matrices it steps, Adam for the rest), tried at stages 1-2 without offload and with fp32
    master weights; its rows add the busiest GPU's Newton-Schulz FLOPs to the step. At stage 3 Muon changes the
    collectives (reduce_scatter off, updates gathered round-robin), which the times do not model yet.

    ``gpu`` is a zerolab.sizing.gpus preset name or GPU (its memory is used when gpu_memory is None; its speeds for the
    times, zerolab.sizing.gpus.DEFAULT_FOR_TIME's without it). ``cpu_adam_params_per_s`` defaults to what
    `zerolab fit --measure-host` stored, else zerolab.sizing.step_time.CPU_ADAM_PARAMS_PER_S.
    """
    device = gpus.preset(gpu) if isinstance(gpu, str) else gpu
    if gpu_memory is None and device is not None:
        gpu_memory = device.memory
    if isinstance(gpu_memory, bool) or not isinstance(gpu_memory, int) or gpu_memory < 1:
        raise ValueError(f"gpu_memory must be a whole number of bytes >= 1, got {gpu_memory!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1), got {headroom!r}")
    if not masters or any(master not in memory.MASTER_BYTES for master in masters):
        raise ValueError(f"masters must be some of {', '.join(memory.MASTER_BYTES)}, got {masters!r}")
    if "bf16" in masters and precision != "bf16":
        raise ValueError("bf16 master weights need bf16 training (precision bf16)")
    if not optimizers or any(optimizer not in memory.OPTIMIZERS for optimizer in optimizers):
        raise ValueError(f"optimizers must be some of {', '.join(memory.OPTIMIZERS)}, got {optimizers!r}")
    if "muon" in optimizers and precision not in ("bf16", "fp32"):
        raise ValueError("Muon is modelled in bf16 or fp32 training (precision bf16 or fp32)")
    if "muon" in optimizers and "fp32" not in masters:
        raise ValueError("Muon is modelled with fp32 master weights (DeepSpeed's Muon was measured so): use --master "
                         "fp32 or both with --optimizer muon")
    speeds = device or gpus.preset(gpus.DEFAULT_FOR_TIME)
    adam_source = "given"
    if cpu_adam_params_per_s is None:
        measured = host_speed.load()
        cpu_adam_params_per_s = measured["params_per_s"] if measured else step_time.CPU_ADAM_PARAMS_PER_S
        adam_source = f"measured {measured['measured_at']} on {measured['machine']}" if measured else "default"
    assumptions = {"mfu": mfu, "inter_node_bytes_per_s": inter_node, "cpu_adam_params_per_s": cpu_adam_params_per_s,
                   "cpu_adam_source": adam_source, "nvme_bytes_per_s": step_time.NVME_BYTES_PER_S,
                   "headroom": headroom, "speeds_of": speeds.name + ("" if device else " (no --gpu given)")}
    rows, rejected = [], []
    recomputes = RECOMPUTE if implementation == "megatron" else HF_RECOMPUTE

    def activations(micro, recompute):
        return activation_memory(model, seq_len, micro, precision, attention, recompute, implementation=implementation)
    one_sequence = {recompute: activations(1, recompute) for recompute in recomputes}
    if "muon" in optimizers:
        assumptions.update(_muon_assumptions(model, gpus_per_node * nodes))
    for master, optimizer, stage, offload_optimizer, offload_param in _setups(masters, optimizers):
        traffic = comm.traffic(model.params(), stage, gpus_per_node * nodes, precision=precision,
                               offload_optimizer=offload_optimizer, offload_param=offload_param,
                               bucket_allreduce=True, master=master)
        states = budgets.model_states(model, stage, gpus_per_node, nodes, offload_optimizer, offload_param, precision,
                                      master=master, optimizer=optimizer)
        optimizer_flops = assumptions["muon_newton_schulz_flops_per_gpu"] if optimizer == "muon" else 0
        buckets = budgets.bucket_bytes(stage, precision)
        for recompute in recomputes:
            largest = budgets.largest_micro_batch(gpu_memory, states, one_sequence[recompute], buckets)
            micro = budgets.largest_micro_batch(int((1 - headroom) * gpu_memory), states, one_sequence[recompute],
                                                buckets) or largest
            acts = one_sequence[recompute]
            if micro > 1:
                acts = activations(micro, recompute)
            plan = budgets.combine(states, acts, buckets)
            reason = ""
            if micro == 0:
                line = plan.overflow(gpu_memory)
                reason = (f"GPU: {line} overflows at the {plan.peak} peak; one sequence needs "
                          f"{_gb(plan.gpu_bytes)} per GPU ({_lines(plan)}), the GPU has {_gb(gpu_memory)}")
            elif host_memory is not None and plan.host_bytes > host_memory:
                reason = (f"host: needs {_gb(plan.host_bytes)} per node at run time, the node has "
                          f"{_gb(host_memory)}")
            if reason:
                rejected.append(Option(stage, offload_optimizer, offload_param, recompute, 0, plan, traffic, reason,
                                       master=master, optimizer=optimizer))
                continue
            timing = step_time.step_time(model.params(), stage, gpus_per_node, nodes, micro, seq_len, speeds,
                                         recompute, offload_optimizer, offload_param, precision, mfu, inter_node,
                                         cpu_adam_params_per_s, optimizer_flops=optimizer_flops, master=master)
            tight = plan.gpu_bytes > (1 - headroom) * gpu_memory
            rows.append(Option(stage, offload_optimizer, offload_param, recompute, micro, plan, traffic, "", timing,
                               tight, largest, master, optimizer))
    rows.sort(key=lambda o: (-o.time.tokens_per_s, RECOMPUTE.index(o.recompute), o.master != "fp32",
                             o.optimizer != "adamw", o.budget.gpu_bytes, o.stage))
    return Fit(model, seq_len, gpu_memory, host_memory, gpus_per_node, nodes, precision, attention, tuple(rows),
               tuple(rejected), speeds, assumptions, implementation, tuple(masters), tuple(optimizers))


def _setups(masters, optimizers=("adamw",)):
    """(master, optimizer, stage, offload_optimizer, offload_param) to try: every combination with fp32 master
    weights and Adam; bf16 master weights without offload at stages 1-3 and with CPU optimizer offload at stages 1-2
    (what zerolab.engine.zero_terms models); Muon with fp32 master weights without offload at stages 1-2 (what the
    step times model)."""
    for master in masters:
        for optimizer in optimizers:
            if optimizer == "muon" and master != "fp32":
                continue
            for stage, offload_optimizer, offload_param in memory.combinations():
                plain = (offload_optimizer, offload_param) == ("none", "none")
                if optimizer == "muon":
                    if stage in (1, 2) and plain:
                        yield master, optimizer, stage, offload_optimizer, offload_param
                elif master == "fp32" or (stage > 0 and plain) or (
                        stage in (1, 2) and (offload_optimizer, offload_param) == ("cpu", "none")):
                    yield master, optimizer, stage, offload_optimizer, offload_param


def _muon_assumptions(model, world_size):
    """What Muon steps in ``model`` and the Newton-Schulz FLOPs of the busiest GPU per step (the same at stages 1-2,
    the only ones Muon rows are tried at)."""
    shapes, tagged = muon.shapes_and_tags(model.parameter_shapes())
    return {"muon_matrix_params": sum(math.prod(shape) for shape, use in zip(shapes, tagged) if use),
            "muon_newton_schulz_flops_per_gpu": muon.newton_schulz_rank_flops(shapes, tagged, world_size)}


def implementation_for(model):
    """Whose activations to count for ``model``: "hf" for the Llama family (SwiGLU, RMSNorm, no biases), which
    people train with Hugging Face's code; "megatron" for the GPT-3 shapes, which are Megatron's."""
    return "hf" if (model.mlp, model.norm, model.bias) == ("swiglu", "rmsnorm", False) else "megatron"


def ds_config(option, world_size, precision="bf16"):
    """A ds_config for one fitting Option: its stage, offload, master weights and largest micro-batch, one
    micro-step per step."""
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
    if option.master == "bf16":
        config["bf16"].update(bf16_master_weights_and_grads=True, bf16_optimizer_states=True)
        if option.offload_optimizer != "none":  # DeepSpeed steps offloaded bf16 masters only with the CPU Adam it
            config["optimizer"] = {"type": "AdamW", "params": {}}  # builds from this block itself
    if option.optimizer == "muon":  # DeepSpeed's own defaults for both halves' settings
        config["optimizer"] = {"type": "Muon", "params": {}}
    return config


def _gb(nbytes):
    return f"{nbytes / 1e9:.1f} GB"


def _lines(plan):
    return ", ".join(f"{name} {_gb(nbytes)}" for name, nbytes in plan.gpu.items())
