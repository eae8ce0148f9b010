"""What DeepSpeed 0.19.8 keeps on each GPU for the model states, at the backward peak and inside ``step()``.

zerolab.engine.memory reproduces DeepSpeed's estimators (``estimate_zero2/zero3_model_states_mem_needs``), which add every
term as if it lived for the whole step. The code keeps some of them only for a moment; this module follows it:

ZeRO-1/2 without offload (runtime/zero/stage_1_and_2.py ``step``): the fp32 gradient partition (the estimator's
  4 bytes/param of its "18") is made inside ``step()`` from a flat 16-bit copy of the gradient partition
  (``self.flatten(self.averaged_gradients[i])`` then ``.to(fp32)``; the copy is deleted right after and the fp32
  gradient set to None after ``_optimizer_step``), when the activations are gone and the reduce buckets were
  released (``_release_ipg_buffers`` in the backward epilogue). So the backward peak has no fp32 gradients and the
  step peak has them plus the flat 16-bit copy. With CPU offload the fp32 gradients live in host memory.
ZeRO-3 (runtime/zero/stage3.py), without the estimator's "4 x largest layer" guess:
  persistent  the 16-bit parameter partition (unless offload_param), the 16-bit gradient partition
              (``grad_partitions_flat_buffer``, on the GPU unless the optimizer is offloaded), the fp32 master
              weights and Adam's moments (unless offload_optimizer);
  gathered    the parameters gathered for compute (partitioned_param_coordinator.py ``fetch_sub_module``): the
              current submodule's, plus what prefetching (``stage3_prefetch_bucket_size`` elements at a time)
              and reuse (``stage3_max_reuse_distance``) keep; prefetching stops once ``stage3_max_live_parameters``
              elements are available (``max_params_to_prefetch = min(max_live - available, prefetch_bucket)``).
              Parameters used again within ``max_reuse_distance`` elements of the trace are not released
              (``__params_to_release``), so the kept set can reach that many too. zerolab counts
              min(params, max(max_live_parameters, max_reuse_distance) + largest submodule) elements of gathered
              parameters (the largest submodule: the one being fetched), plus the full 16-bit gradient of the
              largest submodule before it is reduce-scattered into the bucket; tests/test_zero_terms_measured.py
              checks the count against a real engine;
  step        ``step()`` first releases every gathered parameter (``_partition_all_parameters``), then per
              sub-group of ``sub_group_size`` elements makes the fp32 gradient from a flat 16-bit copy
              (``_prepare_fp32_grad_for_sub_group``) and frees it (``_release_sub_group``): one sub-group's
              fp32 gradient and copy at a time.
Reduce buckets: ZeRO-1/2 allocate one ``reduce_bucket_size`` buffer per communication dtype and a second with
  ``overlap_comm`` (``setup_buckets``: "double buffers"); ZeRO-3 allocates one per dtype, with or without
  ``overlap_comm`` (``__init__``: ``bucket.buffer = torch.empty(self.reduce_bucket_size, ...)``), and keeps it.
Parameters below ``stage3_param_persistence_threshold`` (1e5 elements: a decoder's norms) stay whole on every GPU;
  for the models here that is well under 0.1% and not counted.
Stage 0 is the estimator's figure at both peaks (DeepSpeed's bf16 optimizer keeps its fp32 gradients).
bf16 master weights (``master="bf16"``: bf16.bf16_master_weights_and_grads with bf16_optimizer_states, stages 1-3,
  nothing offloaded, the setup DeepSpeed 0.19.8 steps on the device): the master partition takes 2 bytes a
  parameter and Adam's moments 4; inside ``step()`` the flat 16-bit copy of the gradient partition already has the
  master's dtype, so ``.to(master dtype)`` returns it and no fp32 gradient is made (tests/test_zero_terms_measured.py
  sees the optimizer read that very copy). The estimator's figure (``estimate``) stays DeepSpeed's own, which knows
  only fp32 master weights. With the optimizer offloaded to the CPU at stages 1-2 DeepSpeed steps bf16 masters
  with its CPU Adam: the GPU keeps what it keeps for fp32 masters, the host bf16 buffers
  (zerolab.engine.host_memory); ZeRO-3 and NVMe offload with bf16 masters are not modelled yet (ValueError).
Muon (``optimizer="muon"``: DeepSpeed's MuonWithAuxAdam, stages 1-3, nothing offloaded, fp32 master weights): the
  optimizer side is what zerolab.engine.muon counts for the rank holding the most (measured on CPU ranks:
  tests/test_muon_measured.py), in place of Adam's; the gradient terms are the ZeRO optimizer's, as for Adam. Not
  counted: the whole gradient of a matrix that straddles two ranks' partitions (DeepSpeed copies it to both for
  Newton-Schulz) and Newton-Schulz's temporaries (a few bf16 copies of one matrix at a time).
"""
import math
from dataclasses import dataclass

