# %% [markdown]
# # Lesson 04: Writing the config
#
# Everything lessons 01 to 03 computed is switched on or off by one JSON file: the DeepSpeed config
# (`ds_config`). In this lesson you write one, field by field, and let DeepSpeed's own config classes
# and zerolab tell you what it does.

# %% [markdown] lang="zh" en="38659e8a511c"
# # 第 04 课：编写配置文件
#
# 第 01 到 03 课算出的所有东西，都由一个 JSON 文件来开关：DeepSpeed 的配置文件（`ds_config`）。本课你将逐个字段地写出一份配置，再让 DeepSpeed 自己的配置类和 zerolab 告诉你它做了什么。

# %% [markdown]
# ## Learning goals
#
# After this lesson you can
#
# - write `build_deepspeed_config()`: ZeRO-2, `overlap_comm`, optimizer offload to pinned CPU memory;
# - say what every field of that config does and what DeepSpeed 0.19.8 uses when you leave it out;
# - get the batch arithmetic right (`train_batch_size = micro batch x accumulation steps x data-parallel GPUs`)
#   and avoid the floor-division trap;
# - pick fp16 or bf16 for a GPU;
# - turn the config into a ZeRO-3 config with parameter offload;
# - predict the config's memory per GPU with zerolab, and correct the popular figures.
#
# There are four graded exercises. Each is followed by a test cell. The visible asserts give you instant
# feedback; **hidden tests** run when your notebook is graded: they feed your answer to DeepSpeed's own config
# classes, check that it is made of plain JSON values, and try more inputs. <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: batch-world-size-is-data-parallel -->

# %% [markdown] lang="zh" en="c0e20a5ba395"
# ## 学习目标
#
# 学完本课，你将能够：
#
# - 编写 `build_deepspeed_config()`：ZeRO-2、`overlap_comm`、把优化器卸载（offload）到锁页的 CPU 内存；
# - 说出这份配置中每个字段的作用，以及省略它时 DeepSpeed 0.19.8 使用的默认值；
# - 算对批大小（`train_batch_size = micro batch x accumulation steps x data-parallel GPUs`，即微批次大小 × 梯度累积步数 × 数据并行的 GPU 数），并避开向下取整除法的陷阱；
# - 为一块 GPU 选择 fp16 或 bf16；
# - 把配置改成带参数卸载的 ZeRO-3 配置；
# - 用 zerolab 预测这份配置每张 GPU 需要的显存，并纠正流传甚广的数字。
#
# 本课共有四个计分练习，每个练习后面都跟着一个测试单元格。可见的 assert 会立即给你反馈；**隐藏测试**在你的 notebook 评分时运行：它们把你的答案交给 DeepSpeed 自己的配置类，检查它是否只由普通的 JSON 值组成，并尝试更多输入。 <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: batch-world-size-is-data-parallel -->

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import copy
import json

import torch
from zerolab.config import import_deepspeed

import_deepspeed()  # DeepSpeed's start-up log stays off the output
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig, DeepSpeedZeroOffloadParamConfig

from zerolab.engine import comm, units
from zerolab.config import check_config, config_effect
from zerolab.base.i18n import tr

# %% [markdown]
# ## The fields of the skeleton
#
# The config below is the skeleton many DeepSpeed tutorials share. Before you fill it in, here is what
# each given field does.
#
# - `optimizer`: AdamW with its hyper-parameters. DeepSpeed builds the optimizer itself from this block. When the
#   optimizer is offloaded to the CPU, an `Adam`/`AdamW` entry becomes `DeepSpeedCPUAdam`, a C++ Adam that runs on
#   the host (it is compiled the first time it is used).
# - `fp16`: 16-bit training with **dynamic loss scaling**. `loss_scale: 0` means dynamic. The scale starts at
#   2 to the power `initial_scale_power`. When a step overflows, the step is skipped; the `hysteresis`-th
#   overflow halves the scale (and so does every further one until the scale next doubles), never below
#   `min_loss_scale` (at the floor DeepSpeed stops the run with "Current loss scale already at minimum"). After
#   `loss_scale_window` clean steps in a row, the next clean step doubles the scale and restores the hysteresis.
# - `train_batch_size`, `train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`: the global batch, the batch
#   one GPU runs forward and backward at a time, and how many of those micro-steps are summed before one optimizer
#   step. DeepSpeed insists that the first equals the product of the other two and the number of data-parallel GPUs.
# - `zero_optimization.contiguous_gradients`: copy gradients into one pre-allocated buffer as they are produced, so
#   memory does not fragment (the paper's "M_D").
#
# The three fields you will add:
#
# - `stage`: 1 partitions the optimizer states, 2 also the gradients, 3 also the parameters (lesson 01).
# - `overlap_comm`: reduce gradient buckets on a side stream while the backward pass keeps computing (lesson 03).
# - `offload_optimizer`: `device: "cpu"` keeps the fp32 master weights, gradients and Adam moments in host memory and
#   runs the optimizer step there; `pin_memory: true` page-locks that host memory so copies to and from the GPU
#   are asynchronous and run at full PCIe speed (lesson 02).
#
# What does DeepSpeed 0.19.8 use when a field is missing? Ask its own config classes: <!-- claim: optimizer-built-from-the-config-block --> <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: cpu-adam-compiled-on-first-use --> <!-- claim: fp16-loss-scale-zero-is-dynamic --> <!-- claim: bf16-trains-without-loss-scaling --> <!-- claim: fp16-scale-starts-at-2-to-the-initial-scale-power --> <!-- claim: fp16-overflow-skips-the-step --> <!-- claim: fp16-hysteresis-then-halving-to-the-floor --> <!-- claim: fp16-scale-doubles-after-the-window --> <!-- claim: accumulation-steps-make-one-optimizer-step --> <!-- claim: batch-world-size-is-data-parallel --> <!-- claim: contiguous-gradients-copy-into-the-bucket --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: offload-pin-memory-pins-the-host-buffers -->

# %% [markdown] lang="zh" en="bdb8f83b97dd"
# ## 骨架中的字段
#
# 下面这份配置是许多 DeepSpeed 教程共用的骨架。在填写之前，先看看已经给出的每个字段是做什么的。
#
# - `optimizer`：AdamW 及其超参数。DeepSpeed 根据这个块自己构建优化器。当优化器被卸载到 CPU 时，`Adam`/`AdamW` 会换成 `DeepSpeedCPUAdam`，这是一个在主机上运行的 C++ 版 Adam（首次使用时才编译）。
# - `fp16`：带**动态损失缩放**的 16 位训练。`loss_scale: 0` 表示动态缩放。缩放因子的初始值是 2 的 `initial_scale_power` 次方。某一步出现溢出时，这一步会被跳过；第 `hysteresis` 次溢出时缩放因子减半（此后每次溢出都会再减半，直到缩放因子下一次翻倍），但不会低于 `min_loss_scale`（到了下限，DeepSpeed 会报 "Current loss scale already at minimum" 并终止训练）。连续 `loss_scale_window` 步没有溢出之后，下一个没有溢出的步会让缩放因子翻倍，并恢复 `hysteresis` 计数。
# - `train_batch_size`、`train_micro_batch_size_per_gpu`、`gradient_accumulation_steps`：全局批大小；单张 GPU 一次前向、反向处理的批大小；以及一次优化器步之前累加多少个这样的微步。DeepSpeed 要求第一个等于后两个与数据并行 GPU 数的乘积。
# - `zero_optimization.contiguous_gradients`：梯度一产生就复制到一块预先分配好的连续缓冲区里，避免显存碎片化（即论文中的 “M_D”）。
#
# 你要添加的三个字段：
#
# - `stage`：1 切分优化器状态，2 再切分梯度，3 再切分参数（第 01 课）。
# - `overlap_comm`：在反向传播继续计算的同时，在单独的 CUDA 流上归约梯度桶（第 03 课）。
# - `offload_optimizer`：`device: "cpu"` 把 fp32 主权重、梯度和 Adam 的动量放在主机内存中，并在那里执行优化器步；`pin_memory: true` 把这块主机内存锁页，使得与 GPU 之间的拷贝可以异步进行，并跑满 PCIe 带宽（第 02 课）。
#
# 字段缺省时，DeepSpeed 0.19.8 用的是什么值？问它自己的配置类： <!-- claim: optimizer-built-from-the-config-block --> <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: cpu-adam-compiled-on-first-use --> <!-- claim: fp16-loss-scale-zero-is-dynamic --> <!-- claim: bf16-trains-without-loss-scaling --> <!-- claim: fp16-scale-starts-at-2-to-the-initial-scale-power --> <!-- claim: fp16-overflow-skips-the-step --> <!-- claim: fp16-hysteresis-then-halving-to-the-floor --> <!-- claim: fp16-scale-doubles-after-the-window --> <!-- claim: accumulation-steps-make-one-optimizer-step --> <!-- claim: batch-world-size-is-data-parallel --> <!-- claim: contiguous-gradients-copy-into-the-bucket --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: offload-pin-memory-pins-the-host-buffers -->

