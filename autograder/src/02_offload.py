# %% [markdown]
# # Lesson 02: CPU and NVMe offload

# %% [markdown] lang="zh" en="0bf0ad688c94"
# # 第 02 课：CPU 与 NVMe 卸载（offload）

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
# All numbers come from `zerolab.engine.memory` and `zerolab.engine.comm`.

# %% [markdown] lang="zh" en="b89687214910"
# ## 学习目标
#
# 学完本课，你能够：
#
# - 说出 ZeRO-Offload 把哪些模型状态移到主机内存，以及 GPU 上还剩多少；
# - 算出每个优化器步（optimizer step）经过 PCIe 传输的数据量，包括有和没有梯度累积两种情况；
# - 估算 DeepSpeed 需要的主机内存，并解释它为什么随每个节点的 GPU 数量增长；
# - 解释 `pin_memory`，以及卸载什么时候划算、什么时候不划算。
#
# 所有数字都来自 `zerolab.engine.memory` 和 `zerolab.engine.comm`。

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math

from zerolab.engine import comm, memory, units
from zerolab.base.i18n import tr
from zerolab.engine.units import GB, GiB

P13B = units.parse_count("13B")

# %% [markdown]
# ## 1. What moves to the host
#
# `offload_optimizer: {"device": "cpu"}` (ZeRO-Offload) runs the optimizer step on the CPU. So the optimizer's
# fp32 state (master weights, momentum, variance) lives in host RAM, and at every stage (ZeRO-1 too) the gradient
# partition each GPU owns is copied to the host, where DeepSpeed keeps it as an **fp32** gradient partition for the
# CPU optimizer to consume. <!-- claim: offload-moves-the-gradient-partition-at-stage-1 --> At stage 2,
# gradient accumulation adds 16-bit accumulation buffers on the host (pinned by default, one for each parameter
# that overlaps the GPU's partition), which the breakdown below does not count; stage 1 reduces only at the
# accumulation boundary and keeps none. The GPU keeps the 16-bit parameters for forward and backward. NVMe
# offload (ZeRO-Infinity) needs stage 3, and so does `offload_param`. Below stage 3, DeepSpeed 0.19.8 accepts
# `device: "nvme"` for the optimizer and quietly treats it as CPU offload (its stage 1/2 optimizer in
# `stage_1_and_2.py` offloads to the CPU for any device but `none`): the state lands in host RAM.
#
# Below, for a 13B model on 8 GPUs: the totals, then what each part is and where it lives (paper accounting). <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: zero2-offload-host-accumulation-buffers --> <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload --> <!-- claim: offload-param-ignored-below-stage-3 -->

# %% [markdown] lang="zh" en="779b6c8a3280"
# ## 1. 什么被移到了主机上
#
# `offload_optimizer: {"device": "cpu"}`（ZeRO-Offload）在 CPU 上执行优化器步。因此优化器的 fp32 状态（主权重、动量、方差）存放在主机内存中；而且在任何 stage 下（ZeRO-1 也一样），每张 GPU 所负责的梯度分片都会被拷贝到主机，DeepSpeed 在主机上把它保存为 **fp32** 梯度分片，供 CPU 优化器使用。<!-- claim: offload-moves-the-gradient-partition-at-stage-1 -->在 stage 2 下，梯度累积还会在主机上增加 16 位的累积缓冲区（默认是锁页内存，与该 GPU 的分片有重叠的每个参数各一个），下面的明细没有计入它们；stage 1 只在累积边界上归约，没有这些缓冲区。GPU 上保留前向和反向传播所需的 16 位参数。NVMe 卸载（ZeRO-Infinity）需要 stage 3，`offload_param` 也一样。在 stage 3 以下，DeepSpeed 0.19.8 接受优化器的 `device: "nvme"`，但会悄悄把它当作 CPU 卸载处理（`stage_1_and_2.py` 中的 stage 1/2 优化器只要 device 不是 `none` 就卸载到 CPU）：状态最终落在主机内存里。
#
# 下面是 13B 模型在 8 张 GPU 上的情况：先是总量，然后是每一部分是什么、放在哪里（论文的口径）。 <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: zero2-offload-host-accumulation-buffers --> <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload --> <!-- claim: offload-param-ignored-below-stage-3 -->

# %%
for device in ("none", "cpu"):
    est = memory.estimate(P13B, 2, gpus_per_node=8, offload_optimizer=device)
    print(tr(f"ZeRO-2, offload_optimizer={device}: GPU {units.format_bytes(est.gpu_bytes)} per GPU, "
             f"host {units.format_bytes(est.cpu_bytes)} per node"))
    for place, parts in est.breakdown.items():
        for part, nbytes in parts.items():
            print(f"    {place:4s} {part:18s} {units.format_bytes(nbytes):>9s}")

