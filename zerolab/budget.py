"""The whole per-GPU memory budget of a ZeRO training setup, one line per thing that needs room.

    model_states           zerolab.memory.estimate (DeepSpeed's accounting by default: what its estimators say)
    communication_buckets  zerolab.comm.bucket_buffer_bytes: the gradient reduce bucket (two with overlap_comm);
                           DeepSpeed's stage 0 averages in buckets of the same size, stage 3 fills one of the same
                           size too (its gathered-layer term is already in the model states)
    activations            zerolab.activations.activation_memory (the paper's accounting, with its working set)
    cuda_context           CUDA_CONTEXT_BYTES, an allowance: the CUDA context, cuBLAS and NCCL workspaces
    fragmentation          FRAGMENTATION x the allocator's lines above: the caching allocator's unusable gaps

The two allowances are stated guesses, not measurements of a particular machine: the CUDA context of a recent
driver takes 0.3-0.6 GiB before the first tensor, NCCL and cuBLAS add their buffers on top, and PyTorch's caching
allocator typically reserves 5-15% more than it hands out. Host memory and NVMe are per node (zerolab.memory).
"""
from dataclasses import dataclass

from zerolab import activations, comm, memory
from zerolab.units import GiB

CUDA_CONTEXT_BYTES = 1 * GiB
FRAGMENTATION = 0.10
LINES = ("model_states", "communication_buckets", "activations", "cuda_context", "fragmentation")


@dataclass(frozen=True)
class Budget:
    gpu: dict  # line name -> bytes per GPU, in LINES order
    host_bytes: int  # per node
    nvme_bytes: int  # per node
    states: memory.Estimate
    activations: activations.Activations

    @property
    def gpu_bytes(self):
        return sum(self.gpu.values())

    def overflow(self, gpu_memory):
        """The first line at which the running total passes gpu_memory, or None when everything fits."""
        total = 0
        for name, nbytes in self.gpu.items():
            total += nbytes
            if total > gpu_memory:
                return name
        return None


def budget(model, stage, seq_len, micro_batch, gpus_per_node=1, nodes=1, offload_optimizer="none",
           offload_param="none", precision="bf16", recompute="none", attention="flash", accounting="deepspeed",
           reduce_bucket_size=comm.DEFAULT_BUCKET, overlap_comm=True):
    """Per-GPU budget lines (bytes) for ``model`` (zerolab.models.Decoder) trained with this setup."""
    states = model_states(model, stage, gpus_per_node, nodes, offload_optimizer, offload_param, precision, accounting)
    acts = activations.activation_memory(model, seq_len, micro_batch, precision, attention, recompute)
    return combine(states, acts, bucket_bytes(stage, precision, reduce_bucket_size, overlap_comm))


def model_states(model, stage, gpus_per_node=1, nodes=1, offload_optimizer="none", offload_param="none",
                 precision="bf16", accounting="deepspeed"):
    return memory.estimate(model.params(), stage, gpus_per_node, nodes, offload_optimizer=offload_optimizer,
                           offload_param=offload_param, precision=precision, accounting=accounting,
                           largest_layer_params=model.largest_layer_params())


def bucket_bytes(stage, precision="bf16", reduce_bucket_size=comm.DEFAULT_BUCKET, overlap_comm=True):
    """The gradient reduce bucket(s). Stage 0 averages in buckets of the same size, with nothing to overlap."""
    return comm.bucket_buffer_bytes(reduce_bucket_size, precision, overlap_comm=overlap_comm and stage > 0)


def combine(states, acts, buckets):
    """A Budget from its parts: a memory.Estimate, an activations.Activations and the bucket bytes."""
    allocated = states.gpu_bytes + buckets + acts.total_bytes
    gpu = {"model_states": states.gpu_bytes, "communication_buckets": buckets, "activations": acts.total_bytes,
           "cuda_context": CUDA_CONTEXT_BYTES, "fragmentation": round(FRAGMENTATION * allocated)}
    return Budget(gpu, states.cpu_bytes, states.nvme_bytes, states, acts)


def largest_micro_batch(gpu_memory, states, one_sequence, buckets):
    """The largest micro-batch whose budget fits in gpu_memory bytes (0 when not even one sequence fits).

    ``one_sequence`` is the Activations of micro-batch 1: every line but the activations is the same for any
    micro-batch, and the activations (with the fragmentation on them) grow linearly with it.
    """
    one = combine(states, one_sequence, buckets)
    per_sample = one.gpu["activations"] * (1 + FRAGMENTATION)
    room = gpu_memory - (one.gpu_bytes - per_sample)
    if room < per_sample:
        return 0
    return int(room // per_sample)