# %%
for stage in (1, 2, 3):
    zero = DeepSpeedZeroConfig(stage=stage)
    print(f"stage {stage}: overlap_comm={zero.overlap_comm}  contiguous_gradients={zero.contiguous_gradients}  "
          f"reduce_bucket_size={zero.reduce_bucket_size:.0e}  allgather_bucket_size={zero.allgather_bucket_size:.0e}")
print(tr("offload_optimizer.pin_memory default:"), DeepSpeedZeroOffloadOptimizerConfig().pin_memory)
print(tr("offload_param.pin_memory default:    "), DeepSpeedZeroOffloadParamConfig().pin_memory)

# %% [markdown]
# Two defaults that many tutorials get wrong:
#
# - **`overlap_comm` depends on the stage**: it is off for stages 0 to 2 and on for stage 3 (a validator in
#   `deepspeed/runtime/zero/config.py` sets it to `stage == 3` when you leave it out). The docs table still says
#   `false`. For ZeRO-2 you have to switch it on yourself.
# - **`pin_memory` now defaults to true** (since a 2026 DeepSpeed change, see References). Older tutorials say you must switch it on; with
#   0.19.8 you must switch it *off* on hosts with little RAM (such as free Colab), because pinned memory cannot be
#   paged out. Writing it explicitly, as the exercise asks, makes the config mean the same on every version.
#
# Note also that the bucket sizes count **elements**, not bytes.
# <!-- claim: overlap-comm-default-by-stage --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: bucket-sizes-count-elements -->

# %% [markdown] lang="zh" en="298f16859195"
# 有两个默认值，很多教程都写错了：
#
# - **`overlap_comm` 的默认值取决于 stage**：stage 0 到 2 默认关闭，stage 3 默认开启（你省略它时，`deepspeed/runtime/zero/config.py` 中的一个校验器会把它设为 `stage == 3`）。文档的表格仍然写着 `false`。用 ZeRO-2 时，你得自己把它打开。
# - **`pin_memory` 现在默认为 true**（来自 DeepSpeed 2026 年的一次修改，见参考资料）。旧教程说你必须手动打开它；而在 0.19.8 中，在内存很小的主机上（比如免费版 Colab）你反而必须把它*关掉*，因为锁页内存不能被换出。按练习的要求显式写出这个字段，能让配置在所有版本上含义一致。
#
# 还要注意，桶大小的单位是**元素个数**，不是字节。 <!-- claim: overlap-comm-default-by-stage --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: bucket-sizes-count-elements -->

# %% [markdown]
# ## Exercise 1: `build_deepspeed_config()` (4 points)
#
# Complete the three TODOs: ZeRO stage 2, `overlap_comm` on, and the optimizer offloaded to CPU with pinned
# memory. Write them into the `zero_optimization` dict (uncomment and fill in the `???`), or set them where the
# stub is; then delete the stub's `raise`. Keep every given field as it is.
#
# *Accepted:* any way of writing it (inside the dict, or set after it), as long as the values are JSON values of the
# right type: the `int` 2, the `bool` `True` (not the string `"true"`), the string `"cpu"` in lower case.
#
# The visible test asserts what the original tutorial asserted, and that the given fields are unchanged. Hidden tests
# check the same things through DeepSpeed's own `DeepSpeedConfig` and as plain JSON data. The course's reference
# configs (`zerolab.config.reference`) are off limits in your cell.

# %% [markdown] lang="zh" en="4e6a26d22a91"
# ## 练习 1：`build_deepspeed_config()`（4 分）
#
# 完成三个 TODO：ZeRO stage 2、打开 `overlap_comm`、把优化器卸载到 CPU 并使用锁页内存。把它们写进 `zero_optimization` 字典（取消注释并填上 `???`），或者在存根代码的位置设置；然后删掉存根中的 `raise`。所有已给出的字段保持不变。
#
# *可接受的答案：* 任何写法都行（写在字典里，或者之后再设置），只要值是类型正确的 JSON 值：`int` 类型的 2，`bool` 类型的 `True`（不是字符串 `"true"`），小写的字符串 `"cpu"`。
#
# 可见测试检查的正是原教程所断言的内容，以及已给出的字段没有被改动。隐藏测试通过 DeepSpeed 自己的 `DeepSpeedConfig` 以及作为普通 JSON 数据，检查同样的内容。你的单元格里不能使用课程的参考配置（`zerolab.config.reference`）。

# %% nbgrader={"grade": false, "grade_id": "ex1_build_config", "locked": false, "schema_version": 3, "solution": true, "task": false}
def build_deepspeed_config():
    """Return the DeepSpeed config: ZeRO-2, overlap_comm, optimizer offload to pinned CPU memory."""
    ds_config = {
        # AdamW, learning rate 3e-4
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": 3e-4,
                "betas": [0.9, 0.95],
                "eps": 1e-8,
                "weight_decay": 0.1,
            },
        },
        # fp16 mixed precision, dynamic loss scaling
        "fp16": {
            "enabled": True,
            "loss_scale": 0,
            "loss_scale_window": 1000,
            "initial_scale_power": 16,
            "hysteresis": 2,
            "min_loss_scale": 1,
        },
        # TODO 1: the ZeRO stage (2 partitions optimizer states and gradients)
        # TODO 2: overlap gradient communication with the backward pass
        # TODO 3: offload the optimizer to CPU memory, pinned
        "zero_optimization": {
            # "stage": ???,
            # "overlap_comm": ???,
            "contiguous_gradients": True,
            # "offload_optimizer": {
            #     "device": ???,
            #     "pin_memory": ???,
            # },
        },
        # batch per GPU and gradient accumulation
        "train_batch_size": 32,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 8,
    }
    ### BEGIN SOLUTION
    zero = ds_config["zero_optimization"]
    zero["stage"] = 2
    zero["overlap_comm"] = True
    zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    ### END SOLUTION
    return ds_config


# %% nbgrader={"grade": true, "grade_id": "test_ex1_build_config", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("build_deepspeed_config", ["zerolab.config.reference"], exercise="exercise 1",
           instead="fill in the three settings yourself")
from zerolab.lesson.checks import dict_keys, same_value
from zerolab.config.reference import zero2_offload

config = build_deepspeed_config()
assert type(config) is dict, f"wrong type: build_deepspeed_config() should return a dict, got {type(config).__name__}"
print(json.dumps(config, indent=4, default=repr))
assert "zero_optimization" in config, "missing key: the config has no zero_optimization block"
zero = config["zero_optimization"]
for _key in ("stage", "overlap_comm", "offload_optimizer"):
    assert _key in zero, f"missing key: zero_optimization has no {_key!r}"