# %% [markdown]
# ### Exercise 1: the split between GPU and host
#
# Write `offload_split(params, gpus)`: for ZeRO-2 with CPU optimizer offload on one node of `gpus` GPUs
# (paper accounting, fp16 Adam), return `{"gpu": bytes per GPU, "host": bytes of host RAM per node}`.
# Hidden tests compare it with `memory.estimate` for other sizes and GPU counts, so `memory.estimate` is off limits in
# your cell (the test gives 0 if it is used): add the bytes up yourself. Partitions rounded to whole bytes (`//`) count
# too.

# %% [markdown] lang="zh" en="1aaa6bdc4795"
# ### 练习 1：GPU 与主机之间的划分
#
# 编写 `offload_split(params, gpus)`：对单节点 `gpus` 张 GPU、开启 CPU 优化器卸载的 ZeRO-2（论文的口径，fp16 Adam），返回 `{"gpu": 每张 GPU 的字节数, "host": 每个节点的主机内存字节数}`。隐藏测试会在其他模型规模和 GPU 数量下把它与 `memory.estimate` 比较，所以你的单元格里不能使用 `memory.estimate`（用了，测试给 0 分）：请自己把字节数加起来。把分片取整到整字节（`//`）也算对。

# %% nbgrader={"grade": false, "grade_id": "ex1_offload_split", "locked": false, "schema_version": 3, "solution": true, "task": false}
def offload_split(params, gpus):
    """ZeRO-2 + CPU optimizer offload: model-state bytes per GPU, and host bytes per node."""
    ### BEGIN SOLUTION
    per_gpu_partition = (2 + 12) * params / gpus  # fp16 gradient partition + fp32 master, momentum, variance
    return {"gpu": 2 * params, "host": per_gpu_partition * gpus}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex1_offload_split", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("offload_split", ["zerolab.engine.memory.estimate"], exercise="exercise 1",
           instead="add up yourself which model states stay on the GPU and which go to the host")
from zerolab.lesson.checks import close_to, dict_keys

answer = dict_keys(offload_split(1000, 4), ["gpu", "host"], "offload_split(1000, 4)")
assert answer["gpu"] < memory.estimate(1000, 2, gpus_per_node=4).gpu_bytes, "offload should leave less on the GPU"
assert answer["host"] > answer["gpu"], "the optimizer's fp32 state is much larger than the 16-bit parameters"
assert math.isclose(offload_split(1000, 1)["host"], offload_split(1000, 8)["host"]), \
    "the node's host memory holds every GPU's partition: it should not depend on how the node's GPUs split it"
_printed = memory.estimate(P13B, 2, gpus_per_node=8, offload_optimizer="cpu")
close_to(offload_split(P13B, 8)["gpu"], _printed.gpu_bytes, "offload_split(13B, 8)['gpu']", 1e-9, "bytes",
         hint="13B on 8 GPUs: the GPU side should match the figure printed above: which model states does offload "
              "leave there?",
         slips={0.5: "counted 16-bit values (elements), not bytes: a 16-bit value takes 2 bytes"})
close_to(offload_split(P13B, 8)["host"], _printed.cpu_bytes, "offload_split(13B, 8)['host']", 1e-9, "bytes",
         hint="13B on 8 GPUs: the host side should match the figure printed above: which states does the CPU "
              "optimizer need?")
### BEGIN HIDDEN TESTS
from zerolab.engine import memory as _memory
from zerolab.lesson.checks import close_to as _close_to, dict_keys as _dict_keys, plain as _plain

for _params in (1_300_000_000, 70_000_000_001):
    for _gpus in (8, 3, 1):
        _name = f"offload_split({_params}, {_gpus})"
        _got = _dict_keys(_plain(offload_split(_params, _gpus), _name), ["gpu", "host"], _name)
        _want = _memory.estimate(_params, 2, gpus_per_node=_gpus, offload_optimizer="cpu")
        _close_to(_got["gpu"], _want.gpu_bytes, f"{_name}['gpu']", 1e-8, "bytes",
                  hint="which model states does CPU optimizer offload leave on each GPU?",
                  slips={0.5: "counted 16-bit values (elements), not bytes: a 16-bit value takes 2 bytes"})
        _close_to(_got["host"], _want.cpu_bytes, f"{_name}['host']", 1e-8, "bytes",
                  hint="the host keeps the fp32 master weights, momentum and variance and the gradient partitions "
                       "the CPU optimizer consumes, for every GPU of the node",
                  slips={1 / _gpus: "that is one GPU's share; the node's host RAM holds the partitions of all its "
                                    "GPUs"} if _gpus > 1 else None)
### END HIDDEN TESTS

# %% [markdown]
# ### A common claim: "ZeRO-2 + offload ≈ 29GB" (13B model)
#
# No source gives 29 GB. DeepSpeed's estimator says what stays on the GPU is the fp16 parameters; 29 GB could only
# be that plus some buffers or activations, which no estimator counts. The claim also leaves out the bigger
# number: **host RAM**. DeepSpeed's estimate counts every process building the model in fp32 at load time, times
# its `additional_buffer_factor`: <!-- claim: zero2-estimator-offload-gpu-is-16-bit-params --> <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: torch-builds-modules-in-fp32 -->