from zerolab.engine import comm, host_memory, memory, muon

MAX_LIVE_PARAMETERS = 1_000_000_000  # stage3_max_live_parameters default (runtime/zero/config.py)
MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance default
PREFETCH_BUCKET = comm.DEFAULT_PREFETCH_BUCKET  # stage3_prefetch_bucket_size default, 5e7 elements
SUB_GROUP_SIZE = host_memory.SUB_GROUP_SIZE


@dataclass(frozen=True)
class ModelStates:
    estimate: memory.Estimate  # DeepSpeed's estimator accounting (or the paper's): what `zerolab estimate` prints
    backward: dict  # term -> bytes per GPU at the forward/backward peak
    step: dict  # term -> bytes per GPU inside optimizer.step()
    host: dict  # term -> runtime host bytes per node (zerolab.engine.host_memory)

    @property
    def backward_bytes(self):
        return sum(self.backward.values())

    @property
    def step_bytes(self):
        return sum(self.step.values())

    # zerolab.engine.memory.Estimate's names, for code written against it
    @property
    def gpu_bytes(self):
        return max(self.backward_bytes, self.step_bytes)

    @property
    def cpu_bytes(self):
        return self.estimate.cpu_bytes

    @property
    def nvme_bytes(self):
        return self.estimate.nvme_bytes


def model_states(model, stage, gpus_per_node=1, nodes=1, offload_optimizer="none", offload_param="none",
                 precision="bf16", accounting="deepspeed", max_live_parameters=MAX_LIVE_PARAMETERS,
                 max_reuse_distance=MAX_REUSE_DISTANCE, sub_group_size=SUB_GROUP_SIZE, pin_memory=True,
                 pin_backend="torch", master="fp32", optimizer="adamw"):
    """ModelStates of ``model`` (a zerolab.engine.models.Decoder) for this setup; see the module docstring."""
    _check_master(master, stage, precision, offload_optimizer, offload_param)
    _check_optimizer(optimizer, stage, precision, offload_optimizer, offload_param, master)
    params, largest = model.params(), model.largest_layer_params()
    estimate = memory.estimate(params, stage, gpus_per_node, nodes, offload_optimizer=offload_optimizer,
                               offload_param=offload_param, precision=precision, accounting=accounting,
                               largest_layer_params=largest)
    world = gpus_per_node * nodes
    element = 4 if precision == "fp32" else 2
    if stage == 3:
        kept = max(max_live_parameters, max_reuse_distance)
        backward, step = _stage3(params, largest, world, element, offload_optimizer, offload_param, kept,
                                 sub_group_size, master)
    else:
        backward = dict(estimate.breakdown["gpu"])
        step = dict(backward)
        if stage in (1, 2) and "fp32_grads" in backward:
            del backward["fp32_grads"]
            step["flat_grad_copy"] = element * math.ceil(params / world)
        if master == "bf16" and offload_optimizer == "none":
            partition = math.ceil(params / world)
            for terms in (backward, step):
                terms.update(master_weights=memory.MASTER_BYTES[master] * partition,
                             optimizer_states=memory.MOMENT_BYTES[master] * partition)
            del step["fp32_grads"]  # the flat copy is the gradient the optimizer reads
    if optimizer == "muon":
        for terms in (backward, step):
            terms.update(muon_states(model, stage, world, precision))
    host = host_memory.runtime_host(params, stage, gpus_per_node, nodes, offload_optimizer, offload_param,
                                    precision, largest, pin_memory, pin_backend, sub_group_size, master,
                                    master)  # fit's bf16 rows keep bf16 moments too
    return ModelStates(estimate, backward, step, host)


