"""Runtime host memory per node of a ZeRO run with offload: the buffers DeepSpeed 0.19.8 keeps in RAM, pinned or not.

What each rank keeps (partition = its share of the parameters, padded as DeepSpeed pads it):

ZeRO-1/2 with ``offload_optimizer.device=cpu`` (runtime/zero/stage_1_and_2.py ``__init__``):
  pinned  the fp32 master partition (``weights_partition``), the 16-bit staging copy of it
          (``param_buffer_of_bit16_for_cpu_offload_groups``), the fp32 gradient partition
          (``initialize_optimizer_states``: ``single_partition_of_fp32_groups[i].grad``) and a 16-bit gradient buffer
          of the largest parameter (``temp_grad_buffer_for_cpu_offload``);
  paged   Adam's two fp32 moments, which DeepSpeedCPUAdam creates with ``torch.zeros_like`` (ops/adam/cpu_adam.py).
  With bf16 master weights (bf16.bf16_master_weights_and_grads, ``master="bf16"``) the master partition and its
  gradient are bf16, pinned as before, and the moments bf16 with bf16_optimizer_states (``moments="bf16"``), else
  fp32 (measured on 2 CPU ranks: tests/test_claims_02.py).  # claim: bf16-master-offload-host-buffers
ZeRO-3 (runtime/zero/stage3.py): with the optimizer offloaded (cpu or nvme) ``self.device`` is the CPU, so the 16-bit
  gradient partition (``grad_partitions_flat_buffer``) is pinned in RAM, and with the cpu device each sub-group of
  ``sub_group_size`` elements gets a pinned fp32 gradient buffer (``_create_fp32_partitions`` /
  ``initialize_optimizer_states``: ``subgroup_gradient_buffer``); the fp32 master and the moments are paged RAM.
  With ``offload_param.device=cpu`` the 16-bit parameter partition is pinned (``param_groups_fp16_flat_cpu_memory``).
  NVMe-resident state is not in RAM (zerolab.engine.memory counts it on NVMe); its swap buffers are not counted.

Pinned memory and the power of two: DeepSpeed's default pin path (``DS_PIN_MEMORY_BACKEND`` unset or ``torch``,
deepspeed/utils/pin_memory.py ``get_active_native_pinned_memory``) ends in ``tensor.pin_memory()``
(accelerator/abstract_accelerator.py ``pin_memory`` -> cuda_accelerator.py ``_torch_pin_memory``). torch's caching
host allocator rounds every such block up to the next power of two (torch 2.13, ATen/core/CachingHostAllocator.h
``allocate``: ``c10::llvm::PowerOf2Ceil(size)`` while ``size <= pinned_max_round_threshold()``, whose default in
c10/core/AllocatorConfig.h is the largest size_t, so always). A 6.5 GB partition takes 8.6 GB of RAM.
``DS_PIN_MEMORY_BACKEND=native`` pins through DeepSpeed's own mlock allocator (``NativePinnedMemory``), which
allocates the size asked for: no rounding.
"""
import math

from zerolab.engine import memory

PIN_BACKENDS = ("torch", "native")
SUB_GROUP_SIZE = 1_000_000_000  # zero_optimization.sub_group_size default (runtime/zero/config.py)


def pinned_size(nbytes, backend="torch"):
    """Bytes a pinned buffer of ``nbytes`` really takes: the next power of two with torch's caching host allocator."""
    if backend not in PIN_BACKENDS:
        raise ValueError(f"pin backend must be one of {', '.join(PIN_BACKENDS)}, got {backend!r}")
    nbytes = int(nbytes)
    if backend == "native" or nbytes <= 1:
        return nbytes
    return 1 << (nbytes - 1).bit_length()


def sub_groups(partition, sub_group_size=SUB_GROUP_SIZE):
    """Element counts of the ZeRO-3 sub-groups of one rank's partition (whole sub_group_size pieces, then the rest)."""
    whole, rest = divmod(int(partition), int(sub_group_size))
    return [int(sub_group_size)] * whole + ([rest] if rest else [])


def rank_buffers(params, stage, world_size, offload_optimizer="none", offload_param="none", precision="bf16",
                 largest_param=0, sub_group_size=SUB_GROUP_SIZE, master="fp32", moments="fp32"):
    """[(name, bytes, pinned)] of the host buffers one rank keeps while training (empty without offload).
    ``master``/``moments`` "bf16" (DeepSpeed's bf16 master weights and optimizer states) are modelled at stages 1-2."""
    element = 4 if precision == "fp32" else 2
    if (master, moments) != ("fp32", "fp32") and stage == 3 and offload_optimizer != "none":
        raise ValueError("bf16 master weights under ZeRO-3 offload are not modelled yet (measured at stages 1-2)")
    buffers = []
    if stage in (1, 2) and offload_optimizer != "none":
        partition = math.ceil(params / (2 * world_size)) * 2  # stage_1_and_2.py pads to 2 x ranks elements
        kept = memory.MASTER_BYTES[master]
        buffers = [(f"{master}_master_weights", kept * partition, True), ("bit16_staging", element * partition, True),
                   (f"{master}_grads", kept * partition, True),
                   ("grad_buffer_largest_param", element * largest_param, True),
                   ("optimizer_states", memory.MOMENT_BYTES[moments] * partition, False)]
    elif stage == 3:
        partition = math.ceil(params / world_size)  # stage 3 pads every parameter to a multiple of the ranks
        if offload_optimizer != "none":
            buffers.append(("bit16_grads", element * partition, True))
        if offload_optimizer == "cpu":
            buffers += [(f"fp32_grads_sub_group_{i}", 4 * n, True)
                        for i, n in enumerate(sub_groups(partition, sub_group_size))]
            buffers += [("fp32_master_weights", 4 * partition, False), ("optimizer_states", 8 * partition, False)]
        if offload_param == "cpu":
            buffers.append(("bit16_params", element * partition, True))
    return buffers


def runtime_host(params, stage, gpus_per_node, nodes=1, offload_optimizer="none", offload_param="none",
                 precision="bf16", largest_param=0, pin_memory=True, pin_backend="torch",
                 sub_group_size=SUB_GROUP_SIZE, master="fp32", moments="fp32"):
    """Runtime host memory per node by term (bytes): the offloaded buffers of its ranks, and what pinning rounds up."""
    per_node = {}
    rounding = 0
    for name, nbytes, pinned in rank_buffers(params, stage, gpus_per_node * nodes, offload_optimizer, offload_param,
                                             precision, largest_param, sub_group_size, master, moments):
        key = "fp32_grads" if name.startswith("fp32_grads") else name
        per_node[key] = per_node.get(key, 0) + gpus_per_node * nbytes
        if pinned and pin_memory:
            rounding += gpus_per_node * (pinned_size(nbytes, pin_backend) - nbytes)
    if rounding:
        per_node["pinned_rounding"] = rounding
    return per_node


def built_on_every_rank(param_sizes, element_size, world_size, zero_init):
    """Bytes of parameters one rank holds once every rank has built the model: without ``deepspeed.zero.Init`` each
    rank builds all of it; with it, each keeps its ZeRO-3 share of every parameter, padded to a multiple of the
    ranks (stage 3's partition). ``param_sizes``: each parameter's element count, or the model's total."""
    sizes = [param_sizes] if isinstance(param_sizes, int) else list(param_sizes)
    if not zero_init:
        return element_size * sum(sizes)
    return element_size * sum(math.ceil(size / world_size) for size in sizes)