# %% [markdown] lang="zh" en="d503d4ac07e7"
# ### 一个常见说法："ZeRO-2 + offload ≈ 29GB"（13B 模型）
#
# 没有任何来源给出过 29 GB。DeepSpeed 的估算函数说，留在 GPU 上的是 fp16 参数；29 GB 只能是这部分再加上一些缓冲区或激活值，而这些没有哪个估算函数会计入。这个说法还漏掉了更大的那个数字：**主机内存**。DeepSpeed 的估算计入了每个进程在加载时以 fp32 构建模型的开销，再乘以它的 `additional_buffer_factor`： <!-- claim: zero2-estimator-offload-gpu-is-16-bit-params --> <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: torch-builds-modules-in-fp32 -->

# %%
print(tr("DeepSpeed's default additional_buffer_factor:"), memory.DEFAULT_BUFFER_FACTOR)
for gpus in (1, 8):
    est = memory.estimate(P13B, 2, gpus_per_node=gpus, offload_optimizer="cpu", accounting="deepspeed")
    print(tr(f"13B, ZeRO-2 + CPU offload, {gpus} GPU(s): GPU {units.format_bytes(est.gpu_bytes, 'GiB')} per GPU, "
             f"host {units.format_bytes(est.cpu_bytes, 'GiB')} per node"))

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
# code, not the docs. Hidden tests compare with `memory.estimate`'s DeepSpeed accounting, checked byte for byte against
# DeepSpeed's `estimate_zero2_model_states_mem_needs`, so both are off limits in your cell: write the rule out. <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: zero2-estimator-host-counts-every-nodes-gpus -->

# %% [markdown] lang="zh" en="3c9ec0e1ac12"
# ### 练习 2：DeepSpeed 的主机内存数字
#
# 编写 `deepspeed_host_gib(params, gpus_per_node, nodes)`：在开启 CPU 优化器卸载、使用默认缓冲系数（上面已打印）时，DeepSpeed 的 ZeRO-2 估算函数给出的每个节点的主机内存，单位为 GiB。它的规则是：取卸载的 fp32 状态（参数、梯度、动量、方差各 4 字节）与 fp32 加载峰值（作业中每个 GPU 进程每个参数 4 字节）两者中的较大者，再乘以缓冲系数。
#
# 注意"作业中每个 GPU 进程"：DeepSpeed 的代码乘的是**所有**节点的 GPU 数，尽管这个数字是按节点给出的（其文档写的是每个节点的 GPU 数），所以多节点时它会高估每个节点的内存。请复现代码的行为，而不是文档的说法。隐藏测试会与 `memory.estimate` 的 DeepSpeed 口径比较（它与 DeepSpeed 的 `estimate_zero2_model_states_mem_needs` 逐字节核对过），所以你的单元格里不能使用这两个函数：请把规则自己写出来。 <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: zero2-estimator-host-counts-every-nodes-gpus -->

# %% nbgrader={"grade": false, "grade_id": "ex2_deepspeed_host_gib", "locked": false, "schema_version": 3, "solution": true, "task": false}
def deepspeed_host_gib(params, gpus_per_node, nodes):
    """Host RAM per node (GiB) for ZeRO-2 + CPU offload, as DeepSpeed's estimator counts it."""
    ### BEGIN SOLUTION
    total_gpus = gpus_per_node * nodes
    return params * max(4 * total_gpus, 16) * memory.DEFAULT_BUFFER_FACTOR / GiB
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex2_deepspeed_host_gib", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to
from zerolab.lesson.checks_source import off_limits

off_limits("deepspeed_host_gib", ["zerolab.engine.memory.estimate", "deepspeed.runtime.zero.stage_1_and_2"],
           exercise="exercise 2", instead="write DeepSpeed's rule from the text: the larger of the two fp32 figures, "
                                          "times the buffer factor, in GiB")
_one = memory.estimate(P13B, 2, gpus_per_node=1, offload_optimizer="cpu", accounting="deepspeed")
close_to(deepspeed_host_gib(P13B, 1, 1), _one.cpu_bytes / GiB, "deepspeed_host_gib(13B, 1, 1)", 1e-9, "GiB",
         hint="one GPU: compare with the figure printed above: the larger of the offloaded fp32 state and the fp32 "
              "load peak, times the buffer factor",
         slips={1 / memory.DEFAULT_BUFFER_FACTOR: "left out DeepSpeed's additional_buffer_factor"})
assert deepspeed_host_gib(P13B, 8, 1) > deepspeed_host_gib(P13B, 1, 1), \
    "with 8 processes the fp32 load peak is larger than the offloaded state"
### BEGIN HIDDEN TESTS
from zerolab.engine import memory as _memory
from zerolab.lesson.checks import close_to as _close_to, plain as _plain