same_value(zero["stage"], 2, "zero_optimization.stage", "ZeRO-2 partitions optimizer states and gradients")
same_value(zero["overlap_comm"], True, "zero_optimization.overlap_comm", "for stage 2 it is off unless you switch it on")
offload = zero["offload_optimizer"]
assert type(offload) is dict, f"wrong type: zero_optimization.offload_optimizer should be a dict, got {type(offload).__name__}"
for _key in ("device", "pin_memory"):
    assert _key in offload, f"missing key: zero_optimization.offload_optimizer has no {_key!r}"
same_value(offload["device"], "cpu", "zero_optimization.offload_optimizer.device", "the optimizer should go to CPU memory")
same_value(offload["pin_memory"], True, "zero_optimization.offload_optimizer.pin_memory",
           "pinned memory makes the GPU<->CPU copies asynchronous")
_given = zero2_offload()
for _key in ("optimizer", "fp16", "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
    assert _key in config, f"missing key: the given field {_key!r} was removed"
    assert config[_key] == _given[_key], f"the given field {_key!r} was changed: keep it as it is (this config is for one GPU)"
assert zero.get("contiguous_gradients") is True, "the given zero_optimization.contiguous_gradients was removed or changed"
print(tr("Visible checks passed: ZeRO-2 + overlap_comm + CPU optimizer offload with pinned memory, given fields kept."))
### BEGIN HIDDEN TESTS
import copy
from deepspeed.runtime.config import DeepSpeedConfig
from zerolab.lesson.checks import plain
from zerolab.config import check_config

answer = plain(build_deepspeed_config(), "build_deepspeed_config()")
assert type(answer["zero_optimization"]["stage"]) is int, "wrong type: zero_optimization.stage should be an int"
report = check_config(copy.deepcopy(answer), world_size=1)
assert report.valid, f"the config doctor finds errors: {report.errors}"
try:
    accepted = DeepSpeedConfig(copy.deepcopy(answer))
except Exception as error:
    raise AssertionError(f"DeepSpeed rejects the config: {error}")
assert accepted.zero_optimization_stage == 2, "DeepSpeed does not read stage 2 from the config"
assert accepted.zero_config.overlap_comm is True, "DeepSpeed does not read overlap_comm=True"
assert accepted.zero_config.offload_optimizer.device == "cpu", "DeepSpeed does not see the CPU optimizer offload"
assert accepted.zero_config.offload_optimizer.pin_memory is True, "DeepSpeed does not see pin_memory=True"
assert answer["train_batch_size"] == answer["train_micro_batch_size_per_gpu"] * answer["gradient_accumulation_steps"], \
    "the batch fields do not multiply out on one GPU"
from zerolab.config.reference import zero2_offload

for key, value in zero2_offload().items():
    if key != "zero_optimization":
        assert answer.get(key) == value, f"the given field {key!r} was changed or removed"
assert answer["zero_optimization"].get("contiguous_gradients") is True, "contiguous_gradients was removed or changed"
### END HIDDEN TESTS

# %% [markdown]
# ## What this config does to memory
#
# How much GPU memory does this config need for a 13B model on 8 GPUs? zerolab computes the model states (parameters,
# gradients, optimizer states) in both accountings from lesson 01: the ZeRO paper's (K = 12 bytes of optimizer
# state per parameter) and DeepSpeed's own estimator, which also counts 4 bytes of partitioned fp32 gradients.
# (DeepSpeed 0.18.3 and later can keep the master weights and Adam's moments in bf16, K = 6, and its Muon keeps one
# bf16 momentum instead of Adam's two fp32 moments for the matrices it steps, K = 6 for them too: this config does
# neither; `zerolab estimate --help` shows how to count both.) <!-- claim: bf16-master-and-moments-make-k-6 --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: muon-momentum-in-the-gradient-dtype -->

# %% [markdown] lang="zh" en="0e65f5931352"
# ## 这份配置对显存的影响
#
# 对一个 13B 模型、8 张 GPU，这份配置需要多少显存？zerolab 按第 01 课的两种口径计算模型状态（参数、梯度、优化器状态）：ZeRO 论文的口径（每个参数 K = 12 字节优化器状态），以及 DeepSpeed 自己的估算函数，后者还额外计入 4 字节切分后的 fp32 梯度。（DeepSpeed 0.18.3 及之后的版本可以把主权重和 Adam 的动量保存为 bf16，K = 6；它的 Muon 对所更新的矩阵只保存一份 bf16 动量，而不是 Adam 的两份 fp32 动量，这些矩阵的 K 也是 6：这份配置两样都没有用；`zerolab estimate --help` 说明了怎样计算这两种情况。）<!-- claim: bf16-master-and-moments-make-k-6 --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: muon-momentum-in-the-gradient-dtype -->

# %%
from zerolab.lesson.checks import learner_value
from zerolab.config import reference

PARAMS = units.parse_count("13B")
GPUS = 8
config = reference.zero2_offload()  # the course's answer; yours is added below when it runs
without_offload = copy.deepcopy(config)
del without_offload["zero_optimization"]["offload_optimizer"]
rows = [("ZeRO-2", without_offload), (tr("ZeRO-2 + CPU optimizer offload"), config)]
yours = learner_value(build_deepspeed_config)
if yours is not None and learner_value(config_effect, yours, PARAMS, GPUS) is not None:
    rows.append((tr("your build_deepspeed_config()"), yours))
for label, cfg in rows:
    for accounting in ("paper", "deepspeed"):
        e = config_effect(cfg, params=PARAMS, gpus_per_node=GPUS, accounting=accounting).memory
        print(tr(f"{label:31} {accounting:9}: GPU {units.format_bytes(e.gpu_bytes, 'GB'):>9} "
                 f"({units.format_bytes(e.gpu_bytes, 'GiB')})   host per node {units.format_bytes(e.cpu_bytes, 'GB')}"))

# %% [markdown]
# > **Common wrong figures.** "ZeRO-2 needs about 36 GB per GPU" (lesson 01 shows why: it partitions too few bytes
# > per parameter) and "ZeRO-2 + offload needs about 29 GB". The table above gives both rows in both accountings.
#
# - With the optimizer offloaded, only the replicated fp16 parameters stay on the GPU. No source gives "29 GB", and
#   the claim leaves out the other side of the bargain: the **host RAM** in the last column, which is where offload
#   runs out first (processes killed with exit code -9; see the DeepSpeed issues under References).
# - In DeepSpeed's accounting the host column is the same with and without offload. That figure is not the
#   offloaded state: it is the fp32 peak while every process loads the model (4 bytes per parameter for each GPU
#   process, times the buffer factor; `estimate_zero2_model_states_mem_needs`), which here is larger than the
#   offloaded state. Offload still costs host RAM after loading: the paper's rows show the state it keeps there.
# - All of these are model states only: activations, communication buckets and the CUDA context come on top.
#
# Note DeepSpeed's estimator prints "GB" but divides by 2^30, so its "GB" are GiB.
#
# **Buckets.** Another popular claim says `overlap_comm` "uses 4.5x the `reduce_bucket_size`", so 9 GB at the
# default size. That multiplier was removed from DeepSpeed in 2021 (References). In 0.19.8
# ZeRO-2 keeps one reduce bucket of `reduce_bucket_size` elements for the contiguous gradients, and `overlap_comm`
# adds a second so that one bucket can be reduced while the next fills. With the default size (DeepSpeed's
# `reduce_bucket_size`) and fp16 elements (the size torch reports): <!-- claim: zero2-estimator-offload-gpu-is-16-bit-params --> <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: deepspeed-estimator-host-is-fp32-load-peak --> <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: deepspeed-estimators-print-gib-as-gb --> <!-- claim: bucket-sizes-count-elements --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 -->

# %% [markdown] lang="zh" en="52c56014c7e7"
# > **常见的错误数字。** “ZeRO-2 每张 GPU 大约需要 36 GB”（第 01 课讲过原因：它按参数切分掉的字节数算少了）和 “ZeRO-2 + 卸载大约需要 29 GB”。上表用两种口径给出了这两行。
#
# - 优化器卸载之后，留在 GPU 上的只有复制的 fp16 参数。没有任何资料给出过 “29 GB”，而且这个说法漏掉了交换的另一面：最后一列的**主机内存**，卸载时最先耗尽的正是它（进程以退出码 -9 被杀掉；见参考资料中的 DeepSpeed issue）。
# - 按 DeepSpeed 的口径，主机那一列有没有卸载都一样。那个数字并不是卸载出去的状态：它是所有进程加载模型时的 fp32 峰值（每个 GPU 进程每个参数 4 字节，再乘以缓冲系数；见 `estimate_zero2_model_states_mem_needs`），在这里比卸载出去的状态还大。加载完成后，卸载仍然要占用主机内存：论文口径的那几行给出的就是留在主机上的状态。
# - 以上全都只是模型状态：激活值、通信桶和 CUDA 上下文还要另算。
#
# 注意，DeepSpeed 的估算函数打印的单位是 “GB”，但它除的是 2^30，所以它的 “GB” 其实是 GiB。
#
# **桶。** 另一个流行的说法是 `overlap_comm` “占用 4.5 倍的 `reduce_bucket_size`”，默认大小下就是 9 GB。这个系数在 2021 年已从 DeepSpeed 中删除（见参考资料）。在 0.19.8 中，ZeRO-2 为连续梯度保留一个 `reduce_bucket_size` 个元素的归约桶，`overlap_comm` 再加一个，使得一个桶在归约时下一个桶可以继续填充。按默认大小（DeepSpeed 的 `reduce_bucket_size`）和 fp16 元素（大小取自 torch 的报告）计算： <!-- claim: zero2-estimator-offload-gpu-is-16-bit-params --> <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: deepspeed-estimator-host-is-fp32-load-peak --> <!-- claim: zero2-estimator-offload-host-rule --> <!-- claim: deepspeed-estimators-print-gib-as-gb --> <!-- claim: bucket-sizes-count-elements --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 -->

# %%
bucket_elements = DeepSpeedZeroConfig(stage=2).reduce_bucket_size
for overlap in (False, True):
    buffers = comm.bucket_buffer_bytes(bucket_elements, "fp16", overlap_comm=overlap)
    print(tr(f"overlap_comm={overlap!s:5}: {units.format_bytes(buffers, 'GB')} of gradient buckets "
             f"(reduce_bucket_size = {bucket_elements:.0e} fp16 elements)"))

# %% [markdown]
# One more thing the config doctor of lesson 05 notices: the batch numbers of the skeleton multiply out on **one**
# GPU. Take the same config to 8 GPUs and DeepSpeed refuses it: <!-- claim: batch-world-size-is-data-parallel -->

# %% [markdown] lang="zh" en="893d6b2d3ff7"
# 第 05 课的配置诊断工具还会发现一件事：骨架中的批大小数字只在**一张** GPU 上乘得对。把同一份配置拿到 8 张 GPU 上，DeepSpeed 就会拒绝它： <!-- claim: batch-world-size-is-data-parallel -->

# %%
for finding in check_config(config, world_size=GPUS).errors:
    print(finding)

# %% [markdown]
# ## Exercise 2: the batch arithmetic (2 points)
#
# DeepSpeed requires `train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size`,
# where `world_size` is the number of **data-parallel** ranks (GPUs, divided by any sequence- or model-parallel
# degree). If you give two of the three, DeepSpeed derives the third with **floor division**, and then its own
# assertion can fail. See it happen with a global batch of 30 and a micro batch of 4 on one GPU:
# <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: batch-world-size-is-data-parallel -->

# %% [markdown] lang="zh" en="a28ee6f54df8"
# ## 练习 2：批大小的算术（2 分）
#
# DeepSpeed 要求 `train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size`，其中 `world_size` 是**数据并行**的 rank 数（GPU 数除以序列并行或模型并行的并行度）。如果你只给出三者中的两个，DeepSpeed 会用**向下取整除法**推出第三个，随后它自己的断言就可能失败。在一张 GPU 上，用全局批大小 30、微批次（micro-batch）大小 4 来看看这种情况：<!-- claim: batch-term-derived-by-floor-division --> <!-- claim: batch-world-size-is-data-parallel -->

# %%
try:
    DeepSpeedConfig({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})
except AssertionError as error:
    print("DeepSpeed:", error)

# %% [markdown]
# Write `gradient_accumulation_steps(train_batch_size, micro_batch_per_gpu, world_size)`: return the number of
# accumulation steps (an `int`), and raise `ValueError` with a message when no whole number of steps fits, instead of
# silently rounding down.
#
# *Accepted:* an `int` (a float such as `8.0` is not), or a raised `ValueError` (or a subclass) when the numbers do
# not divide. Hidden tests compare your function with DeepSpeed's own batch derivation on more inputs, so
# `read_settings`, `check_config` and `DeepSpeedConfig` are off limits in your cell: do the arithmetic yourself.

# %% [markdown] lang="zh" en="ce0b609b6ab8"
# 编写 `gradient_accumulation_steps(train_batch_size, micro_batch_per_gpu, world_size)`：返回梯度累积步数（`int`），当无法得到整数步数时，抛出带说明信息的 `ValueError`，而不是悄悄向下取整。
#
# *可接受的答案：* 一个 `int`（像 `8.0` 这样的 float 不行），或者在数字除不尽时抛出 `ValueError`（或其子类）。隐藏测试会在更多输入上把你的函数与 DeepSpeed 自己推导批大小的逻辑比较，所以你的单元格里不能使用 `read_settings`、`check_config` 和 `DeepSpeedConfig`：请自己做这道算术。

# %% nbgrader={"grade": false, "grade_id": "ex2_grad_accum", "locked": false, "schema_version": 3, "solution": true, "task": false}
def gradient_accumulation_steps(train_batch_size, micro_batch_per_gpu, world_size):
    """Accumulation steps such that train_batch_size == micro_batch_per_gpu * steps * world_size."""
    ### BEGIN SOLUTION
    per_step = micro_batch_per_gpu * world_size
    if train_batch_size % per_step:
        raise ValueError(f"train_batch_size {train_batch_size} is not a multiple of "
                         f"micro batch {micro_batch_per_gpu} x world size {world_size}")
    return train_batch_size // per_step
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex2_grad_accum", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("gradient_accumulation_steps", ["zerolab.config.read_settings", "zerolab.config.check_config",
                                         "deepspeed.runtime.config"], exercise="exercise 2",
           instead="do the batch arithmetic yourself")
