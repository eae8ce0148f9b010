"""Per-GPU and per-node model-state memory for ZeRO stages 0-3, with and without offload.

Two accountings, both kept because they disagree and the disagreement is worth teaching:

``paper``
    The ZeRO paper (Rajbhandari et al., arXiv:1910.02054, section 3.1 and 5): mixed-precision Adam keeps
    2 bytes of fp16 parameters, 2 bytes of fp16 gradients and K = 12 bytes of optimizer state per parameter
    (4 fp32 master weights + 4 momentum + 4 variance). ZeRO-1 partitions the K bytes over the Nd
    data-parallel GPUs, ZeRO-2 also the gradients, ZeRO-3 also the parameters. fp32 training keeps 4 + 4
    bytes of parameters and gradients and 8 of Adam moments (no separate master copy).
    The paper has no offload; zerolab moves the optimizer's bytes (and, from stage 2 on, the gradient
    partition it consumes, as ZeRO-Offload does) to host memory or NVMe.

``deepspeed``
    Byte for byte what DeepSpeed 0.19.8 returns from ``estimate_zero2_model_states_mem_needs``
    (deepspeed/runtime/zero/stage_1_and_2.py) and ``estimate_zero3_model_states_mem_needs``
    (deepspeed/runtime/zero/stage3.py), including the largest-layer term, ``zero_init`` and the
    ``additional_buffer_factor``. DeepSpeed counts 4 more bytes per parameter than the paper: the
    partitioned fp32 gradients (its comment: "18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit +
    8_optimizer_states_32bit"). Its host figure is the larger of what is offloaded and the load-time peak
    of every process building the model in fp32 (4 bytes x processes per node), times the buffer factor.

    Where DeepSpeed has no estimator, zerolab derives the figure from the same per-byte terms:
    - stage 1: the fp16 gradients are not partitioned (2 + 2 bytes stay whole), the other 16 are;
      the host figure is the stage-2 one (same optimizer code, stage_1_and_2.py);
    - stage 0: nothing is partitioned: 2 + 18 bytes on every GPU (what the stage-2 estimator gives for
      one GPU), host = the load-time peak;
    - stage 3 combinations the estimator skips (parameter offload without optimizer offload, NVMe):
      the same rule the estimator's branches follow - the host holds what is offloaded to it,
      ``zero_init`` decides whether the fp32 load peak counts, NVMe holds what is offloaded there;
    - fp32 training: every 2-byte term becomes 4 bytes (the largest layer too).

Units: bytes. ``gpu_bytes`` is per GPU, ``cpu_bytes`` and ``nvme_bytes`` are per node (DeepSpeed's
"per CPU" column is per node). Model states only: no activations, communication buckets or CUDA context.
"""
from dataclasses import dataclass, field

STAGES = (0, 1, 2, 3)
DEVICES = ("none", "cpu", "nvme")
PRECISIONS = ("fp16", "bf16", "fp32")
ACCOUNTINGS = ("paper", "deepspeed")
DEFAULT_BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor default
GPT2_VOCAB = 50257  # GPT-2 / GPT-3 BPE vocabulary, used for the default largest layer
# The fp32 state the optimizer keeps per parameter, what optimizer offload moves to the host: DeepSpeed's "16"
# (docs/code-docs/source/memory.rst: 4 B params + 4 B grads + 4 B momentum + 4 B variance, all fp32).
FP32_OPTIMIZER_STATE = {"fp32_grads": 4, "master_weights": 4, "optimizer_states": 8}
# DeepSpeed 0.18.3+'s bf16.bf16_master_weights_and_grads and bf16.bf16_optimizer_states: bytes per parameter of
# the master copy and of Adam's two moments, fp32 (the paper's) or bf16.
MASTER_BYTES = {"fp32": 4, "bf16": 2}
MOMENT_BYTES = {"fp32": 8, "bf16": 4}
OPTIMIZERS = ("adamw", "muon")  # muon: DeepSpeed's Muon (zerolab.engine.muon), Adam for the parameters it does not step