def _ds_host(params, gpus, nodes):  # DeepSpeed's estimator to the byte (tests/test_memory.py), without importing it
    return _memory.estimate(params, 2, gpus_per_node=gpus, nodes=nodes, offload_optimizer="cpu",
                            accounting="deepspeed").cpu_bytes


for _params in (350_000_000, 6_700_000_001):
    for _gpus, _nodes in ((8, 4), (2, 1), (8, 1), (1, 1)):
        _cpu, _one_node = _ds_host(_params, _gpus, _nodes), _ds_host(_params, _gpus, 1)
        _name = f"deepspeed_host_gib({_params}, {_gpus}, {_nodes})"
        _slips = {1 / _memory.DEFAULT_BUFFER_FACTOR: "left out DeepSpeed's additional_buffer_factor"}
        if _one_node != _cpu:
            _slips[_one_node / _cpu] = ("counted the GPUs of one node; DeepSpeed's code multiplies by the GPU "
                                        "processes of every node in the job (reproduce the code, not the docs)")
        _close_to(_plain(deepspeed_host_gib(_params, _gpus, _nodes), _name), _cpu / 2**30, _name, 1e-9, "GiB",
                  hint="the larger of the offloaded fp32 state and the fp32 load peak of every GPU process in the "
                       "job, times the buffer factor", slips=_slips)
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
# added to. <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero2-offload-all-gathers-the-updated-partition --> <!-- claim: offload-builds-deepspeed-cpu-adam -->

# %% [markdown] lang="zh" en="1c266dd7bdeb"
# ## 2. 每步经过 PCIe 传输什么
#
# 按 DeepSpeed 0.19.8 的口径（读自 `stage_1_and_2.py`，并由 `zerolab.run.meter` 在实际运行中实测，见第 06 课）：使用 ZeRO-2 加 CPU 卸载时，在梯度累积边界上，每张 GPU **在 GPU 上**把归约后的梯度分片转换为 **fp32**，再拷贝到主机（每个值 4 字节），CPU 执行 Adam，然后更新后的 16 位参数分片传回来（随后由 ZeRO-2 的 all-gather 分发给其他 GPU）。ZeRO-2 在**每个微步**（micro-step）都会归约梯度，所以使用梯度累积时，每个微步还要把 16 位梯度发送到主机上的累积缓冲区；从第二个微步开始，这个缓冲区要先传回 GPU，再在其上累加。<!-- claim: zero2-offload-pcie-each-step --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero2-offload-all-gathers-the-updated-partition --> <!-- claim: offload-builds-deepspeed-cpu-adam -->

# %%
for grad_accum in (1, 4, 16):
    t = comm.traffic(P13B, 2, 8, grad_accum=grad_accum, offload_optimizer="cpu")
    print(tr(f"13B, 8 GPUs, grad_accum={grad_accum:2d}: to host {units.format_bytes(t.device_to_host_bytes)}, "
             f"to GPU {units.format_bytes(t.host_to_device_bytes)} per GPU per step"))

# %% [markdown]
# Explore it: model size, GPUs, accumulation and the host link. Where widgets cannot render, you see the static figure.

# %% [markdown] lang="zh" en="63f2e58a91e8"
# 动手试试：模型规模、GPU 数量、累积步数和主机链路。在无法显示控件的环境中，你会看到静态图。

# %%
from zerolab.lesson import widgets

widgets.offload_explorer(params="13B", world_size=8, grad_accum=4)

# %% [markdown]
# ### Exercise 3: PCIe bytes per step
#
# Write `pcie_bytes(params, gpus, grad_accum)`: for ZeRO-2 + CPU optimizer offload with fp16 training on `gpus`
# GPUs, the bytes **one GPU** moves per optimizer step in DeepSpeed 0.19.8's accounting (section 2), as
# `{"to_host": ..., "to_gpu": ...}`. Count each GPU's partition as `params / gpus` values (rounded to whole values
# with `//` counts too).
# Hidden tests compare with `comm.traffic`, so `comm.traffic` is off limits in your cell: count the bytes yourself.

# %% [markdown] lang="zh" en="364260c6798e"
# ### 练习 3：每步的 PCIe 字节数
#
# 编写 `pcie_bytes(params, gpus, grad_accum)`：在 `gpus` 张 GPU 上用 fp16 训练、ZeRO-2 加 CPU 优化器卸载时，按 DeepSpeed 0.19.8 的口径（第 2 节），**一张 GPU** 每个优化器步传输的字节数，返回 `{"to_host": ..., "to_gpu": ...}`。每张 GPU 的分片按 `params / gpus` 个值计算（用 `//` 取整到整数个值也算对）。隐藏测试会与 `comm.traffic` 比较，所以你的单元格里不能使用 `comm.traffic`：请自己数字节。

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
from zerolab.lesson.checks_source import off_limits

off_limits("pcie_bytes", ["zerolab.engine.comm.traffic", "zerolab.engine.deepspeed_traffic"], exercise="exercise 3",
           instead="count the bytes each way from section 2")
