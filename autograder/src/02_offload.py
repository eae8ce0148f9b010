# %% [markdown]
# # Lesson 02: CPU and NVMe offload

# %% [markdown]
# ## Learning goals
#
# After this lesson you can:
#
# - say which model states ZeRO-Offload moves to host memory, and how much stays on the GPU;
# - compute what crosses PCIe in each optimizer step, with and without gradient accumulation;
# - estimate the host RAM DeepSpeed needs, and why it grows with the number of GPUs per node;
# - explain `pin_memory`, and when offload pays and when it does not.
#
# All numbers come from `zerolab.memory` and `zerolab.comm`.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math

from zerolab import comm, memory, units
from zerolab.units import GB, GiB

P13B = units.parse_count("13B")

# %% [markdown]
# ## 1. What moves to the host
#
# `offload_optimizer: {"device": "cpu"}` (ZeRO-Offload) runs the optimizer step on the CPU. So the optimizer's
# fp32 state (master weights, momentum, variance) lives in host RAM, and at every stage (ZeRO-1 too) the gradient
# partition each GPU owns is copied to the host, where DeepSpeed keeps it as an **fp32** gradient partition for the
# CPU optimizer to consume. With gradient accumulation the host also holds 16-bit accumulation buffers (pinned by
# default) that the breakdown below does not count. The GPU keeps the 16-bit parameters for
# forward and backward. NVMe offload (ZeRO-Infinity) needs stage 3, and so does `offload_param`. Below stage 3,
# DeepSpeed 0.19.8 accepts `device: "nvme"` for the optimizer and quietly treats it as CPU offload (its stage 1/2
# optimizer in `stage_1_and_2.py` offloads to the CPU for any device but `none`): the state lands in host RAM.
#
# Below, for a 13B model on 8 GPUs: the totals, then what each part is and where it lives (paper accounting).

# %%
for device in ("none", "cpu"):
    est = memory.estimate(P13B, 2, gpus_per_node=8, offload_optimizer=device)
    print(f"ZeRO-2, offload_optimizer={device}: GPU {units.format_bytes(est.gpu_bytes)} per GPU, "
          f"host {units.format_bytes(est.cpu_bytes)} per node")
    for place, parts in est.breakdown.items():
        for part, nbytes in parts.items():
            print(f"    {place:4s} {part:18s} {units.format_bytes(nbytes):>9s}")

# %% [markdown]
# ### Exercise 1: the split between GPU and host
#
# Write `offload_split(params, gpus)`: for ZeRO-2 with CPU optimizer offload on one node of `gpus` GPUs
# (paper accounting, fp16 Adam), return `{"gpu": bytes per GPU, "host": bytes of host RAM per node}`.
# Hidden tests compare it with `memory.estimate` for other sizes and GPU counts.

# %% nbgrader={"grade": false, "grade_id": "ex1_offload_split", "locked": false, "schema_version": 3, "solution": true, "task": false}
def offload_split(params, gpus):
    """ZeRO-2 + CPU optimizer offload: model-state bytes per GPU, and host bytes per node."""
    ### BEGIN SOLUTION
    per_gpu_partition = (2 + 12) * params / gpus  # fp16 gradient partition + fp32 master, momentum, variance
    return {"gpu": 2 * params, "host": per_gpu_partition * gpus}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex1_offload_split", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
answer = offload_split(1000, 4)
assert isinstance(answer, dict) and set(answer) == {"gpu", "host"}, 'return {"gpu": ..., "host": ...}'
assert answer["gpu"] < memory.estimate(1000, 2, gpus_per_node=4).gpu_bytes, "offload should leave less on the GPU"
assert answer["host"] > answer["gpu"], "the optimizer's fp32 state is much larger than the fp16 parameters"
assert math.isclose(offload_split(1000, 1)["host"], offload_split(1000, 8)["host"]), \
    "the node's host memory holds every GPU's partition: it should not depend on how the node's GPUs split it"
_printed = memory.estimate(P13B, 2, gpus_per_node=8, offload_optimizer="cpu")
assert math.isclose(offload_split(P13B, 8)["gpu"], _printed.gpu_bytes), \
    "13B on 8 GPUs: the GPU side should match the figure printed above (only the fp16 parameters stay)"