@dataclass(frozen=True)
class Estimate:
    """Model-state memory of one training setup. Bytes; see the module docstring for units."""

    params: int
    stage: int
    offload_optimizer: str
    offload_param: str
    precision: str
    accounting: str
    gpus_per_node: int
    nodes: int
    gpu_bytes: int
    cpu_bytes: int
    nvme_bytes: int
    breakdown: dict = field(default_factory=dict)
    master: str = "fp32"  # bf16: DeepSpeed's bf16_master_weights_and_grads
    moments: str = "fp32"  # bf16: DeepSpeed's bf16_optimizer_states
    optimizer: str = "adamw"
    muon_params: int = 0  # parameters Muon steps (the rest go to its Adam half)

    @property
    def world_size(self):
        return self.gpus_per_node * self.nodes

    def as_dict(self):
        return {
            "params": self.params,
            "stage": self.stage,
            "offload_optimizer": self.offload_optimizer,
            "offload_param": self.offload_param,
            "precision": self.precision,
            "accounting": self.accounting,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "gpu_bytes": self.gpu_bytes,
            "cpu_bytes": self.cpu_bytes,
            "nvme_bytes": self.nvme_bytes,
            "breakdown": {place: dict(parts) for place, parts in self.breakdown.items()},
            **({"master": self.master, "moments": self.moments} if self.master != "fp32" else {}),
            **({"optimizer": self.optimizer, "muon_params": self.muon_params} if self.optimizer != "adamw" else {}),
        }


def combinations(stage=None):
    """Every (stage, offload_optimizer, offload_param) that DeepSpeed 0.19.8 can train with.

    Optimizer offload needs stage >= 1; NVMe offload and parameter offload need stage 3 (ZeRO-Infinity):
    below stage 3 DeepSpeed turns an NVMe optimizer offload into CPU offload (stage_1_and_2.py sets
    cpu_offload for any device but none, so nvme_path is never used) and never passes offload_param
    to the stage 1/2 optimizer.
    """
    stages = STAGES if stage is None else (stage,)
    rows = []
    for s in stages:
        if s == 0:
            rows.append((0, "none", "none"))
        elif s in (1, 2):
            rows += [(s, "none", "none"), (s, "cpu", "none")]
        else:
            rows += [(3, opt, par) for opt in DEVICES for par in DEVICES]
    return rows


def default_largest_layer(params):
    """A guess at the largest layer when it is not given: a GPT-style token embedding.

    GPT-3-family models keep hidden / layers close to 128 (13B: 5120 / 40), and a decoder layer holds
    about 12 * hidden**2 parameters, so params ~ 12 * hidden**3 / 128. The embedding is vocab x hidden.
    """
    hidden = round((128 * params / 12) ** (1 / 3))
    return min(params, GPT2_VOCAB * hidden)