from zerolab.lesson.checks import whole

whole(gradient_accumulation_steps(32, 4, 1), "gradient_accumulation_steps(32, 4, 1)", "a whole number of steps")
assert gradient_accumulation_steps(32, 4, 1) == 8, "gradient_accumulation_steps(32, 4, 1) is not right: 32 samples, 4 per micro-step, 1 GPU"
assert gradient_accumulation_steps(64, 4, 8) != 64 // 4, \
    "gradient_accumulation_steps(64, 4, 8) left out world_size: each of the 8 GPUs runs its own micro batches"
assert gradient_accumulation_steps(64, 4, 8) == 64 // (4 * 8), \
    "gradient_accumulation_steps(64, 4, 8) is not right: 64 samples per step, 4 per micro-step on each of 8 GPUs"
try:
    gradient_accumulation_steps(30, 4, 1)
except ValueError:
    pass
else:
    raise AssertionError("30 samples cannot be split into micro batches of 4: raise ValueError instead of rounding down")
print(tr("Visible checks passed."))
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import plain
from zerolab.config import check_config, read_settings

cases = [(32, 4, 1), (48, 6, 1), (7, 7, 1), (30, 4, 1), (10, 3, 1), (256, 4, 8), (96, 2, 16), (128, 8, 16),
         (100, 4, 8), (64, 8, 16), (24, 4, 4), (96, 3, 4)]