assert math.isclose(offload_split(P13B, 8)["host"], _printed.cpu_bytes), \
    "13B on 8 GPUs: the host side should match the figure printed above: the fp32 master weights, momentum and " \
    "variance, plus the fp16 gradient partitions the CPU optimizer consumes"
### BEGIN HIDDEN TESTS
from zerolab import memory as _memory
from zerolab.checks import plain as _plain

for _params in (1_300_000_000, 70_000_000_001):
    for _gpus in (1, 3, 8):
        _got = _plain(offload_split(_params, _gpus), "offload_split(...)")
        _want = _memory.estimate(_params, 2, gpus_per_node=_gpus, offload_optimizer="cpu")
        assert type(_got) is dict and set(_got) == {"gpu", "host"}, \
            "wrong type or keys: offload_split(...) should return a dict with exactly the keys 'gpu' and 'host'"
        assert abs(_got["gpu"] - _want.gpu_bytes) <= 4, f"offload_split({_params}, {_gpus})['gpu'] is wrong"
        assert abs(_got["host"] - _want.cpu_bytes) <= 16, f"offload_split({_params}, {_gpus})['host'] is wrong"
### END HIDDEN TESTS

# %% [markdown]
# ### A common claim: "ZeRO-2 + offload ≈ 29GB" (13B model)
#
# No source gives 29 GB. DeepSpeed's estimator says what stays on the GPU is the fp16 parameters; 29 GB could only
# be that plus some buffers or activations, which no estimator counts. The claim also leaves out the bigger
# number: **host RAM**. DeepSpeed's estimate counts every process building the model in fp32 at load time, times
# its `additional_buffer_factor`:

# %%
print("DeepSpeed's default additional_buffer_factor:", memory.DEFAULT_BUFFER_FACTOR)
for gpus in (1, 8):
    est = memory.estimate(P13B, 2, gpus_per_node=gpus, offload_optimizer="cpu", accounting="deepspeed")
    print(f"13B, ZeRO-2 + CPU offload, {gpus} GPU(s): GPU {units.format_bytes(est.gpu_bytes, 'GiB')} per GPU, "
          f"host {units.format_bytes(est.cpu_bytes, 'GiB')} per node")

# %% [markdown]
# ### Exercise 2: DeepSpeed's host RAM figure
#
# Write `deepspeed_host_gib(params, gpus_per_node, nodes)`: the host RAM per node, in GiB, that DeepSpeed's ZeRO-2
# estimator gives with CPU optimizer offload and its default buffer factor (printed above). Its rule: the larger of
# the offloaded fp32 state (4 bytes each of parameters, gradients, momentum, variance) and the fp32 load peak (4 bytes
# per parameter for every GPU process in the job), times the buffer factor.
#
# Note "every GPU process in the job": DeepSpeed's code multiplies by the GPUs of **all** nodes although the figure
# is per node (its docs say GPUs per node), so for several nodes it over-estimates each node's RAM. Reproduce the
# code, not the docs. Hidden tests call DeepSpeed's `estimate_zero2_model_states_mem_needs` itself.

# %% nbgrader={"grade": false, "grade_id": "ex2_deepspeed_host_gib", "locked": false, "schema_version": 3, "solution": true, "task": false}
def deepspeed_host_gib(params, gpus_per_node, nodes):
    """Host RAM per node (GiB) for ZeRO-2 + CPU offload, as DeepSpeed's estimator counts it."""
    ### BEGIN SOLUTION
    total_gpus = gpus_per_node * nodes
    return params * max(4 * total_gpus, 16) * memory.DEFAULT_BUFFER_FACTOR / GiB
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex2_deepspeed_host_gib", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
_one = memory.estimate(P13B, 2, gpus_per_node=1, offload_optimizer="cpu", accounting="deepspeed")
assert math.isclose(deepspeed_host_gib(P13B, 1, 1), _one.cpu_bytes / GiB, rel_tol=1e-9), \
    "one GPU: compare with the figure printed above; GiB means dividing by 2**30"
assert deepspeed_host_gib(P13B, 8, 1) > deepspeed_host_gib(P13B, 1, 1), \
    "with 8 processes the fp32 load peak is larger than the offloaded state"
### BEGIN HIDDEN TESTS
import os as _os

_os.environ.setdefault("DS_ACCELERATOR", "cpu")
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as _ds_zero2

from zerolab.checks import plain as _plain