def muon_states(model, stage, world_size, precision="bf16"):
    """{"master_weights", "optimizer_states", "muon_momentum"}: the optimizer side DeepSpeed's Muon keeps on the GPU
    that holds the most (zerolab.engine.muon.most_loaded_rank): fp32 master weights of both halves, Adam's moments
    for what Muon does not step, and Muon's momentum in the training dtype, whole for each matrix a rank's partition
    touches at stages 1-2."""
    _, held = muon.most_loaded_rank(*muon.shapes_and_tags(model.parameter_shapes()), stage, world_size, precision)
    return {"master_weights": held["master_weights"], "optimizer_states": held["adam_moments"],
            "muon_momentum": held["momentum"]}


def gathered_params(params, largest, kept=max(MAX_LIVE_PARAMETERS, MAX_REUSE_DISTANCE)):
    """Elements of parameters ZeRO-3 holds gathered at once, at most (see the module docstring)."""
    return min(params, kept + largest)


def _check_master(master, stage, precision, offload_optimizer, offload_param):
    if master not in memory.MASTER_BYTES:
        raise ValueError(f"master must be one of {', '.join(memory.MASTER_BYTES)}, got {master!r}")
    if master == "bf16" and (stage == 0 or precision != "bf16"):
        raise ValueError("bf16 master weights need bf16 training and ZeRO stage 1, 2 or 3")
    if master == "bf16" and (offload_param != "none" or offload_optimizer not in ("none", "cpu")
                             or (stage == 3 and offload_optimizer != "none")):
        raise ValueError("bf16 master weights with offload are modelled at stages 1-2 with the optimizer in CPU "
                         "memory (the host buffers measured on CPU ranks); ZeRO-3 and NVMe offload are not yet")


def _check_optimizer(optimizer, stage, precision, offload_optimizer, offload_param, master):
    if optimizer not in memory.OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(memory.OPTIMIZERS)}, got {optimizer!r}")
    if optimizer == "muon" and (stage == 0 or precision not in ("bf16", "fp32") or master != "fp32"
                                or (offload_optimizer, offload_param) != ("none", "none")):
        raise ValueError("Muon is modelled at ZeRO stages 1-3, in bf16 or fp32 training, without offload and with "
                         "fp32 master weights, the setups measured on CPU ranks")


def _stage3(params, largest, world, element, offload_optimizer, offload_param, kept, sub_group_size, master="fp32"):
    partition = math.ceil(params / world)
    persistent = {}
    if offload_param == "none":
        persistent["params"] = element * partition
    if offload_optimizer == "none":
        persistent.update(grads=element * partition, master_weights=memory.MASTER_BYTES[master] * partition,
                          optimizer_states=memory.MOMENT_BYTES[master] * partition)
    backward = dict(persistent, gathered_params=element * gathered_params(params, largest, kept),
                    gathered_grads=element * largest)
    step = dict(persistent)
    if offload_optimizer == "none":
        sub_group = min(partition, sub_group_size)
        if master == "fp32":
            step["fp32_grads"] = 4 * sub_group
        step["flat_grad_copy"] = element * sub_group  # in bf16 master's dtype: the gradient the optimizer reads
    return backward, step


def bucket_bytes(stage, precision="bf16", reduce_bucket_size=comm.DEFAULT_BUCKET, overlap_comm=True):
    """GPU bytes of the gradient reduce bucket(s): two at stages 1-2 with overlap_comm, else one (stage 0 too)."""
    return comm.bucket_buffer_bytes(reduce_bucket_size, precision, overlap_comm=overlap_comm and stage in (1, 2))