from zerolab.lesson.checks import close_to, dict_keys

answer = dict_keys(pcie_bytes(8000, 8, 1), ["to_host", "to_gpu"], "pcie_bytes(8000, 8, 1)")
assert pcie_bytes(8000, 8, 1)["to_host"] < pcie_bytes(8000, 1, 1)["to_host"], \
    "each GPU only moves the partition it owns: more GPUs, fewer bytes per GPU"
assert math.isclose(pcie_bytes(8000, 8, 1)["to_host"], 2 * pcie_bytes(8000, 8, 1)["to_gpu"]), \
    "without accumulation: compare the precision of what goes to the host with what comes back (section 2)"
assert pcie_bytes(8000, 8, 4)["to_host"] > pcie_bytes(8000, 8, 1)["to_host"], \
    "with accumulation every micro-step also sends its 16-bit gradients to the host"
_printed = comm.traffic(P13B, 2, 8, grad_accum=4, offload_optimizer="cpu")
_buffer = 2 * P13B / 8  # one 16-bit copy of a GPU's partition
close_to(pcie_bytes(P13B, 8, 4)["to_host"], _printed.device_to_host_bytes, "pcie_bytes(13B, 8, 4)['to_host']", 1e-9,
         "bytes", bits=True, hint="13B, 8 GPUs, grad_accum=4: to_host should match the figure printed above (fp32 at "
                                  "the boundary, 16-bit before)",
         slips={(_printed.device_to_host_bytes - 4 * _buffer) / _printed.device_to_host_bytes:
                "leaves out the micro-steps: with accumulation each one also sends its 16-bit gradients to the host"})
close_to(pcie_bytes(P13B, 8, 4)["to_gpu"], _printed.host_to_device_bytes, "pcie_bytes(13B, 8, 4)['to_gpu']", 1e-9,
         "bytes", bits=True, hint="13B, 8 GPUs, grad_accum=4: to_gpu should match the figure printed above",
         slips={(_printed.host_to_device_bytes + _buffer) / _printed.host_to_device_bytes:
                "counts the accumulation buffer coming back on every micro-step; on the first micro-step it is empty, "
                "so it comes back one time fewer than there are micro-steps",
                (_printed.host_to_device_bytes - 3 * _buffer) / _printed.host_to_device_bytes:
                "leaves out the accumulation buffer: from the second micro-step on it comes back to the GPU to be "
                "added to"})
### BEGIN HIDDEN TESTS
from zerolab.engine import comm as _comm
from zerolab.lesson.checks import close_to as _close_to, dict_keys as _dict_keys, plain as _plain

for _params in (1_300_000_000, 13_000_000_001):
    for _gpus in (8, 24, 1):
        for _gas in (3, 16, 1, 2):
            _name = f"pcie_bytes({_params}, {_gpus}, {_gas})"
            _got = _dict_keys(_plain(pcie_bytes(_params, _gpus, _gas), _name), ["to_host", "to_gpu"], _name)
            _want = _comm.traffic(_params, 2, _gpus, grad_accum=_gas, offload_optimizer="cpu")
            _buffer = 2 * _params / _gpus  # one 16-bit copy of the partition
            _to_host, _to_gpu = {}, {}
            if _gpus > 1:
                _to_host[_gpus] = _to_gpu[_gpus] = "counted the whole model; each GPU moves only its partition"
            if _gas > 1:
                _to_gpu[(_want.host_to_device_bytes + _buffer) / _want.host_to_device_bytes] = (
                    "counts the accumulation buffer coming back on every micro-step; on the first micro-step it is "
                    "empty, so it comes back one time fewer than there are micro-steps")
                _to_gpu[(_want.host_to_device_bytes - (_gas - 1) * _buffer) / _want.host_to_device_bytes] = (
                    "leaves out the accumulation buffer: from the second micro-step on it comes back to the GPU to "
                    "be added to")
                _to_host[(_want.device_to_host_bytes - _gas * _buffer) / _want.device_to_host_bytes] = (
                    "leaves out the micro-steps: with accumulation each one also sends its 16-bit gradients to the "
                    "host")
            _close_to(_got["to_host"], _want.device_to_host_bytes, f"{_name}['to_host']", 1e-7, "bytes", bits=True,
                      hint="at the boundary the gradient partition goes down as fp32; with accumulation every "
                           "micro-step also sends its 16-bit gradients", slips=_to_host)
            _close_to(_got["to_gpu"], _want.host_to_device_bytes, f"{_name}['to_gpu']", 1e-7, "bytes", bits=True,
                      hint="the updated 16-bit partition comes back once per step, and with accumulation the "
                           "buffer comes back to be added to", slips=_to_gpu)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Does offload pay?