for _params in (350_000_000, 6_700_000_001):
    for _gpus, _nodes in ((1, 1), (2, 1), (8, 1), (8, 4)):
        _cpu, _gpu = _ds_zero2(_params, num_gpus_per_node=_gpus, num_nodes=_nodes, cpu_offload=True)
        _got = _plain(deepspeed_host_gib(_params, _gpus, _nodes), "deepspeed_host_gib(...)")
        assert type(_got) in (int, float) and math.isclose(_got, _cpu / 2**30, rel_tol=1e-9), \
            f"deepspeed_host_gib({_params}, {_gpus}, {_nodes}) is wrong"
### END HIDDEN TESTS

# %% [markdown]
# ## 2. What crosses PCIe each step
#
# In DeepSpeed 0.19.8's accounting (read from `stage_1_and_2.py`, and measured on real runs by `zerolab.run.meter`,
# see lesson 06): with ZeRO-2 and CPU offload, at the accumulation boundary each GPU casts its reduced gradient
# partition to **fp32 on the GPU** and copies it to the host (4 bytes a value), the CPU runs Adam, and the updated
# 16-bit parameter partition comes back (then ZeRO-2's all-gather shares it with the other GPUs). ZeRO-2 reduces
# gradients on **every micro-step**, so with gradient accumulation each micro-step also sends the 16-bit gradients
# to a host accumulation buffer, and from the second micro-step on that buffer first comes back to the GPU to be
# added to.

# %%
for grad_accum in (1, 4, 16):
    t = comm.traffic(P13B, 2, 8, grad_accum=grad_accum, offload_optimizer="cpu")
    print(f"13B, 8 GPUs, grad_accum={grad_accum:2d}: to host {units.format_bytes(t.device_to_host_bytes)}, "
          f"to GPU {units.format_bytes(t.host_to_device_bytes)} per GPU per step")

# %% [markdown]
# Explore it: model size, GPUs, accumulation and the host link. Where widgets cannot render, you see the static figure.

# %%
from zerolab import widgets

widgets.offload_explorer(params="13B", world_size=8, grad_accum=4)

# %% [markdown]
# ### Exercise 3: PCIe bytes per step
#
# Write `pcie_bytes(params, gpus, grad_accum)`: for ZeRO-2 + CPU optimizer offload with fp16 training on `gpus`
# GPUs, the bytes **one GPU** moves per optimizer step in DeepSpeed 0.19.8's accounting (section 2), as
# `{"to_host": ..., "to_gpu": ...}`. Count each GPU's partition as `params / gpus` values.
# Hidden tests compare with `comm.traffic`.

# %% nbgrader={"grade": false, "grade_id": "ex3_pcie_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def pcie_bytes(params, gpus, grad_accum):
    """Bytes one GPU sends to and receives from the host per optimizer step (ZeRO-2, CPU offload, fp16)."""
    ### BEGIN SOLUTION
    partition = params / gpus
    accumulating = grad_accum if grad_accum > 1 else 0  # micro-steps that use the host accumulation buffer
    return {"to_host": 4 * partition + 2 * partition * accumulating,
            "to_gpu": 2 * partition + 2 * partition * max(0, accumulating - 1)}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex3_pcie_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
answer = pcie_bytes(8000, 8, 1)
assert isinstance(answer, dict) and set(answer) == {"to_host", "to_gpu"}, 'return {"to_host": ..., "to_gpu": ...}'
assert pcie_bytes(8000, 8, 1)["to_host"] < pcie_bytes(8000, 1, 1)["to_host"], \
    "each GPU only moves the partition it owns: more GPUs, fewer bytes per GPU"
assert math.isclose(pcie_bytes(8000, 8, 1)["to_host"], 2 * pcie_bytes(8000, 8, 1)["to_gpu"]), \
    "without accumulation: the gradient goes down as fp32 (4 bytes), the parameters come back as fp16 (2 bytes)"
assert pcie_bytes(8000, 8, 4)["to_host"] > pcie_bytes(8000, 8, 1)["to_host"], \
    "with accumulation every micro-step also sends its 16-bit gradients to the host"
_printed = comm.traffic(P13B, 2, 8, grad_accum=4, offload_optimizer="cpu")
assert math.isclose(pcie_bytes(P13B, 8, 4)["to_host"], _printed.device_to_host_bytes), \
    "13B, 8 GPUs, grad_accum=4: to_host should match the figure printed above (fp32 at the boundary, fp16 before)"
