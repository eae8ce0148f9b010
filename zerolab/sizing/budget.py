"""The whole per-GPU memory budget of a ZeRO training setup, at its two peaks, one line per thing that needs room.

A step has two peaks, and a GPU must hold the larger (``Budget.gpu`` is that one; both are kept):
  backward  the end of the forward pass / the backward pass: model states, gradient buckets, activations;
  step      inside ``optimizer.step()``: activations and buckets are gone, the fp32 gradients are made.
Each peak has the same lines:
    model_states           zerolab.engine.zero_terms: what DeepSpeed 0.19.8 keeps on the GPU at that moment
    communication_buckets  the gradient reduce bucket(s) (zerolab.engine.zero_terms.bucket_bytes), backward only
    activations            zerolab.engine.activations.activation_memory (the paper's accounting, with its working set)
    cuda_context           CUDA_CONTEXT_BYTES, an allowance: the CUDA context, cuBLAS and NCCL workspaces
    fragmentation          FRAGMENTATION x the allocator's lines above: the caching allocator's unusable gaps

The two allowances are stated guesses, not measurements of a particular machine: the CUDA context of a recent
driver takes 0.3-0.6 GiB before the first tensor, NCCL and cuBLAS add their buffers on top, and PyTorch's caching
allocator typically reserves 5-15% more than it hands out.
Host memory is per node: ``host`` is the runtime host memory (zerolab.engine.host_memory: offloaded buffers, pinned ones
rounded up), ``host_loading_bytes`` DeepSpeed's estimator's figure (zerolab.engine.memory), which is the load-time peak of
every rank building the model in fp32 when that is larger than what it offloads.
"""
from dataclasses import dataclass

from zerolab.engine import activations, comm, zero_terms
from zerolab.engine.units import GiB

CUDA_CONTEXT_BYTES = 1 * GiB
FRAGMENTATION = 0.10
LINES = ("model_states", "communication_buckets", "activations", "cuda_context", "fragmentation")
PEAKS = ("backward", "step")


@dataclass(frozen=True)
class Budget:
    backward: dict  # line name -> bytes per GPU, in LINES order, at the forward/backward peak
    step: dict  # the same lines inside optimizer.step()
    states: zero_terms.ModelStates
    activations: activations.Activations

    @property
    def peak(self):
        """'backward' or 'step': which of the two the GPU has to hold."""
        return "step" if sum(self.step.values()) > sum(self.backward.values()) else "backward"

    @property
    def gpu(self):
        return self.step if self.peak == "step" else self.backward

    @property
    def gpu_bytes(self):
        return sum(self.gpu.values())

    @property
    def host(self):
        return self.states.host  # runtime host memory per node, by term

    @property
    def host_bytes(self):
        return sum(self.states.host.values())

    @property
    def host_loading_bytes(self):
        return self.states.estimate.cpu_bytes  # DeepSpeed's estimator, per node

    @property
    def nvme_bytes(self):
        return self.states.estimate.nvme_bytes

    def overflow(self, gpu_memory):
        """The first line of the peak at which the running total passes gpu_memory, or None when it fits."""
        total = 0
        for name, nbytes in self.gpu.items():
            total += nbytes
            if total > gpu_memory:
                return name
        return None


def budget(model, stage, seq_len, micro_batch, gpus_per_node=1, nodes=1, offload_optimizer="none",
           offload_param="none", precision="bf16", recompute="none", attention="flash", accounting="deepspeed",
           reduce_bucket_size=comm.DEFAULT_BUCKET, overlap_comm=True, **stage3):
    """Per-GPU budget lines (bytes) for ``model`` (zerolab.engine.models.Decoder) trained with this setup.

    ``stage3`` takes zerolab.engine.zero_terms.model_states' ZeRO-3 and pinning options (max_live_parameters, ...).
    """
    states = model_states(model, stage, gpus_per_node, nodes, offload_optimizer, offload_param, precision,
                          accounting, **stage3)
    acts = activations.activation_memory(model, seq_len, micro_batch, precision, attention, recompute)
    return combine(states, acts, bucket_bytes(stage, precision, reduce_bucket_size, overlap_comm))


def model_states(model, stage, gpus_per_node=1, nodes=1, offload_optimizer="none", offload_param="none",
                 precision="bf16", accounting="deepspeed", **options):
    return zero_terms.model_states(model, stage, gpus_per_node, nodes, offload_optimizer, offload_param, precision,
                                   accounting, **options)


def bucket_bytes(stage, precision="bf16", reduce_bucket_size=comm.DEFAULT_BUCKET, overlap_comm=True):
    return zero_terms.bucket_bytes(stage, precision, reduce_bucket_size, overlap_comm)


def combine(states, acts, buckets):
    """A Budget from its parts: a zero_terms.ModelStates, an activations.Activations and the bucket bytes."""
    backward = _lines(states.backward_bytes, buckets, acts.total_bytes)
    step = _lines(states.step_bytes, 0, 0)
    return Budget(backward, step, states, acts)


def _lines(model_state_bytes, buckets, activation_bytes):
    allocated = model_state_bytes + buckets + activation_bytes
    return {"model_states": model_state_bytes, "communication_buckets": buckets, "activations": activation_bytes,
            "cuda_context": CUDA_CONTEXT_BYTES, "fragmentation": round(FRAGMENTATION * allocated)}


def largest_micro_batch(gpu_memory, states, one_sequence, buckets):
    """The largest micro-batch whose budget fits in gpu_memory bytes (0 when not even one sequence fits).

    ``one_sequence`` is the Activations of micro-batch 1: the step peak is the same for any micro-batch, and the
    backward peak grows linearly with it (its activations, with the fragmentation on them).
    """
    one = combine(states, one_sequence, buckets)
    if sum(one.step.values()) > gpu_memory:
        return 0
    per_sample = one.backward["activations"] * (1 + FRAGMENTATION)
    room = gpu_memory - (sum(one.backward.values()) - per_sample)
    if room < per_sample:
        return 0
    return int(room // per_sample)