#
# ### A common claim: "PCIe is ~16GB/s vs GPU memory 900GB/s"
#
# True only for one pairing: PCIe 3.0 next to a V100's HBM2. The host link depends on the PCIe generation
# (below, one direction, x16), and GPU memory bandwidth on the GPU. The point stands: the host link is one or two
# orders of magnitude slower than GPU memory, so offload must move as little as possible and overlap it.

# %% [markdown] lang="zh" en="80d4715104e0"
# ## 3. 卸载划算吗？
#
# ### 一个常见说法："PCIe 约 16GB/s，而显存带宽是 900GB/s"
#
# 这只对一种组合成立：PCIe 3.0 搭配 V100 的 HBM2。主机链路的带宽取决于 PCIe 代数（下面是单向、x16 的数字），显存带宽则取决于 GPU。但结论没错：主机链路比显存慢一到两个数量级，所以卸载必须尽量少传数据，并让传输与计算重叠。

# %%
for name in ("pcie3", "pcie4", "pcie5"):
    print(tr(f"{name}: {comm.bandwidth(name) / GB:.2f} GB/s per direction"))

# %% [markdown]
# ### Exercise 4: seconds on the host link
#
# Write `pcie_seconds(params, gpus, grad_accum, link)`: the seconds one GPU spends moving its offload traffic per
# optimizer step over `link` (a name such as `"pcie4"`; use `comm.bandwidth(link)` for bytes per second), if
# nothing overlaps. The bytes are those of ZeRO-2 with CPU optimizer offload in DeepSpeed 0.19.8's accounting:
# your `pcie_bytes` from Exercise 3, or, so that this exercise stands on its own,
# `comm.traffic(params, 2, gpus, grad_accum=grad_accum, offload_optimizer="cpu")` (its `device_to_host_bytes` and
# `host_to_device_bytes`). *Accepted:* a float or int of seconds, within 1e-6 relative. Hidden tests compare with
# `comm.transfer_time` of `comm.traffic`, so `comm.transfer_time` and `comm.step_time` are off limits in your cell.
# If your `pcie_bytes` is wrong, this exercise is graded with the course's in its place: a mistake costs points once.

# %% [markdown] lang="zh" en="4b8740560a61"
# ### 练习 4：主机链路上的耗时（秒）
#
# 编写 `pcie_seconds(params, gpus, grad_accum, link)`：在没有任何重叠的情况下，一张 GPU 每个优化器步在 `link`（如 `"pcie4"` 这样的名字；用 `comm.bandwidth(link)` 得到每秒字节数）上传输其卸载流量所花的秒数。字节数按 DeepSpeed 0.19.8 口径下、ZeRO-2 加 CPU 优化器卸载计算：可以用你在练习 3 中写的 `pcie_bytes`，也可以为了让本练习自成一体，使用 `comm.traffic(params, 2, gpus, grad_accum=grad_accum, offload_optimizer="cpu")`（它的 `device_to_host_bytes` 和 `host_to_device_bytes`）。*可接受的答案：* 一个以秒为单位的 float 或 int，相对误差在 1e-6 以内。隐藏测试会与 `comm.transfer_time` 按 `comm.traffic` 的字节数算出的时间比较，所以你的单元格里不能使用 `comm.transfer_time` 和 `comm.step_time`。如果你的 `pcie_bytes` 有错，本练习会换用课程自带的 `pcie_bytes` 来评分：同一个错误只扣一次分。

# %% nbgrader={"grade": false, "grade_id": "ex4_pcie_seconds", "locked": false, "schema_version": 3, "solution": true, "task": false}
def pcie_seconds(params, gpus, grad_accum, link):
    """Seconds per optimizer step that one GPU's offload traffic takes on the host link, without overlap."""
    ### BEGIN SOLUTION
    moved = comm.traffic(params, 2, gpus, grad_accum=grad_accum, offload_optimizer="cpu")  # DeepSpeed 0.19.8's
    return (moved.device_to_host_bytes + moved.host_to_device_bytes) / comm.bandwidth(link)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex4_pcie_seconds", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_cascade import with_reference
from zerolab.lesson.checks_source import off_limits

off_limits("pcie_seconds", ["zerolab.engine.comm.transfer_time", "zerolab.engine.comm.step_time"], exercise="exercise 4",
           allowed=["zerolab.engine.comm.traffic", "zerolab.engine.comm.bandwidth"], earlier=["pcie_bytes"],
           instead="divide the bytes by comm.bandwidth(link) yourself")


def _course_pcie_bytes(params, gpus, grad_accum):
    moved = comm.traffic(params, 2, gpus, grad_accum=grad_accum, offload_optimizer="cpu")
    return {"to_host": moved.device_to_host_bytes, "to_gpu": moved.host_to_device_bytes}


_earlier = with_reference("pcie_bytes", _course_pcie_bytes, "exercise 3", "exercise 4")
assert pcie_seconds(P13B, 8, 1, "pcie3") > pcie_seconds(P13B, 8, 1, "pcie4"), "a faster link takes less time"
assert math.isclose(pcie_seconds(P13B, 8, 1, "pcie3"), 2 * pcie_seconds(P13B, 8, 1, "pcie4"), rel_tol=0.02), \
    "PCIe 4.0 is about twice as fast as PCIe 3.0: use comm.bandwidth(link)"