for tbs, mbs, ws in cases:
    batch = {"train_batch_size": tbs, "train_micro_batch_size_per_gpu": mbs}
    expected = read_settings(batch, world_size=ws).grad_accum if check_config(batch, world_size=ws).valid else None
    try:
        got = plain(gradient_accumulation_steps(tbs, mbs, ws))
    except ValueError:
        got = None
    call = f"gradient_accumulation_steps({tbs}, {mbs}, {ws})"
    assert expected is not None or got is None, f"{call} should raise ValueError: the numbers do not divide"
    assert expected is None or got is not None, f"{call} raised ValueError, but the numbers divide"
    assert got == expected and type(got) is type(expected), f"{call} is not right: which of the three does world_size multiply?"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3: fp16 or bf16? (2 points)
#
# bf16 has the exponent range of fp32 (the same 8 exponent bits: the same smallest normal value, and a largest value
# within 0.4% of fp32's), so it needs no loss scaling, and DeepSpeed's bf16 has none. It runs fast on tensor cores
# from the Ampere generation on (compute capability 8.0: A100, RTX 30xx, and later H100 at 9.0). Older cards such as
# the T4 that free Colab gives you (Turing, 7.5) or the V100 (7.0) have fast fp16 but no bf16 tensor cores, so there
# you train in fp16 with dynamic loss scaling. Enabling both is an error: <!-- claim: bf16-overflows-a-little-below-fp32s-largest-value --> <!-- claim: bf16-and-fp16-take-2-bytes --> <!-- claim: fp16-loss-scale-zero-is-dynamic --> <!-- claim: bf16-trains-without-loss-scaling --> <!-- claim: config-refuses-fp16-with-bf16-and-mics -->

# %% [markdown] lang="zh" en="4c03ba4cb5cb"
# ## 练习 3：fp16 还是 bf16？（2 分）
#
# bf16 的指数范围与 fp32 相同（同样是 8 位指数：最小正规数相同，最大值与 fp32 相差不到 0.4%），所以它不需要损失缩放，DeepSpeed 的 bf16 也没有损失缩放。从 Ampere 架构开始（计算能力 8.0：A100、RTX 30xx，以及之后计算能力 9.0 的 H100），它能在 Tensor Core 上高速运行。更早的卡，比如免费版 Colab 提供的 T4（Turing，7.5）或 V100（7.0），fp16 很快，但没有 bf16 Tensor Core，所以在这些卡上要用 fp16 加动态损失缩放来训练。两者同时启用会报错： <!-- claim: bf16-overflows-a-little-below-fp32s-largest-value --> <!-- claim: bf16-and-fp16-take-2-bytes --> <!-- claim: fp16-loss-scale-zero-is-dynamic --> <!-- claim: bf16-trains-without-loss-scaling --> <!-- claim: config-refuses-fp16-with-bf16-and-mics -->

# %%
try:
    DeepSpeedConfig({"train_batch_size": 4, "fp16": {"enabled": True}, "bf16": {"enabled": True}})
except AssertionError as error:
    print("DeepSpeed:", error)

# %% [markdown]
# Write `mixed_precision(compute_capability)`: given a `(major, minor)` tuple (what
# `torch.cuda.get_device_capability()` returns), return the two config blocks
# `{"fp16": {"enabled": ...}, "bf16": {"enabled": ...}}`: bf16 from compute capability 8.0 on, fp16 below that
# where DeepSpeed accepts it. DeepSpeed's CUDA accelerator (`is_fp16_supported` in `accelerator/cuda_accelerator.py`)
# reports fp16 as unsupported below 7.0 (a P100 is 6.0; `DS_ALLOW_DEPRECATED_FP16=1` lets 6.x cards through, nothing
# older), and the engine then refuses an fp16 config: there, enable neither and train in fp32. Hidden tests try more
# GPUs, ask DeepSpeed's own accelerator rule, and pass your blocks to DeepSpeed. <!-- claim: torch-device-capability-is-major-minor --> <!-- claim: cuda-accelerator-fp16-from-compute-capability-7 --> <!-- claim: engine-refuses-unsupported-half-precision -->

# %% [markdown] lang="zh" en="e7a6ff4654b5"
# 编写 `mixed_precision(compute_capability)`：给定一个 `(major, minor)` 元组（即 `torch.cuda.get_device_capability()` 的返回值），返回两个配置块 `{"fp16": {"enabled": ...}, "bf16": {"enabled": ...}}`：计算能力 8.0 及以上用 bf16，低于 8.0 且 DeepSpeed 接受的情况下用 fp16。DeepSpeed 的 CUDA accelerator（`accelerator/cuda_accelerator.py` 中的 `is_fp16_supported`）在计算能力低于 7.0 时（P100 是 6.0）报告不支持 fp16（设置 `DS_ALLOW_DEPRECATED_FP16=1` 可以放行 6.x 的卡，更老的卡仍然不行），此时引擎会拒绝 fp16 配置：这种情况下两者都不启用，用 fp32 训练。隐藏测试会尝试更多 GPU，询问 DeepSpeed 自己的 accelerator 规则，并把你的配置块交给 DeepSpeed。 <!-- claim: torch-device-capability-is-major-minor --> <!-- claim: cuda-accelerator-fp16-from-compute-capability-7 --> <!-- claim: engine-refuses-unsupported-half-precision -->

# %% nbgrader={"grade": false, "grade_id": "compute_capability", "locked": true, "schema_version": 3, "solution": false, "task": false}
COMPUTE_CAPABILITY = {"T4": (7, 5), "V100": (7, 0), "A100": (8, 0), "RTX 3090": (8, 6), "H100": (9, 0)}


# %% nbgrader={"grade": false, "grade_id": "ex3_precision", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mixed_precision(compute_capability):
    """The fp16 and bf16 config blocks for a GPU with this (major, minor) compute capability."""
    ### BEGIN SOLUTION
    use_bf16 = tuple(compute_capability) >= (8, 0)
    use_fp16 = not use_bf16 and tuple(compute_capability) >= (7, 0)
    return {"fp16": {"enabled": use_fp16}, "bf16": {"enabled": use_bf16}}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex3_precision", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import dict_keys

for _gpu in ("T4", "A100"):
    _blocks = dict_keys(mixed_precision(COMPUTE_CAPABILITY[_gpu]), ["fp16", "bf16"], f"mixed_precision({_gpu})")
    for _name, _block in _blocks.items():
        assert type(_block) is dict and "enabled" in _block, \
            f"missing key: mixed_precision({_gpu})[{_name!r}] should be a block like {{\"enabled\": ...}}"
        assert type(_block["enabled"]) is bool, (f"wrong type: mixed_precision({_gpu})[{_name!r}]['enabled'] should be "
                                                 f"a bool (True or False), got {type(_block['enabled']).__name__}")
t4 = mixed_precision(COMPUTE_CAPABILITY["T4"])
assert t4["fp16"]["enabled"] is True and t4["bf16"]["enabled"] is False, "T4 (7.5) has no bf16 tensor cores: enable fp16, disable bf16"
a100 = mixed_precision(COMPUTE_CAPABILITY["A100"])
assert a100["bf16"]["enabled"] is True and a100["fp16"]["enabled"] is False, "A100 (8.0) runs bf16 natively: enable bf16, disable fp16"
p100 = mixed_precision((6, 0))
assert p100["fp16"]["enabled"] is False and p100["bf16"]["enabled"] is False, \
    "P100 (6.0): DeepSpeed's CUDA accelerator refuses fp16 below 7.0 and there are no bf16 tensor cores"