assert math.isclose(pcie_bytes(P13B, 8, 4)["to_gpu"], _printed.host_to_device_bytes), \
    "13B, 8 GPUs, grad_accum=4: to_gpu should match the figure printed above (the accumulation buffer comes back too)"
### BEGIN HIDDEN TESTS
from zerolab import comm as _comm
from zerolab.checks import plain as _plain

for _params in (1_300_000_000, 13_000_000_001):
    for _gpus in (1, 8, 24):
        for _gas in (1, 3, 16):
            _got = _plain(pcie_bytes(_params, _gpus, _gas), "pcie_bytes(...)")
            _want = _comm.traffic(_params, 2, _gpus, grad_accum=_gas, offload_optimizer="cpu")
            assert type(_got) is dict and set(_got) == {"to_host", "to_gpu"}, \
                "wrong type or keys: pcie_bytes(...) should return a dict with exactly the keys 'to_host' and 'to_gpu'"
            assert abs(_got["to_host"] - _want.device_to_host_bytes) <= 2, f"to_host wrong for {_params}, {_gpus}, {_gas}"
            assert abs(_got["to_gpu"] - _want.host_to_device_bytes) <= 2, f"to_gpu wrong for {_params}, {_gpus}, {_gas}"
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Does offload pay?
#
# ### A common claim: "PCIe is ~16GB/s vs GPU memory 900GB/s"
#
# True only for one pairing: PCIe 3.0 next to a V100's HBM2. The host link depends on the PCIe generation
# (below, one direction, x16), and GPU memory bandwidth on the GPU. The point stands: the host link is one or two
# orders of magnitude slower than GPU memory, so offload must move as little as possible and overlap it.

# %%
for name in ("pcie3", "pcie4", "pcie5"):
    print(f"{name}: {comm.bandwidth(name) / GB:.2f} GB/s per direction")

# %% [markdown]
# ### Exercise 4: seconds on the host link
#
# Write `pcie_seconds(params, gpus, grad_accum, link)`: the seconds one GPU spends moving its offload traffic per
# optimizer step over `link` (a name such as `"pcie4"`; use `comm.bandwidth(link)` for bytes per second), if
# nothing overlaps. The bytes are those of ZeRO-2 with CPU optimizer offload in DeepSpeed 0.19.8's accounting:
# your `pcie_bytes` from Exercise 3, or, so that this exercise stands on its own,
# `comm.traffic(params, 2, gpus, grad_accum=grad_accum, offload_optimizer="cpu")` (its `device_to_host_bytes` and
# `host_to_device_bytes`). *Accepted:* a float or int of seconds, within 1e-6 relative. Hidden tests compare with
# `comm.transfer_time` of `comm.traffic`.

# %% nbgrader={"grade": false, "grade_id": "ex4_pcie_seconds", "locked": false, "schema_version": 3, "solution": true, "task": false}
def pcie_seconds(params, gpus, grad_accum, link):
    """Seconds per optimizer step that one GPU's offload traffic takes on the host link, without overlap."""
    ### BEGIN SOLUTION
    moved = comm.traffic(params, 2, gpus, grad_accum=grad_accum, offload_optimizer="cpu")  # DeepSpeed 0.19.8's
    return (moved.device_to_host_bytes + moved.host_to_device_bytes) / comm.bandwidth(link)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex4_pcie_seconds", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
assert pcie_seconds(P13B, 8, 1, "pcie3") > pcie_seconds(P13B, 8, 1, "pcie4"), "a faster link takes less time"
assert math.isclose(pcie_seconds(P13B, 8, 1, "pcie3"), 2 * pcie_seconds(P13B, 8, 1, "pcie4"), rel_tol=0.02), \
    "PCIe 4.0 is about twice as fast as PCIe 3.0: use comm.bandwidth(link)"
### BEGIN HIDDEN TESTS
from zerolab import comm as _comm
from zerolab.checks import plain as _plain

for _link in ("pcie3", "pcie5", "20GB/s"):
    for _gpus, _gas in ((1, 1), (8, 8), (16, 2)):
        _t = _comm.traffic(7_000_000_000, 2, _gpus, grad_accum=_gas, offload_optimizer="cpu")
        _want = _comm.transfer_time(_t.device_to_host_bytes + _t.host_to_device_bytes, _link)
        _got = _plain(pcie_seconds(7_000_000_000, _gpus, _gas, _link), "pcie_seconds(...)")
        assert type(_got) in (int, float) and math.isclose(_got, _want, rel_tol=1e-6), \
            f"pcie_seconds(7e9, {_gpus}, {_gas}, {_link!r}) is wrong"