def estimate(params, stage, gpus_per_node=1, nodes=1, offload_optimizer="none", offload_param="none",
             precision="fp16", accounting="paper", largest_layer_params=None, zero_init=True,
             buffer_factor=DEFAULT_BUFFER_FACTOR, whole_bytes=True, master="fp32", moments="fp32", optimizer="adamw",
             muon_params=None):
    """Model-state memory for ``params`` parameters trained with ZeRO ``stage`` on nodes x gpus_per_node GPUs.
    The paper's accounting rounds each term to whole bytes; ``whole_bytes=False`` keeps the exact quotients (one
    parameter over 8 GPUs holds 2 bytes of ZeRO-3 state, not 1), as graders comparing a learner's formula need.
    ``master`` and ``moments`` ("fp32" or "bf16", paper accounting): the dtype of the master copy and of Adam's
    moments, DeepSpeed's bf16.bf16_master_weights_and_grads and bf16.bf16_optimizer_states.
    ``optimizer="muon"`` with ``muon_params`` (paper accounting, stages 1-3): DeepSpeed's Muon keeps one momentum in
    the training dtype for the ``muon_params`` parameters it steps, and Adam's two fp32 moments for the rest
    (zerolab.engine.muon; at stages 1-2 a matrix straddling two partitions adds its momentum on both ranks, which
    only the shapes tell: zerolab.engine.muon.rank_bytes)."""
    _check(params, stage, gpus_per_node, nodes, offload_optimizer, offload_param, precision, accounting,
           buffer_factor)
    _check_low_precision_state(stage, precision, accounting, master, moments)
    muon_params = _check_muon(optimizer, muon_params, params, stage, precision, accounting,
                              (offload_optimizer, offload_param), master)
    setup = dict(params=params, stage=stage, offload_optimizer=offload_optimizer, offload_param=offload_param,
                 precision=precision, accounting=accounting, gpus_per_node=gpus_per_node, nodes=nodes,
                 master=master, moments=moments, optimizer=optimizer, muon_params=muon_params)
    if accounting == "paper":
        gpu, cpu, nvme = _paper(params, stage, gpus_per_node * nodes, gpus_per_node, offload_optimizer,
                                offload_param, precision, round if whole_bytes else float,
                                MASTER_BYTES[master], _optimizer_state_bytes(params, precision, moments, muon_params))
    else:
        if largest_layer_params is None:
            largest_layer_params = default_largest_layer(params)
        gpu, cpu, nvme = _deepspeed(params, stage, gpus_per_node, nodes, offload_optimizer, offload_param,
                                    precision, largest_layer_params, zero_init, buffer_factor)
    return Estimate(gpu_bytes=sum(gpu.values()), cpu_bytes=sum(cpu.values()), nvme_bytes=sum(nvme.values()),
                    breakdown={"gpu": gpu, "cpu": cpu, "nvme": nvme}, **setup)


def estimate_all(params, gpus_per_node=1, nodes=1, stage=None, **options):
    """One Estimate per valid (stage, offload) combination, in the order of :func:`combinations` (stages 1-3 only
    with bf16 master weights: stage 0 has no ZeRO optimizer to keep them; with Muon, what is modelled: stages 1-3
    without optimizer offload)."""
    low_precision = options.get("master", "fp32") != "fp32"
    muon = options.get("optimizer", "adamw") == "muon"
    return [estimate(params, s, gpus_per_node, nodes, offload_optimizer=opt, offload_param=par, **options)
            for s, opt, par in combinations(stage)
            if not ((low_precision or muon) and s == 0) and not (muon and (opt, par) != ("none", "none"))]