print(tr("Visible checks passed."))
### BEGIN HIDDEN TESTS
import copy
import os as _os
from unittest import mock as _mock
from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator as _CUDA
from deepspeed.runtime.config import DeepSpeedConfig
from zerolab.lesson.checks import plain


def _deepspeed_fp16(capability):
    """DeepSpeed's own rule (CUDA_Accelerator.is_fp16_supported), asked as if this GPU were present."""
    with _mock.patch("torch.cuda.is_available", return_value=True), \
            _mock.patch("torch.cuda.get_device_capability", return_value=capability), \
            _mock.patch.dict(_os.environ, {"DS_ALLOW_DEPRECATED_FP16": "0"}):
        return _CUDA.__new__(_CUDA).is_fp16_supported()


for gpu, capability in [("V100", (7, 0)), ("T4", (7, 5)), ("A100", (8, 0)), ("RTX 3090", (8, 6)), ("H100", (9, 0)), ("P100", (6, 0))]:
    blocks = plain(mixed_precision(capability))
    assert sorted(blocks) == ["bf16", "fp16"], f"{gpu}: return exactly the keys 'fp16' and 'bf16'"
    wants_bf16 = capability[0] >= 8
    wants_fp16 = not wants_bf16 and _deepspeed_fp16(capability)
    assert blocks["bf16"]["enabled"] is wants_bf16 and blocks["fp16"]["enabled"] is wants_fp16, f"not right for the {gpu} {capability}: which precisions does DeepSpeed accept there?"
    try:
        DeepSpeedConfig({"train_batch_size": 4, **copy.deepcopy(blocks)})
    except Exception as error:
        raise AssertionError(f"{gpu}: DeepSpeed rejects your blocks: {error}")
### END HIDDEN TESTS

# %% [markdown]
# On a machine with a GPU you can ask PyTorch directly:

# %% [markdown] lang="zh" en="986634dc8501"
# 在有 GPU 的机器上，你可以直接问 PyTorch：

# %%
if torch.cuda.is_available():
    capability = torch.cuda.get_device_capability()
    print(torch.cuda.get_device_name(), capability, "->", mixed_precision(capability))
else:
    print(tr("No GPU here: on a GPU this cell prints its compute capability and your choice."))

# %% [markdown]
# Memory is the same either way: fp16 and bf16 both store 2 bytes per value, so every estimate in this course is the
# same for both. (One caution, read in the code but not tried on a real card: DeepSpeed's CUDA accelerator asks
# `torch.cuda.is_bf16_supported()`, which in recent PyTorch also accepts *emulated* bf16, so it can say yes on a
# pre-Ampere card that then runs bf16 slowly or fails in a kernel. Trust the compute capability.) <!-- claim: bf16-overflows-a-little-below-fp32s-largest-value --> <!-- claim: bf16-and-fp16-take-2-bytes --> <!-- claim: cuda-accelerator-bf16-accepts-emulation -->

# %% [markdown] lang="zh" en="79b5938a7d31"
# 两种方式下显存都一样：fp16 和 bf16 每个值都占 2 字节，所以本课程的所有估算对两者都相同。（有一点需要提醒，这是读代码得出的，没有在真卡上试过：DeepSpeed 的 CUDA accelerator 调用的是 `torch.cuda.is_bf16_supported()`，而在较新的 PyTorch 中它也接受*模拟的* bf16，因此在 Ampere 之前的卡上也可能回答“支持”，结果 bf16 跑得很慢，或者在某个 kernel 里出错。请以计算能力为准。） <!-- claim: bf16-overflows-a-little-below-fp32s-largest-value --> <!-- claim: bf16-and-fp16-take-2-bytes --> <!-- claim: cuda-accelerator-bf16-accepts-emulation -->

# %% [markdown]
# ## Exercise 4: ZeRO-3 with parameter offload (2 points)
#
# When even the fp16 parameters do not fit, ZeRO-3 partitions them too, and `offload_param` moves the partition
# to host memory. `offload_param` only works with stage 3: DeepSpeed accepts it with stage 2 without a word and then
# ignores it (the stage 1/2 optimizer never receives it; lesson 05 catches that).
#
# Write `zero3_offload(config)`: return a **new** config (leave the argument unchanged) with `stage` 3 and both the
# optimizer and the parameters offloaded to CPU with pinned memory; everything else stays as it was. Hidden tests
# pass your result to DeepSpeed, try other configs and check that the input is unchanged. The course's reference
# configs (`zerolab.config.reference`) are off limits in your cell.
#
# *Accepted:* a new `dict` whose `zero_optimization` has `stage` 3 (an `int`) and `offload_optimizer` and
# `offload_param` blocks with `device` `"cpu"` and `pin_memory` `True`; other fields of those blocks may stay. The
# visible test also tries a config without a `zero_optimization` block. <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: zero3-offload-param-gathers-from-the-host-buffer --> <!-- claim: zero3-gathers-again-for-backward --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: offload-param-accepted-silently-at-stage-2 -->

# %% [markdown] lang="zh" en="e35fbb8dbd18"
# ## 练习 4：带参数卸载的 ZeRO-3（2 分）
#
# 当连 fp16 参数都放不下时，ZeRO-3 把参数也切分，而 `offload_param` 把参数分片移到主机内存。`offload_param` 只在 stage 3 下生效：在 stage 2 下 DeepSpeed 会一声不吭地接受它，然后忽略它（stage 1/2 的优化器根本拿不到它；第 05 课会查出这个问题）。
#
# 编写 `zero3_offload(config)`：返回一份**新的**配置（不要改动传入的参数），其中 `stage` 为 3，优化器和参数都卸载到 CPU 并使用锁页内存；其余内容保持原样。隐藏测试会把你的结果交给 DeepSpeed，尝试其他配置，并检查输入没有被改动。你的单元格里不能使用课程的参考配置（`zerolab.config.reference`）。
#
# *可接受的答案：* 一个新的 `dict`，其 `zero_optimization` 中 `stage` 为 3（`int`），并且有 `offload_optimizer` 和 `offload_param` 两个块，其中 `device` 为 `"cpu"`、`pin_memory` 为 `True`；这两个块中的其他字段可以保留。可见测试还会尝试一个没有 `zero_optimization` 块的配置。 <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: zero3-offload-param-gathers-from-the-host-buffer --> <!-- claim: zero3-gathers-again-for-backward --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: offload-param-accepted-silently-at-stage-2 -->

# %% nbgrader={"grade": false, "grade_id": "ex4_zero3_offload", "locked": false, "schema_version": 3, "solution": true, "task": false}
def zero3_offload(config):
    """A copy of config with ZeRO-3, optimizer and parameters offloaded to pinned CPU memory."""
    ### BEGIN SOLUTION
    result = copy.deepcopy(config)
    zero = result.setdefault("zero_optimization", {})
    zero["stage"] = 3
    zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return result
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex4_zero3_offload", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("zero3_offload", ["zerolab.config.reference"], exercise="exercise 4",
           instead="copy the config and set the blocks yourself")
base = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True},
        "zero_optimization": {"stage": 2, "overlap_comm": True}}
from zerolab.lesson.checks import same_value

for _given in (base, {"train_batch_size": 8, "bf16": {"enabled": True}}):
    _name = "zero3_offload(a config without zero_optimization)" if "zero_optimization" not in _given else "zero3_offload(base)"
    try:
        result = zero3_offload(_given)
    except KeyError as error:
        raise AssertionError(f"missing key: {_name} raised KeyError {error}; create the blocks that are missing "
                             "(dict.setdefault)") from None
    assert type(result) is dict, f"wrong type: {_name} should return a dict, got {type(result).__name__}"
    assert type(result.get("zero_optimization")) is dict, f"missing key: {_name} has no zero_optimization block"
    zero = result["zero_optimization"]
    assert "stage" in zero, f"missing key: {_name}['zero_optimization'] has no 'stage'"
    same_value(zero["stage"], 3, f"{_name}: zero_optimization.stage", "parameter offload needs ZeRO-3")
    for _block in ("offload_param", "offload_optimizer"):
        assert type(zero.get(_block)) is dict, f"missing key: {_name}['zero_optimization'] has no {_block!r} block"
        for _key, _want in (("device", "cpu"), ("pin_memory", True)):
            assert _key in zero[_block], f"missing key: {_name}: zero_optimization.{_block} has no {_key!r}"
            same_value(zero[_block][_key], _want, f"{_name}: zero_optimization.{_block}.{_key}")
    assert {k: v for k, v in result.items() if k != "zero_optimization"} == \
        {k: v for k, v in _given.items() if k != "zero_optimization"}, f"{_name} changed fields outside zero_optimization"