_earlier.note()
### BEGIN HIDDEN TESTS
from zerolab.engine import comm as _comm
from zerolab.lesson.checks import close_to as _close_to, plain as _plain

for _gpus, _gas in ((8, 8), (16, 2), (1, 1)):
    for _link in ("pcie3", "pcie5", "20GB/s"):
        _t = _comm.traffic(7_000_000_000, 2, _gpus, grad_accum=_gas, offload_optimizer="cpu")
        _both = _t.device_to_host_bytes + _t.host_to_device_bytes
        _want = _comm.transfer_time(_both, _link)
        _name = f"pcie_seconds(7e9, {_gpus}, {_gas}, {_link!r})"
        _close_to(_plain(pcie_seconds(7_000_000_000, _gpus, _gas, _link), _name), _want, _name, 1e-6, "seconds",
                  bits=True, hint="one GPU's offload bytes both ways, over the link's bytes per second, nothing "
                                  "overlapping",
                  slips={_t.device_to_host_bytes / _both: "counted one direction only; without overlap the bytes "
                                                           "back to the GPU take time on the link too",
                         _t.host_to_device_bytes / _both: "counted one direction only; without overlap the bytes "
                                                           "to the host take time on the link too"})
_earlier.note()
### END HIDDEN TESTS

# %% [markdown]
# ### A common claim: "CPU offload slows training 2-5x"
#
# There is no fixed factor, and no DeepSpeed source gives one (its ZeRO-Offload post claims "competitive
# throughput"). The cost is the host traffic that does not hide behind compute, plus the CPU Adam step, and both
# shrink relative to compute as the batch (compute per step) grows. Below: the step time of ZeRO-2 on 8 GPUs with
# and without offload, for a short and a long compute time (CPU Adam's own time is not modelled):

# %% [markdown] lang="zh" en="53af6e329be9"
# ### 一个常见说法："CPU 卸载会让训练慢 2-5 倍"
#
# 不存在固定的倍数，DeepSpeed 的资料里也没有给出过（它介绍 ZeRO-Offload 的文章说的是"具有竞争力的吞吐量"）。代价来自没能被计算掩盖的主机流量，加上 CPU 上的 Adam 步；随着 batch（每步的计算量）增大，这两者相对于计算都会变小。下面是 ZeRO-2 在 8 张 GPU 上开启和不开启卸载时的每步耗时，分别对应较短和较长的计算时间（没有对 CPU Adam 本身的耗时建模）：

# %%
for compute_s in (0.5, 8.0):
    base = comm.step_time(comm.traffic(P13B, 2, 8), compute_s, link="ib-hdr", overlap_comm=True)
    off = comm.step_time(comm.traffic(P13B, 2, 8, offload_optimizer="cpu"), compute_s, link="ib-hdr",
                         overlap_comm=True)
    print(tr(f"compute {compute_s:3.1f} s: step {base.total_s:5.2f} s without offload, {off.total_s:5.2f} s with "
             f"(x{off.total_s / base.total_s:.2f})"))

# %% [markdown]
# ## 4. pin_memory
#
# `offload_optimizer.pin_memory` page-locks the host buffers so copies between GPU and host run asynchronously at
# full bandwidth and can overlap with compute. In DeepSpeed 0.19.8 it defaults to **true**; it defaulted to false
# until PR #8207 (August 2026), so older tutorials tell you to switch it on. Pinning makes no second copy: the
# buffers counted above are the ones page-locked. <!-- claim: pinned-buffers-round-to-a-power-of-two --> But on
# DeepSpeed's default path the buffer comes from torch's pinned allocator, which rounds every block up to the next
# power of two: a 6.5 GB gradient partition takes 8.6 GB of RAM (`zerolab fit` counts it;
# `DS_PIN_MEMORY_BACKEND=native` pins just the size asked). And pinned pages cannot be swapped out: on hosts with
# little RAM (Colab, WSL2) or a tight `ulimit -l` they are a common cause of the process being killed (exit code
# -9). There, set `"pin_memory": false` explicitly, or keep more on the GPU.
# <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: offload-pin-memory-pins-the-host-buffers --> <!-- claim: native-pin-backend-pins-the-size-asked -->