### END HIDDEN TESTS

# %% [markdown]
# ### A common claim: "CPU offload slows training 2-5x"
#
# There is no fixed factor, and no DeepSpeed source gives one (its ZeRO-Offload post claims "competitive
# throughput"). The cost is the host traffic that does not hide behind compute, plus the CPU Adam step, and both
# shrink relative to compute as the batch (compute per step) grows. Below: the step time of ZeRO-2 on 8 GPUs with
# and without offload, for a short and a long compute time (CPU Adam's own time is not modelled):

# %%
for compute_s in (0.5, 8.0):
    base = comm.step_time(comm.traffic(P13B, 2, 8), compute_s, link="ib-hdr", overlap_comm=True)
    off = comm.step_time(comm.traffic(P13B, 2, 8, offload_optimizer="cpu"), compute_s, link="ib-hdr",
                         overlap_comm=True)
    print(f"compute {compute_s:3.1f} s: step {base.total_s:5.2f} s without offload, {off.total_s:5.2f} s with "
          f"(x{off.total_s / base.total_s:.2f})")

# %% [markdown]
# ## 4. pin_memory
#
# `offload_optimizer.pin_memory` page-locks the host buffers so copies between GPU and host run asynchronously at
# full bandwidth and can overlap with compute. In DeepSpeed 0.19.8 it defaults to **true**; it defaulted to false
# until PR #8207 (August 2026), so older tutorials tell you to switch it on. Pinned memory is not extra memory, it is part of the host RAM counted above, but it cannot be swapped
# out: on hosts with little RAM (Colab, WSL2) or a tight `ulimit -l` it is a common cause of the process being
# killed (exit code -9). There, set `"pin_memory": false` explicitly, or keep more on the GPU.

# %% [markdown]
# ## Summary
#
# - ZeRO-Offload moves the fp32 optimizer state (and, from ZeRO-2 on, the gradient partition) to host RAM and runs
#   Adam on the CPU; the GPU keeps the 16-bit parameters. NVMe and parameter offload need ZeRO-3.
# - Host RAM is the number to check: DeepSpeed's estimate grows with the GPU processes per node (fp32 load peak).
# - Per step each GPU sends its gradient partition to the host on every micro-step and gets its parameter
#   partition back once per optimizer step.
# - Whether offload pays depends on compute per step versus host traffic and CPU speed: no fixed slowdown factor.
# - `pin_memory` defaults to true in 0.19.8: fast, but it locks host RAM; turn it off on small hosts.
#
# ## Interview questions
#
# **Q: With ZeRO-2 and CPU offload, what stays on the GPU and what goes to the CPU?**
# A: The 16-bit parameters (and activations) stay on the GPU. The fp32 master weights, momentum and variance live
# in host RAM, the GPU's gradient partition is copied there, and the CPU runs the Adam step.
#
# **Q: Your ZeRO-2 offload job is killed with -9 while creating the optimizer. Why?**
# A: Host RAM, not GPU memory: every process builds the model in fp32, the offloaded state is at least 16 bytes
# per parameter, and pinned memory cannot be swapped. Check DeepSpeed's host estimate, set `pin_memory: false` on
# small hosts, or use fewer processes per node.
#
# **Q: How much crosses PCIe per step, and how does gradient accumulation change it?**
# A: In DeepSpeed 0.19.8, each GPU sends its gradient partition as fp32 (4 bytes a value) at the boundary and
# receives its 16-bit parameter partition once per optimizer step; with accumulation the 16-bit gradients also go
# to a host buffer every micro-step and come back to be added from the second on (Exercise 3).
#
# **Q: Is CPU offload always 2-5x slower?**
# A: No fixed factor exists. It depends on batch size (compute per step), PCIe generation, pinning and CPU cores;
# DeepSpeed reports competitive throughput in its own benchmarks.
#
# **Q: When would you pick NVMe offload?**
# A: When host RAM cannot hold the optimizer state (or the parameters): it needs ZeRO-3 (ZeRO-Infinity) and fast
# NVMe, and trades host RAM for much slower storage traffic.