assert base["zero_optimization"] == {"stage": 2, "overlap_comm": True}, "the input config was changed: work on a copy (copy.deepcopy)"
print(tr("Visible checks passed."))
### BEGIN HIDDEN TESTS
import copy
from deepspeed.runtime.config import DeepSpeedConfig
from zerolab.lesson.checks import plain

seed_config = {"optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}, "fp16": {"enabled": True, "loss_scale": 0},
               "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                                     "offload_optimizer": {"device": "cpu", "pin_memory": False}},
               "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8}
for given in (base, {"train_batch_size": 8, "bf16": {"enabled": True}}, seed_config):
    before = copy.deepcopy(given)
    result = plain(zero3_offload(given))
    assert given == before, "the input config was changed"
    try:
        accepted = DeepSpeedConfig(copy.deepcopy(result))
    except Exception as error:
        raise AssertionError(f"DeepSpeed rejects the result: {error}")
    z = accepted.zero_config
    assert accepted.zero_optimization_stage == 3, "DeepSpeed does not read stage 3"
    assert z.offload_param is not None and z.offload_param.device == "cpu" and z.offload_param.pin_memory is True, "offload_param is not cpu + pinned"
    assert z.offload_optimizer is not None and z.offload_optimizer.device == "cpu" and z.offload_optimizer.pin_memory is True, "offload_optimizer is not cpu + pinned"
    others = {key: value for key, value in result.items() if key != "zero_optimization"}
    assert others == {key: value for key, value in before.items() if key != "zero_optimization"}, "fields outside zero_optimization changed"
    for key, value in before.get("zero_optimization", {}).items():
        if key not in ("stage", "offload_optimizer", "offload_param"):
            assert result["zero_optimization"].get(key) == value, f"zero_optimization.{key} was changed"
### END HIDDEN TESTS

# %% [markdown]
# What did that buy? Both of your configs for the same 13B model on 8 GPUs, in DeepSpeed's accounting (the ZeRO-3
# figure includes the largest layer, gathered in full while it computes): <!-- claim: zero3-offload-estimate-is-the-largest-layer -->

# %% [markdown] lang="zh" en="ad4411046817"
# 这样换来了什么？同一个 13B 模型、8 张 GPU，你写的两份配置，按 DeepSpeed 的口径（ZeRO-3 的数字包含最大的那一层，它在计算时会被完整地 gather 到 GPU 上）： <!-- claim: zero3-offload-estimate-is-the-largest-layer -->

# %%
rows = [(tr("exercise 1: ZeRO-2, optimizer on CPU"), reference.zero2_offload()),
        (tr("exercise 4: ZeRO-3, optimizer and parameters on CPU"), reference.zero3_offload(reference.zero2_offload()))]
yours = learner_value(zero3_offload, reference.zero2_offload())
if yours is not None and learner_value(config_effect, yours, PARAMS, GPUS) is not None:
    rows.append((tr("your zero3_offload(...)"), yours))
for label, cfg in rows:
    e = config_effect(cfg, params=PARAMS, gpus_per_node=GPUS, accounting="deepspeed").memory
    print(tr(f"{label:52}: GPU {units.format_bytes(e.gpu_bytes, 'GiB'):>10}   host per node {units.format_bytes(e.cpu_bytes, 'GiB'):>10}"))

# %% [markdown]
# The GPU side shrinks to little more than one gathered layer; the host side carries everything else. The price is
# PCIe traffic: with parameter offload each GPU fetches its parameter partition from the host for the forward pass
# and again for the backward pass (ZeRO-3 gathers twice, lesson 03; only the last layers, whose backward comes within
# `stage3_max_reuse_distance` elements of their forward, stay gathered in between), on every micro-step. Per GPU and
# optimizer step in DeepSpeed 0.19.8's accounting (with gradient accumulation the micro-steps also send their 16-bit
# gradients to a host buffer; at the accumulation boundary the gradient partition goes down as fp32; lessons 02 and
# 06 measure it), with the config's accumulation steps on 8 GPUs (`train_batch_size` is dropped so that DeepSpeed
# derives it for 8 GPUs; the value in the config only fits one, as the doctor showed above): <!-- claim: zero3-offload-param-gathers-from-the-host-buffer --> <!-- claim: zero3-gathers-again-for-backward --> <!-- claim: zero3-offload-gradients-fp32-at-the-boundary --> <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: batch-term-derived-by-floor-division -->

# %% [markdown] lang="zh" en="eca63f415bf5"
# GPU 这一侧缩小到只比一个 gather 完整的层多一点；其余的都压到了主机那一侧。代价是 PCIe 流量：使用参数卸载时，每张 GPU 在每个微步都要从主机取回自己的参数分片，前向取一次，反向再取一次（ZeRO-3 gather 两次，见第 03 课；只有最后几层的反向与前向相隔不到 `stage3_max_reuse_distance` 个元素，在两次之间一直保持 gather 状态）。以下是每张 GPU 每个优化器步的流量，按 DeepSpeed 0.19.8 的口径（使用梯度累积时，各个微步还会把 16 位梯度传到主机上的缓冲区；在梯度累积的边界，梯度分片以 fp32 传回主机；第 02 课和第 06 课会实测），使用配置中的梯度累积步数、8 张 GPU（去掉了 `train_batch_size`，让 DeepSpeed 按 8 张 GPU 推导它；配置里的值只适用于一张 GPU，正如上面的诊断工具所示）： <!-- claim: zero3-offload-param-gathers-from-the-host-buffer --> <!-- claim: zero3-gathers-again-for-backward --> <!-- claim: zero3-offload-gradients-fp32-at-the-boundary --> <!-- claim: zero2-offload-pcie-each-step --> <!-- claim: batch-term-derived-by-floor-division -->

# %%
from zerolab.lesson.reveal import answer_first

first = learner_value(build_deepspeed_config)
for label, cfg in (("exercise 1", first), ("exercise 4", first and learner_value(zero3_offload, first))):
    cfg = copy.deepcopy(cfg) if isinstance(cfg, dict) else {}
    cfg.pop("train_batch_size", None)  # let DeepSpeed derive it for 8 GPUs
    effect = learner_value(config_effect, cfg, PARAMS, GPUS) if cfg else None
    if effect is None:
        answer_first(label)
        continue
    t = effect.traffic
    print(tr(f"{tr(label)}: host -> GPU {units.format_bytes(t.host_to_device_bytes, 'GB'):>9}, "
             f"GPU -> host {units.format_bytes(t.device_to_host_bytes, 'GB'):>9} per GPU per optimizer step"))

# %% [markdown]
# So parameter offload is the last resort, not the first.

# %% [markdown] lang="zh" en="7e9a86e056b3"
# 所以参数卸载是最后的手段，而不是首选。

# %% [markdown]
# ## Summary
#
# - The classic exercise sets three things: the stage that partitions gradients as well as optimizer states,
#   overlap of the gradient reduction with backward, and the optimizer offloaded to pinned host memory.
# - DeepSpeed 0.19.8 defaults: `overlap_comm` is off for stages 0-2 and on for stage 3; `pin_memory` is on;
#   `contiguous_gradients` is on; bucket sizes are counted in elements.
# - `train_batch_size = micro batch x accumulation steps x data-parallel ranks`, checked by DeepSpeed; a derived
#   value is floor-divided, so choose numbers that divide.
# - fp16 with dynamic loss scaling before Ampere (T4, V100), bf16 from Ampere on; never both.
# - `offload_param` needs stage 3; with stage 2 it is silently ignored.
# - The config's memory comes from zerolab, not from memory: the "36 GB" and "29 GB" figures are wrong, and offload
#   moves the problem to host RAM.
#
# ## Interview questions
#
# **What do `stage`, `overlap_comm` and `offload_optimizer` do?**
# `stage` picks what is partitioned across data-parallel ranks (1: optimizer states, 2: + gradients,
# 3: + parameters). `overlap_comm` reduces gradient buckets on a separate stream while backward continues, at the
# price of a second bucket buffer. `offload_optimizer` keeps the fp32 optimizer state in host RAM (or NVMe under
# ZeRO-3) and runs Adam on the CPU.
#
# **Is `overlap_comm` on by default?**
# Only for stage 3. For stages 1 and 2 DeepSpeed 0.19.8 leaves it off, whatever the docs table says.
#
# **Why `pin_memory`, and when would you turn it off?**
# Page-locked host memory lets the GPU copy by DMA, asynchronously and at full PCIe speed. It cannot be swapped out,
# so on a host with little RAM it causes out-of-memory kills; 0.19.8 turns it on by default, so there you set it to
# false.
#
# **A config gives `train_batch_size` and the micro batch, and the first is not a multiple of the second times the
# GPUs. What happens?**
# DeepSpeed derives the accumulation steps by floor division and then fails its own check (the message printed in
# exercise 2). Pick a global batch that is a multiple of micro batch x data-parallel ranks.
#
# **Why does ZeRO-2 + offload not fix every out-of-memory?**
# It removes the optimizer state from the GPU, but the fp16 parameters stay whole on every GPU, activations stay, and
# the host must hold the fp32 state of every GPU of the node; that host RAM runs out first. <!-- claim: overlap-comm-default-by-stage --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: zero-bucket-settings-default --> <!-- claim: bucket-sizes-count-elements --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: batch-world-size-is-data-parallel --> <!-- claim: config-refuses-fp16-with-bf16-and-mics --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: offload-param-accepted-silently-at-stage-2 --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload --> <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: offload-pin-memory-pins-the-host-buffers --> <!-- claim: offload-keeps-16-bit-params-on-the-device -->

# %% [markdown] lang="zh" en="12525bc29ec0"
# ## 小结
#
# - 经典练习设置了三件事：同时切分梯度和优化器状态的 stage、让梯度归约与反向传播重叠，以及把优化器卸载到锁页的主机内存。
# - DeepSpeed 0.19.8 的默认值：`overlap_comm` 在 stage 0-2 关闭、stage 3 开启；`pin_memory` 开启；`contiguous_gradients` 开启；桶大小以元素个数计。
# - `train_batch_size = micro batch x accumulation steps x data-parallel ranks`（微批次大小 × 梯度累积步数 × 数据并行 rank 数），由 DeepSpeed 检查；推导出的值是向下取整的，所以要选能整除的数字。
# - Ampere 之前（T4、V100）用 fp16 加动态损失缩放，从 Ampere 起用 bf16；绝不能两个都开。
# - `offload_param` 需要 stage 3；在 stage 2 下它会被悄悄忽略。
# - 配置占多少显存要靠 zerolab 算，而不是凭记忆：“36 GB” 和 “29 GB” 这两个数字都是错的，而且卸载只是把问题挪到了主机内存上。
#
# ## 面试题
#
# **`stage`、`overlap_comm` 和 `offload_optimizer` 分别做什么？**
# `stage` 决定在数据并行的 rank 之间切分什么（1：优化器状态，2：再加梯度，3：再加参数）。`overlap_comm` 在反向传播继续进行的同时，在单独的 CUDA 流上归约梯度桶，代价是多一个桶缓冲区。`offload_optimizer` 把 fp32 优化器状态放在主机内存中（ZeRO-3 下也可以放到 NVMe），并在 CPU 上执行 Adam。
#
# **`overlap_comm` 默认开启吗？**
# 只有 stage 3 默认开启。对 stage 1 和 2，DeepSpeed 0.19.8 默认关闭，不管文档表格怎么写。
#
# **为什么要用 `pin_memory`？什么时候应该关掉它？**
# 锁页的主机内存让 GPU 可以通过 DMA 异步拷贝，并跑满 PCIe 带宽。它不能被换出，所以在内存很小的主机上会导致进程因内存不足被杀掉；0.19.8 默认开启它，所以在这种主机上你要把它设为 false。
#
# **一份配置给出了 `train_batch_size` 和微批次大小，而前者不是后者乘以 GPU 数的整数倍，会发生什么？**
# DeepSpeed 用向下取整除法推导梯度累积步数，然后它自己的检查就会失败（即练习 2 中打印的那条信息）。应选择一个是“微批次大小 × 数据并行 rank 数” 整数倍的全局批大小。
#
# **为什么 ZeRO-2 + 卸载不能解决所有的显存不足？**
# 它把优化器状态移出了 GPU，但 fp16 参数仍然在每张 GPU 上完整保留一份，激活值也还在；而且主机要为节点上的每张 GPU 保存 fp32 状态，最先耗尽的是主机内存。 <!-- claim: overlap-comm-default-by-stage --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: zero-bucket-settings-default --> <!-- claim: bucket-sizes-count-elements --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: batch-world-size-is-data-parallel --> <!-- claim: config-refuses-fp16-with-bf16-and-mics --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: offload-param-accepted-silently-at-stage-2 --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload --> <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: offload-pin-memory-pins-the-host-buffers --> <!-- claim: offload-keeps-16-bit-params-on-the-device -->

# %% [markdown]
# ## References
#
# - Rajbhandari, Rasley, Ruwase, He: *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC'20,
#   arXiv:1910.02054 (section 3.1 for 2 + 2 + K bytes, section 5 and Figure 1 for the per-GPU figures, section 7 for
#   communication volume).
# - DeepSpeed 0.19.8 source: `deepspeed/runtime/zero/config.py` (stage-dependent `overlap_comm`),
#   `deepspeed/runtime/zero/offload_config.py` (`pin_memory`), `deepspeed/runtime/config.py` (batch arithmetic).
# - DeepSpeed PR #8207: `pin_memory` defaults to true.
# - DeepSpeed commit cfa63f5 ("ZeRO stage 1 refresh", #1042, 2021): removed the 4.5x bucket multiplier.
# - DeepSpeed issues #4239 and #4571 (offload processes killed with -9: host out of memory) and #5290 (host RAM grows
#   with the GPUs per node).

# %% [markdown] lang="zh" en="f1c7176e7289"
# ## 参考资料
#
# - Rajbhandari, Rasley, Ruwase, He: *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC'20, arXiv:1910.02054（第 3.1 节：2 + 2 + K 字节；第 5 节和图 1：每张 GPU 的数字；第 7 节：通信量）。
# - DeepSpeed 0.19.8 源码：`deepspeed/runtime/zero/config.py`（随 stage 变化的 `overlap_comm`）、`deepspeed/runtime/zero/offload_config.py`（`pin_memory`）、`deepspeed/runtime/config.py`（批大小的算术）。
# - DeepSpeed PR #8207：`pin_memory` 默认改为 true。
# - DeepSpeed commit cfa63f5（"ZeRO stage 1 refresh"，#1042，2021）：删除了 4.5 倍的桶系数。
# - DeepSpeed issue #4239 和 #4571（卸载时进程被 -9 杀掉：主机内存不足）以及 #5290（主机内存随每节点 GPU 数增长）。