# %% [markdown] lang="zh" en="036301911acd"
# ## 4. pin_memory
#
# `offload_optimizer.pin_memory` 把主机缓冲区设为锁页内存，这样 GPU 与主机之间的拷贝就能以满带宽异步进行，并与计算重叠。在 DeepSpeed 0.19.8 中它默认为 **true**；直到 PR #8207（2026 年 8 月）之前它默认是 false，所以较早的教程会让你手动打开它。锁页不会多出一份拷贝：被锁页的就是上面计入的那些缓冲区。<!-- claim: pinned-buffers-round-to-a-power-of-two -->但在 DeepSpeed 的默认路径上，这些缓冲区来自 torch 的锁页内存分配器，它会把每一块向上取整到 2 的幂：一个 6.5 GB 的梯度分片要占 8.6 GB 内存（`zerolab fit` 计入了这一点；`DS_PIN_MEMORY_BACKEND=native` 则只锁定所请求的大小）。而且锁页内存不能被换出：在内存较小的主机（Colab、WSL2）上，或者 `ulimit -l` 较紧时，它是进程被杀掉（退出码 -9）的常见原因。这时请显式设置 `"pin_memory": false`，或者在 GPU 上多保留一些。 <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: offload-pin-memory-pins-the-host-buffers --> <!-- claim: native-pin-backend-pins-the-size-asked -->

# %% [markdown]
# ## Summary
#
# - ZeRO-Offload moves the fp32 optimizer state (and, at every stage, ZeRO-1 too, the gradient partition) to host
#   RAM and runs Adam on the CPU; the GPU keeps the 16-bit parameters. NVMe and parameter offload need ZeRO-3.
# - Host RAM is the number to check: DeepSpeed's estimate grows with the GPU processes per node (fp32 load peak).
# - Per step each GPU sends its gradient partition to the host on every micro-step and gets its parameter
#   partition back once per optimizer step.
# - Whether offload pays depends on compute per step versus host traffic and CPU speed: no fixed slowdown factor.
# - `pin_memory` defaults to true in 0.19.8: fast, but it locks host RAM, rounded up to a power of two a buffer;
#   turn it off on small hosts.
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
# NVMe, and trades host RAM for much slower storage traffic. <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: offload-moves-the-gradient-partition-at-stage-1 --> <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: pinned-buffers-round-to-a-power-of-two --> <!-- claim: offload-pin-memory-pins-the-host-buffers --> <!-- claim: torch-builds-modules-in-fp32 -->

# %% [markdown] lang="zh" en="330455732c42"
# ## 小结
#
# - ZeRO-Offload 把 fp32 优化器状态（以及梯度分片：每个 stage 都是，ZeRO-1 也一样）移到主机内存，并在 CPU 上执行 Adam；GPU 保留 16 位参数。NVMe 卸载和参数卸载需要 ZeRO-3。
# - 要检查的是主机内存：DeepSpeed 的估算随每个节点的 GPU 进程数增长（fp32 加载峰值）。
# - 每一步中，每张 GPU 在每个微步都把自己的梯度分片发送到主机，并在每个优化器步取回一次自己的参数分片。
# - 卸载划不划算，取决于每步的计算量与主机流量以及 CPU 速度之间的对比：不存在固定的减速倍数。
# - `pin_memory` 在 0.19.8 中默认为 true：速度快，但会锁住主机内存，每个缓冲区还要向上取整到 2 的幂；在小内存主机上请关掉它。
#
# ## 面试题
#
# **问：使用 ZeRO-2 加 CPU 卸载时，什么留在 GPU 上，什么移到 CPU 上？**
# 答：16 位参数（以及激活值）留在 GPU 上。fp32 主权重、动量和方差存放在主机内存中，GPU 的梯度分片也被拷贝过去，由 CPU 执行 Adam 步。
#
# **问：你的 ZeRO-2 卸载任务在创建优化器时被 -9 杀掉了。为什么？**
# 答：是主机内存不够，不是显存：每个进程都以 fp32 构建模型，卸载的状态每个参数至少 16 字节，而锁页内存不能被换出。查看 DeepSpeed 对主机内存的估算，在小内存主机上设置 `pin_memory: false`，或者减少每个节点的进程数。
#
# **问：每步有多少数据经过 PCIe？梯度累积会怎样改变它？**
# 答：在 DeepSpeed 0.19.8 中，每张 GPU 在累积边界以 fp32（每个值 4 字节）发送自己的梯度分片，并在每个优化器步接收一次自己的 16 位参数分片；使用梯度累积时，每个微步的 16 位梯度还要发送到主机缓冲区，并从第二个微步起传回 GPU 进行累加（练习 3）。
#
# **问：CPU 卸载总是慢 2-5 倍吗？**
# 答：不存在固定的倍数。它取决于 batch 大小（每步的计算量）、PCIe 代数、是否使用锁页内存以及 CPU 核数；DeepSpeed 在自己的基准测试中报告的是具有竞争力的吞吐量。
#
# **问：什么时候会选择 NVMe 卸载？**
# 答：当主机内存放不下优化器状态（或参数）时：它需要 ZeRO-3（ZeRO-Infinity）和高速 NVMe，用慢得多的存储流量换取主机内存。 <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: offload-moves-the-gradient-partition-at-stage-1 --> <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: pinned-buffers-round-to-a-power-of-two --> <!-- claim: offload-pin-memory-pins-the-host-buffers --> <!-- claim: torch-builds-modules-in-fp32 -->