def _check(params, stage, gpus_per_node, nodes, offload_optimizer, offload_param, precision, accounting,
           buffer_factor):
    def positive_int(name, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")

    positive_int("params", params)
    positive_int("gpus_per_node", gpus_per_node)
    positive_int("nodes", nodes)
    if stage not in STAGES:
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    for name, value, allowed in (("offload_optimizer", offload_optimizer, DEVICES),
                                 ("offload_param", offload_param, DEVICES),
                                 ("precision", precision, PRECISIONS),
                                 ("accounting", accounting, ACCOUNTINGS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    if (stage, offload_optimizer, offload_param) not in combinations(stage):
        if offload_param != "none":
            raise ValueError("offload_param needs stage 3: below it DeepSpeed ignores the setting")
        if stage == 0:
            raise ValueError("offload_optimizer needs stage 1, 2 or 3: stage 0 has no ZeRO optimizer")
        raise ValueError("NVMe offload needs stage 3 (ZeRO-Infinity): below it DeepSpeed keeps the optimizer "
                         "state in host RAM, as with device 'cpu'")
    if not buffer_factor > 0:
        raise ValueError(f"buffer_factor must be > 0, got {buffer_factor!r}")


def _check_muon(optimizer, muon_params, params, stage, precision, accounting, offload, master):
    """The parameters Muon steps (0 for adamw), or ValueError naming what the Muon model does not cover."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if optimizer == "adamw":
        if muon_params:
            raise ValueError("muon_params counts the parameters Muon steps: give it with optimizer=\"muon\"")
        return 0
    if isinstance(muon_params, bool) or not isinstance(muon_params, int) or not 0 <= muon_params <= params:
        raise ValueError(f"muon_params must be a whole number from 0 to params ({params}), the parameters of the 2-D "
                         f"hidden matrices Muon steps; got {muon_params!r}")
    if accounting != "paper":
        raise ValueError("Muon is counted by the paper accounting only: DeepSpeed's estimators know only Adam")
    if stage == 0 or precision not in ("bf16", "fp32") or "cpu" in offload or "nvme" in offload or master != "fp32":
        raise ValueError("Muon is modelled at ZeRO stages 1-3, in bf16 or fp32 training, without offload and with "
                         "fp32 master weights, the setups measured on CPU ranks; the others are not modelled yet")
    return muon_params


def _optimizer_state_bytes(params, precision, moments, muon_params):
    """All the parameters' optimizer-state bytes (master weights apart): Adam's two moments, or Muon's momentum in
    the training dtype for the ``muon_params`` it steps and Adam's for the rest."""
    adam = MOMENT_BYTES[moments]
    if not muon_params:
        return adam * params
    momentum = 4 if precision == "fp32" else 2
    return momentum * muon_params + adam * (params - muon_params)


def _check_low_precision_state(stage, precision, accounting, master, moments):
    """The rules DeepSpeed 0.19.8's config class enforces for bf16 master weights and moments."""
    for name, value in (("master", master), ("moments", moments)):
        if value not in MASTER_BYTES:
            raise ValueError(f"{name} must be one of {', '.join(MASTER_BYTES)}, got {value!r}")
    if master == moments == "fp32":
        return
    if accounting != "paper":
        raise ValueError("bf16 master weights or moments are counted by the paper accounting only: DeepSpeed's "
                         "estimators (the deepspeed accounting) have no such option")
    if moments == "bf16" and master != "bf16":
        raise ValueError("bf16 moments need bf16 master weights (DeepSpeed: bf16_optimizer_states requires "
                         "bf16_master_weights_and_grads)")
    if precision != "bf16" or stage == 0:
        raise ValueError("bf16 master weights need bf16 training (the bf16 block's bf16_master_weights_and_grads) "
                         "and ZeRO stage 1, 2 or 3")


def _paper(params, stage, world, gpus_per_node, offload_optimizer, offload_param, precision, rounded=round,
           master_bytes=4, optimizer_state_bytes=None):
    half = 4 if precision == "fp32" else 2
    terms = {  # bytes of all the parameters, and from which stage on each term is partitioned
        "params": (half * params, 3),
        "grads": (half * params, 2),
        "master_weights": (0 if precision == "fp32" else master_bytes * params, 1),
        "optimizer_states": (8 * params if optimizer_state_bytes is None else optimizer_state_bytes, 1),
    }
    place = {"params": offload_param, "grads": "none", "master_weights": offload_optimizer,
             "optimizer_states": offload_optimizer}
    if stage >= 2:
        place["grads"] = offload_optimizer  # ZeRO-Offload: the optimizer consumes its gradient partition on host
    gpu, cpu, nvme = {}, {}, {}
    for name, (total, partitioned_from) in terms.items():
        if total == 0:
            continue
        per_rank = total / (world if stage >= partitioned_from else 1)
        if place[name] == "none":
            gpu[name] = rounded(per_rank)
        else:
            ({"cpu": cpu, "nvme": nvme}[place[name]])[name] = rounded(per_rank * gpus_per_node)
    return gpu, cpu, nvme


def _deepspeed(params, stage, gpus_per_node, nodes, offload_optimizer, offload_param, precision,
               largest_layer_params, zero_init, buffer_factor):
    total_gpus = nodes * gpus_per_node
    half = 4 if precision == "fp32" else 2
    # Per-parameter bytes of the optimizer side, in DeepSpeed's order (its "18" with 16-bit training).
    optimizer_side = {"grads": half, **FP32_OPTIMIZER_STATE}
    if stage in (0, 1, 2):
        gpu = {"params": half * params}
        partitioned = dict(optimizer_side)
        if stage < 2:
            gpu["grads"] = half * params
            del partitioned["grads"]
        partitioned_over = 1 if stage == 0 else total_gpus
        if offload_optimizer == "cpu":
            partitioned = {}
            offloaded = {name: b * params for name, b in FP32_OPTIMIZER_STATE.items()}
            cpu = _host(params, [max(4 * total_gpus, 16), buffer_factor], offloaded, load_peak=4 * total_gpus * params)
        else:
            cpu = _host(params, [4, gpus_per_node, buffer_factor], {}, load_peak=4 * gpus_per_node * params)
        gpu.update(_split(partitioned, params, partitioned_over))
        return gpu, cpu, {}

    gpus_factor = 1 / nodes
    gpu = {"gathered_layer": 2 * half * largest_layer_params}
    on_gpu = {"params": half} if offload_param == "none" else {}
    if offload_optimizer == "none":
        # Stage 3 counts no persistent 16-bit gradients: they live in the gathered-layer term.
        on_gpu.update({name: b for name, b in optimizer_side.items() if name != "grads"})
    gpu.update(_split(on_gpu, params, total_gpus))
    host_terms, nvme_terms = {}, {}
    for device, terms in ((offload_param, {"params": half}),
                          (offload_optimizer, FP32_OPTIMIZER_STATE)):
        if device == "cpu":
            host_terms.update(terms)
        elif device == "nvme":
            nvme_terms.update(terms)
    nvme = {name: round(per_param * params * gpus_factor) for name, per_param in nvme_terms.items()}
    per_param = sum(host_terms.values())
    resident = {name: b * params * gpus_factor for name, b in host_terms.items()}
    if zero_init and per_param:
        cpu = _host(params, [per_param, gpus_factor, buffer_factor], resident, load_peak=0)
    elif zero_init:
        cpu = _host(largest_layer_params, [4, gpus_per_node, buffer_factor], {},
                    load_peak=4 * gpus_per_node * largest_layer_params)
    elif per_param:
        cpu = _host(params, [max(4 * gpus_per_node, per_param * gpus_factor), buffer_factor], resident,
                    load_peak=4 * gpus_per_node * params)
    else:
        cpu = _host(params, [4, gpus_per_node, buffer_factor], {}, load_peak=4 * gpus_per_node * params)
    return gpu, cpu, nvme


def _split(per_param, params, ranks):
    """Partition per-parameter byte terms over ranks the way DeepSpeed rounds: int(total * params / ranks)."""
    if not per_param:
        return {}
    total = int(sum(per_param.values()) * params / ranks)
    parts = {name: int(b * params / ranks) for name, b in per_param.items()}
    last = list(parts)[-1]
    parts[last] += total - sum(parts.values())
    return parts


def _host(count, factors, resident, load_peak):
    """DeepSpeed's host figure, int(count * f1 * f2 * ...) multiplied in its own order so the float
    result is identical, split into what it is made of: the resident offloaded state or the fp32
    load-time peak (whichever DeepSpeed's max() picked), and the rest of the buffer factor."""
    total = count
    for factor in factors:
        total = total * factor
    total = int(total)
    parts = {name: int(b) for name, b in resident.items()}
    if load_peak > sum(parts.values()):
        parts = {"model_load_fp32": int(load_peak)}
    parts["buffer"] = total - sum(parts.values())
    return parts
