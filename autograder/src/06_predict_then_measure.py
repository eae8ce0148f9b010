# %% [markdown]
# # Lesson 06: Predict, then measure

# %% [markdown] lang="zh" en="c2a8b9aefb24"
# # 第 06 课：先预测，再实测

# %% [markdown]
# ## Learning goals
#
# After this lesson you can:
#
# - predict, before running anything, how many bytes of parameters, gradients, fp32 master weights and Adam
#   states each rank holds for ZeRO stages 0-3, with and without offload;
# - run a real DeepSpeed ZeRO job on several ranks from a notebook (no `deepspeed` launcher) and read what each
#   rank really holds from the engine's own tensors;
# - explain every place where DeepSpeed 0.19.8 differs from the paper's accounting, and say whether it is a
#   design choice or a surprise.
#
# The model is a tiny GPT (`zerolab.run.model.TinyGPT`), trained on synthetic tokens, so a run takes seconds on
# CPU ranks. The bytes per parameter do not depend on the model size: what you predict here for a hundred
# thousand parameters is what ZeRO does for 13 billion. Predictions come from lesson 01's rules
# (`zerolab.engine.memory.estimate`); measurements come from `zerolab.run`.

# %% [markdown] lang="zh" en="459072fa8423"
# ## 学习目标
#
# 学完本课，你能够：
#
# - 在运行任何东西之前，预测在 ZeRO stage 0-3 下、开或不开卸载（offload）时，每个 rank 持有多少字节的参数、梯度、fp32 主权重和 Adam 状态；
# - 在 notebook 里直接在多个 rank 上运行一个真实的 DeepSpeed ZeRO 任务（不用 `deepspeed` 启动器），并从引擎自己的张量中读出每个 rank 实际持有什么；
# - 解释 DeepSpeed 0.19.8 与 ZeRO 论文的口径不一致的每一处，并说明它是设计上的选择，还是意料之外的情况。
#
# 模型是一个很小的 GPT（`zerolab.run.model.TinyGPT`），用合成的 token 训练，所以在 CPU rank 上一次运行只要几秒。每个参数占多少字节与模型大小无关：你在这里为十万个参数做的预测，就是 ZeRO 在 130 亿参数上的行为。预测来自第 01 课的规则（`zerolab.engine.memory.estimate`）；实测来自 `zerolab.run`。

# %%
import os

import torch

from zerolab.engine import memory
from zerolab.base.i18n import tr
from zerolab.run import ModelSpec, make_config, run_in_notebook
from zerolab.run.model import TinyGPT, count_params

RANKS = 2
SPEC = ModelSpec()
with torch.device("meta"):  # the shape only: no memory, no time
    PARAMS = count_params(TinyGPT(SPEC))
print(tr(f"tiny GPT: {SPEC}; {PARAMS:,} parameters; {RANKS} ranks"))

# %% [markdown]
# ## 1. Predict: the optimizer side
#
# On CPU ranks zerolab trains in **bf16** (DeepSpeed's CPU accelerator supports bf16 everywhere; fp16 only on
# CPUs with oneDNN fp16 kernels). bf16 takes the same 2 bytes as fp16, so the paper's mixed-precision
# accounting applies unchanged: Adam keeps an fp32 master copy of the weights plus two fp32 moments. <!-- claim: cpu-accelerator-bf16-always-fp16-with-onednn --> <!-- claim: mixed-precision-keeps-fp32-master-and-moments -->
#
# ### Exercise 1: master weights and Adam states per rank
#
# Write `optimizer_bytes(params, stage, ranks)`: the bytes **one rank** holds of fp32 master weights and of Adam
# states (momentum + variance) when `params` parameters are trained with ZeRO `stage` on `ranks` data-parallel
# ranks. Return a dict `{"master_weights": int, "optimizer_states": int}`. The test cell checks the tiny model;
# hidden tests check other sizes and rank counts against `memory.estimate`, so `memory.estimate` is off limits in
# your cell (the test gives 0 if it is used).

# %% [markdown] lang="zh" en="298eb20c5a43"
# ## 1. 预测：优化器这一侧
#
# 在 CPU rank 上，zerolab 用 **bf16** 训练（DeepSpeed 的 CPU accelerator 处处支持 bf16；fp16 只在带 oneDNN fp16 内核的 CPU 上可用）。bf16 和 fp16 一样占 2 字节，所以论文的混合精度口径照样适用：Adam 保存一份 fp32 主权重，外加两个 fp32 的矩（moment）。 <!-- claim: cpu-accelerator-bf16-always-fp16-with-onednn --> <!-- claim: mixed-precision-keeps-fp32-master-and-moments -->
#
# ### 练习 1：每个 rank 上的主权重和 Adam 状态
#
# 编写 `optimizer_bytes(params, stage, ranks)`：用 ZeRO `stage` 在 `ranks` 个数据并行 rank 上训练 `params` 个参数时，**一个 rank** 持有的 fp32 主权重字节数和 Adam 状态（动量 + 方差）字节数。返回一个 dict `{"master_weights": int, "optimizer_states": int}`。测试单元格检查这个小模型；隐藏测试用 `memory.estimate` 检查其他模型大小和 rank 数，所以你的单元格里不能使用 `memory.estimate`（用了，测试给 0 分）。

# %% nbgrader={"grade": false, "grade_id": "ex1_optimizer_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def optimizer_bytes(params, stage, ranks):
    """Per-rank bytes of fp32 master weights and Adam states (bf16/fp16 mixed precision)."""
    ### BEGIN SOLUTION
    share = params if stage == 0 else params / ranks
    return {"master_weights": round(4 * share), "optimizer_states": round(8 * share)}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex1_optimizer_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("optimizer_bytes", ["zerolab.engine.memory.estimate"], exercise="exercise 1",
           instead="count the fp32 bytes a rank keeps yourself")
from zerolab.lesson.checks import close_to, dict_keys

_mine = dict_keys(optimizer_bytes(PARAMS, 0, RANKS), ["master_weights", "optimizer_states"],
                  "optimizer_bytes(PARAMS, 0, RANKS)")
assert _mine["optimizer_states"] == 2 * _mine["master_weights"], \
    "Adam keeps two fp32 moments (momentum and variance); the master copy is one fp32 tensor"
close_to(_mine["master_weights"], 4 * PARAMS, "optimizer_bytes(PARAMS, 0, RANKS)['master_weights']", 0, "bytes",
         abs_tol=1, hint="stage 0 partitions nothing: each rank keeps a whole fp32 copy",
         slips={0.25: "counted fp32 values (elements), not bytes: an fp32 value takes 4 bytes"})
for _stage in (1, 2, 3):
    assert abs(optimizer_bytes(PARAMS, _stage, RANKS)["optimizer_states"] * RANKS - 8 * PARAMS) <= RANKS, \
        f"stage {_stage} partitions the optimizer states over the ranks: each rank keeps 1/ranks of them"
### BEGIN HIDDEN TESTS
from zerolab.engine import memory as _memory
from zerolab.lesson.checks import close_to as _close_to, dict_keys as _dict_keys, plain as _plain

for _params in (1_000_003, 7_000_000_000):
    for _stage in (0, 1, 2, 3):
        for _ranks in (1, 3, 8):
            _expected = _memory.estimate(_params, _stage, gpus_per_node=_ranks, precision="bf16").breakdown["gpu"]
            _name = f"optimizer_bytes({_params}, {_stage}, {_ranks})"
            _got = _dict_keys(_plain(optimizer_bytes(_params, _stage, _ranks), _name),
                              ["master_weights", "optimizer_states"], _name)
            for _key in ("master_weights", "optimizer_states"):
                _close_to(_got[_key], _expected[_key], f"{_name}[{_key!r}]", 0, "bytes", abs_tol=1,
                          hint=f"which stages partition the optimizer side, and into how many shares?",
                          slips={0.25: "counted fp32 values (elements), not bytes: an fp32 value takes 4 bytes"})
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Predict: parameters and gradients
#
# ### Exercise 2: the training-precision side per rank
#
# Write `training_bytes(params, stage, ranks)`: the bytes one rank holds of bf16 parameters and of bf16
# gradients, by the paper's accounting (P_os partitions the optimizer states, P_os+g also the gradients,
# P_os+g+p also the parameters). Return `{"params": int, "grads": int}`. Hidden tests check other sizes against
# `memory.estimate`, so it is off limits in your cell.

# %% [markdown] lang="zh" en="6bea24a2de91"
# ## 2. 预测：参数和梯度
#
# ### 练习 2：每个 rank 上训练精度的那部分
#
# 编写 `training_bytes(params, stage, ranks)`：按 ZeRO 论文的口径，一个 rank 持有的 bf16 参数字节数和 bf16 梯度字节数（P_os 切分优化器状态，P_os+g 还切分梯度，P_os+g+p 还切分参数）。返回 `{"params": int, "grads": int}`。隐藏测试用 `memory.estimate` 检查其他模型大小，所以你的单元格里不能使用它。

# %% nbgrader={"grade": false, "grade_id": "ex2_training_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def training_bytes(params, stage, ranks):
    """Per-rank bytes of 16-bit parameters and gradients, by the ZeRO paper's accounting."""
    ### BEGIN SOLUTION
    return {"params": round(2 * params / (ranks if stage >= 3 else 1)),
            "grads": round(2 * params / (ranks if stage >= 2 else 1))}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex2_training_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("training_bytes", ["zerolab.engine.memory.estimate"], exercise="exercise 2",
           instead="count the 16-bit bytes a rank keeps yourself")
from zerolab.lesson.checks import close_to, dict_keys

_mine = dict_keys(training_bytes(PARAMS, 0, RANKS), ["params", "grads"], "training_bytes(PARAMS, 0, RANKS)")
for _key in ("params", "grads"):
    close_to(_mine[_key], 2 * PARAMS, f"training_bytes(PARAMS, 0, RANKS)[{_key!r}]", 0, "bytes", abs_tol=1,
             hint="at stage 0 every rank keeps all 16-bit params and grads",
             slips={0.5: "counted bf16 values (elements), not bytes: a bf16 value takes 2 bytes",
                    2: "counted bf16 as 4 bytes: bf16 is a 16-bit type, 2 bytes a value"})
assert training_bytes(PARAMS, 1, RANKS)["grads"] == 2 * PARAMS, \
    "stage 1 (P_os) partitions only the optimizer states: gradients stay whole in the paper's accounting"
assert training_bytes(PARAMS, 2, RANKS)["params"] == 2 * PARAMS, "stage 2 keeps whole parameters on every rank"
assert abs(training_bytes(PARAMS, 3, RANKS)["params"] * RANKS - 2 * PARAMS) <= RANKS, \
    "stage 3 partitions the parameters too"
### BEGIN HIDDEN TESTS
from zerolab.engine import memory as _memory
from zerolab.lesson.checks import close_to as _close_to, dict_keys as _dict_keys, plain as _plain

for _params in (999_999_937, 13_000_000_000):
    for _stage in (0, 1, 2, 3):
        for _ranks in (1, 4, 64):
            _expected = _memory.estimate(_params, _stage, gpus_per_node=_ranks, precision="bf16").breakdown["gpu"]
            _name = f"training_bytes({_params}, {_stage}, {_ranks})"
            _got = _dict_keys(_plain(training_bytes(_params, _stage, _ranks), _name), ["params", "grads"], _name)
            for _key in ("params", "grads"):
                _close_to(_got[_key], _expected[_key], f"{_name}[{_key!r}]", 0, "bytes", abs_tol=1,
                          hint="which stage partitions the gradients, and which the parameters?",
                          slips={0.5: "counted bf16 values (elements), not bytes: a bf16 value takes 2 bytes",
                                 2: "counted bf16 as 4 bytes: bf16 is a 16-bit type, 2 bytes a value"})
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Predict: what offload moves
#
# Offload does not shrink a rank's model states, it moves them. With `offload_optimizer` the master weights and
# Adam states go to host memory (and, in the paper's accounting, from stage 2 on the gradient partition the CPU
# optimizer consumes, as ZeRO-Offload does); with `offload_param` (stage 3 only) the parameter partition goes there
# too. DeepSpeed 0.19.8 goes further: with any CPU optimizer offload, ZeRO-1 included, it keeps an **fp32** gradient
# partition on the host, and at stage 2 with gradient accumulation also 16-bit accumulation buffers (pinned by
# default; stage 1 reduces only at the accumulation boundary and keeps none). The
# measurement below shows the fp32 gradients; this exercise follows the paper. <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: offload-moves-the-gradient-partition-at-stage-1 --> <!-- claim: zero2-offload-host-accumulation-buffers --> <!-- claim: offload-pin-memory-defaults-true -->
#
# ### Exercise 3: accelerator bytes and host bytes per rank
#
# Write `offload_split(params, stage, ranks, offload_optimizer, offload_param)`, the devices being `"none"` or
# `"cpu"`: a dict `{"device": int, "host": int}` with the bytes one rank keeps on its accelerator and the bytes
# it keeps in host memory (its share of the node's host RAM), by the paper's accounting. It is graded on its own,
# so write it out in full: `optimizer_bytes`, `training_bytes` and `memory.estimate` are off limits in your cell (the
# test gives 0 if it uses them). Hidden tests check other combinations.

# %% [markdown] lang="zh" en="e82bea8d5231"
# ## 3. 预测：卸载搬走了什么
#
# 卸载（offload）不会让一个 rank 的模型状态变小，只是把它们挪了个地方。用 `offload_optimizer` 时，主权重和 Adam 状态搬到主机内存（按论文的口径，从 stage 2 起，CPU 优化器要用的那份梯度分片也一起搬过去，ZeRO-Offload 就是这么做的）；用 `offload_param`（仅 stage 3）时，参数分片也搬过去。DeepSpeed 0.19.8 走得更远：只要开了 CPU 优化器卸载（包括 ZeRO-1），它就在主机上保留一份 **fp32** 梯度分片；在 stage 2 有梯度累积时，还有 16 位的累积缓冲区（默认是锁页内存；stage 1 只在累积边界做归约，没有这些缓冲区）。下面的实测会显示这份 fp32 梯度；本练习按论文的口径来。 <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: offload-moves-the-gradient-partition-at-stage-1 --> <!-- claim: zero2-offload-host-accumulation-buffers --> <!-- claim: offload-pin-memory-defaults-true -->
#
# ### 练习 3：每个 rank 在加速器上和主机上的字节数
#
# 编写 `offload_split(params, stage, ranks, offload_optimizer, offload_param)`，其中两个设备参数取 `"none"` 或 `"cpu"`：按论文的口径，返回一个 dict `{"device": int, "host": int}`，分别是一个 rank 留在加速器上的字节数和放在主机内存中的字节数（即它在本节点主机内存中所占的份额）。这道题单独评分，所以请完整写出：你的单元格里不能使用 `optimizer_bytes`、`training_bytes` 和 `memory.estimate`（用了，测试给 0 分）。隐藏测试检查其他组合。

# %% nbgrader={"grade": false, "grade_id": "ex3_offload_split", "locked": false, "schema_version": 3, "solution": true, "task": false}
def offload_split(params, stage, ranks, offload_optimizer, offload_param):
    """Per-rank bytes on the accelerator and in host memory."""
    ### BEGIN SOLUTION
    def share(nbytes, partitioned_from):
        return round(nbytes * params / (ranks if stage >= partitioned_from else 1))

    parts = {"params": share(2, 3), "grads": share(2, 2), "master_weights": share(4, 1),
             "optimizer_states": share(8, 1)}
    on_host = set()
    if offload_optimizer == "cpu":
        on_host |= {"master_weights", "optimizer_states"} | ({"grads"} if stage >= 2 else set())
    if offload_param == "cpu":
        on_host.add("params")
    return {"device": sum(v for k, v in parts.items() if k not in on_host),
            "host": sum(v for k, v in parts.items() if k in on_host)}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex3_offload_split", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("offload_split", ["optimizer_bytes", "training_bytes", "zerolab.engine.memory.estimate"], exercise="exercise 3",
           instead="write out in full which model states stay on the device and which go to the host")
from zerolab.lesson.checks import dict_keys

_none = dict_keys(offload_split(PARAMS, 2, RANKS, "none", "none"), ["device", "host"],
                  "offload_split(PARAMS, 2, RANKS, 'none', 'none')")
assert _none["host"] == 0, "nothing is offloaded: the host keeps none of the model states"
_cpu = offload_split(PARAMS, 2, RANKS, "cpu", "none")
assert _cpu["device"] + _cpu["host"] == _none["device"], "offload moves bytes, it does not create or delete them"
assert _cpu["device"] == 2 * PARAMS, "ZeRO-2 with optimizer offload keeps only the whole 16-bit parameters on the device"
_both = offload_split(PARAMS, 3, RANKS, "cpu", "cpu")
assert _both["device"] == 0, "stage 3 offloading both the optimizer and the parameters leaves no model states on the device"
### BEGIN HIDDEN TESTS
from zerolab.engine import memory as _memory
from zerolab.lesson.checks import close_to as _close_to, dict_keys as _dict_keys, plain as _plain

for _params in (123_456_789, 70_000_000_000):
    for _ranks in (8, 1):
        for _stage, _opt, _par in _memory.combinations():
            if "nvme" in (_opt, _par):
                continue
            _e = _memory.estimate(_params, _stage, gpus_per_node=_ranks, offload_optimizer=_opt, offload_param=_par,
                                  precision="bf16")
            _name = f"offload_split({_params}, {_stage}, {_ranks}, {_opt!r}, {_par!r})"
            _got = _dict_keys(_plain(offload_split(_params, _stage, _ranks, _opt, _par), _name), ["device", "host"],
                              _name)
            _close_to(_got["device"], _e.gpu_bytes, f"{_name}['device']", 0, "bytes", abs_tol=4,
                      hint=f"which model states does stage {_stage} keep on the device with these offloads, and how "
                           "much of each?")
            _close_to(_got["host"], _e.cpu_bytes / _ranks, f"{_name}['host']", 0, "bytes", abs_tol=4,
                      hint="which model states go to the host with these offloads, and what is one rank's share?",
                      slips={_ranks: "that is the whole node's host memory; give one rank's share"} if _ranks > 1
                      else None)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Measure
#
# `run_in_notebook` starts one process per rank (it sets `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR` and
# `MASTER_PORT` itself, the five variables DeepSpeed reads when no launcher started it, and picks a free port, which
# is why no `deepspeed` launcher is needed), trains the tiny GPT with `deepspeed.initialize` for a few steps, and
# reads from each rank's engine what it really holds. Every rank is stopped at the end, also when one fails or you
# interrupt the kernel.
#
# The offloaded run uses one compiled DeepSpeed op, CPU Adam (the optimizer step on the host). `bash
# scripts/setup.sh` compiles it once (1-7 minutes on 2 cores) and caches it in the virtual environment's own
# folder, `.venv/torch_extensions`; where it is not built yet (Colab, ModelScope, `~/.cache/torch_extensions`
# there) the first offloaded run compiles it and its progress line shows the time so far. Each run prints its
# configuration first. These cells skip themselves while nbgrader grades. <!-- claim: deepspeed-starts-from-five-environment-variables --> <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: cpu-adam-compiled-on-first-use -->

# %% [markdown] lang="zh" en="113e0326a494"
# ## 4. 实测
#
# `run_in_notebook` 为每个 rank 启动一个进程（它自己设置 `RANK`、`LOCAL_RANK`、`WORLD_SIZE`、`MASTER_ADDR` 和 `MASTER_PORT`，也就是没有启动器时 DeepSpeed 读取的那五个变量，并挑一个空闲端口，所以不需要 `deepspeed` 启动器），用 `deepspeed.initialize` 把这个小 GPT 训练几步，然后从每个 rank 的引擎中读出它实际持有什么。结束时所有 rank 都会被停掉，即使某个 rank 失败或你中断了 kernel 也一样。
#
# 卸载优化器的那次运行要用到 DeepSpeed 的一个编译好的算子：CPU Adam（在主机上做优化器的那一步）。`bash scripts/setup.sh` 会把它编译一次（在 2 核上 1-7 分钟），并缓存到虚拟环境自己的文件夹 `.venv/torch_extensions`；在还没编译过的地方（Colab、ModelScope，那里缓存在 `~/.cache/torch_extensions`），第一次卸载运行时会编译它，进度行会显示已用的时间。每次运行都会先打印它的配置。nbgrader 评分时，这些单元格会自动跳过。 <!-- claim: deepspeed-starts-from-five-environment-variables --> <!-- claim: offload-builds-deepspeed-cpu-adam --> <!-- claim: cpu-adam-compiled-on-first-use -->

# %% [markdown]
# DeepSpeed's CPU accelerator would also compile a shared-memory op when distributed starts. Only
# `inference_all_reduce` (tensor-parallel inference) calls it; ZeRO training never does, so these runs skip it.
# <!-- claim: deepspeed-shm-op-only-for-inference -->

# %% [markdown] lang="zh" en="7534ecfe461d"
# DeepSpeed 的 CPU 加速器在分布式启动时还会编译一个共享内存算子。只有 `inference_all_reduce`（张量并行推理）会调用它，ZeRO 训练从不调用，所以这些运行跳过了它。
# <!-- claim: deepspeed-shm-op-only-for-inference -->

# %%
SETUPS = [(1, "none", "none"), (3, "none", "none"), (2, "cpu", "none")]  # add (3, "cpu", "cpu") and others
results = {}
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    for stage, offload_optimizer, offload_param in SETUPS:
        print(f"ZeRO-{stage}, offload_optimizer={offload_optimizer}, offload_param={offload_param}:")
        config = make_config(stage, offload_optimizer, offload_param, precision="bf16")
        results[stage, offload_optimizer, offload_param] = run_in_notebook(config, ranks=RANKS, steps=3)

# %% [markdown]
# What each rank measured next to zerolab's prediction (lesson 01's rules), and, once Exercises 1 and 2 work,
# your own prediction in the column *yours*. The notes under each table say why a figure differs from the paper's
# accounting.

# %% [markdown] lang="zh" en="57bc6e0981de"
# 下面是每个 rank 的实测值与 zerolab 预测值（第 01 课的规则）的对照；练习 1 和 2 做对之后，*yours* 列会显示你自己的预测。每张表下面的注释说明了某个数字为什么与论文的口径不同。

# %%
for (stage, offload_optimizer, offload_param), result in results.items():
    try:
        yours = {**optimizer_bytes(PARAMS, stage, RANKS), **training_bytes(PARAMS, stage, RANKS)}
    except Exception as error:  # not answered yet (NotImplementedError) or not working: the table goes on without
        yours = None
        print(tr(f"(no column 'yours' yet: your functions raised {type(error).__name__})"))
    print(result.table(yours=yours), end="\n\n")

# %%
if results:
    from zerolab.lesson import plots

    plots.show(plots.measured_vs_predicted(results.values()))

# %% [markdown]
# ### What the measurement teaches
#
# - The optimizer side (master weights and Adam states) matches the paper to the byte: stage 1 and up divide it
#   by the ranks, wherever it lives. <!-- claim: optimizer-side-is-the-papers-to-the-byte --> <!-- claim: zero-stages-partition-states-then-parameters -->
# - **Stage 1 gradients.** The paper's P_os keeps whole gradients, but DeepSpeed runs stage 1 on stage 2's code:
#   at every gradient-accumulation boundary it reduces the gradients and keeps only its partition. The snapshot
#   is taken after that reduction, so stage 1 looks like stage 2 here. At the peak it does not: with `overlap_comm`
#   off, ZeRO-1 reduces only after backward has finished (`engine.allreduce_gradients`), so the full 16-bit
#   gradients are resident from the first micro-step's backward until the backward of the micro-step that ends
#   the accumulation window, which reduces them: a moment without gradient accumulation, the whole window with it. <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: stage1-runs-stage2-code-keeps-its-partition -->
# - **fp32 gradients.** DeepSpeed's estimator counts 4 more bytes per parameter than the paper: an fp32
#   gradient partition. Without offload it exists only inside `step()`; with optimizer offload it is resident on
#   the host, and there is no 16-bit gradient partition instead. <!-- claim: fp32-gradient-partition-only-inside-step --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: offload-fp32-gradient-partition-resident -->
# - **Peak memory** is the whole process: Python, torch, DeepSpeed, activations and buffers. For a tiny model the
#   model states are a sliver of it; for a 13B model they are most of it. That is why lesson 01 predicts model
#   states and why real jobs still need headroom.

# %% [markdown] lang="zh" en="ff27c7c7094d"
# ### 实测告诉了我们什么
#
# - 优化器这一侧（主权重和 Adam 状态）与论文精确到字节：stage 1 及以上把它除以 rank 数，无论它放在哪里。 <!-- claim: optimizer-side-is-the-papers-to-the-byte --> <!-- claim: zero-stages-partition-states-then-parameters -->
# - **stage 1 的梯度。** 论文的 P_os 保留完整的梯度，但 DeepSpeed 的 stage 1 跑的是 stage 2 的代码：在每个梯度累积边界，它规约梯度后只保留自己的分片。快照是在这次规约之后拍的，所以这里 stage 1 看起来和 stage 2 一样。峰值时则不然：`overlap_comm` 关闭时，ZeRO-1 要等反向传播完全结束才规约（`engine.allreduce_gradients`），所以完整的 16 位梯度从第一个微步的反向传播起一直常驻，直到结束累积窗口的那个微步在反向传播中规约它们：不做梯度累积时只是片刻，做梯度累积时则是整个累积窗口。<!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: stage1-runs-stage2-code-keeps-its-partition -->
# - **fp32 梯度。** DeepSpeed 的估算函数比论文每个参数多算 4 字节：一份 fp32 梯度分片。不卸载时它只在 `step()` 内部存在；开了优化器卸载时它常驻主机，而相应地不再有 16 位的梯度分片。<!-- claim: fp32-gradient-partition-only-inside-step --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: offload-fp32-gradient-partition-resident -->
# - **峰值内存**是整个进程的：Python、torch、DeepSpeed、激活值和各种缓冲区。对小模型来说，模型状态只占其中一小片；对 13B 模型来说则占大头。这就是为什么第 01 课预测的是模型状态，而真实任务仍然需要留出余量。

# %% [markdown]
# ## 5. On a GPU (optional)
#
# On a machine with CUDA (Colab: *Runtime > Change runtime type > T4 GPU*) the next cell runs ZeRO-2 with CPU
# optimizer offload in fp16 on one GPU, sized to fit a 16 GB T4, and compares the GPU memory DeepSpeed allocated
# with the prediction for the GPU: only the 16-bit parameters stay there. Without CUDA it skips itself. <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: offload-fp32-master-and-moments-on-the-host -->

# %% [markdown] lang="zh" en="d377a60b3844"
# ## 5. 在 GPU 上（可选）
#
# 在有 CUDA 的机器上（Colab：*Runtime > Change runtime type > T4 GPU*），下一个单元格在一张 GPU 上以 fp16 运行带 CPU 优化器卸载的 ZeRO-2，规模设定为能放进一张 16 GB 的 T4，并把 DeepSpeed 实际分配的显存与对 GPU 的预测作比较：只有 16 位参数留在 GPU 上。没有 CUDA 时它会自动跳过。 <!-- claim: offload-keeps-16-bit-params-on-the-device --> <!-- claim: offload-fp32-master-and-moments-on-the-host -->

# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("GPU run skipped while grading."))
elif not torch.cuda.is_available():
    print(tr("No CUDA GPU here: GPU run skipped."))
else:
    gpu_spec = ModelSpec(layers=4, width=512, heads=8, vocab=8192, seq_len=128)
    gpu_result = run_in_notebook(make_config(2, "cpu", precision="fp16"), ranks=1, device="cuda", model=gpu_spec)
    print(gpu_result.table())
    gpu_predicted = memory.estimate(gpu_result.setup["params"], 2, offload_optimizer="cpu", precision="fp16")
    print(tr("predicted model states on the GPU:"), f"{gpu_predicted.gpu_bytes:,} B")
    print(tr("torch.cuda.memory_allocated() after deepspeed.initialize:"),
          f"{gpu_result.ranks[0]['memory_after_initialize_bytes']:,} B")
    print(tr("torch.cuda.max_memory_allocated() over the run:"), f"{gpu_result.ranks[0]['peak_memory_bytes']:,} B")

# %% [markdown]
# ## 6. Predict, then measure: offload traffic
#
# Offload also moves bytes **every step**. `zerolab.run` carries a traffic meter (`zerolab.run.meter`): it wraps
# DeepSpeed's communication backend and the copies between the optimizer's device tensors and its host offload
# buffers, and counts the bytes each way per rank and optimizer step. On CPU ranks "device" and host are the same
# memory, so it counts the copies DeepSpeed makes between them, the ones that cross PCIe on a GPU.
#
# What DeepSpeed 0.19.8 does with ZeRO-2 and `offload_optimizer: cpu` (`stage_1_and_2.py`): at the accumulation
# boundary each rank casts its gradient partition to fp32 and copies it to the host (4 bytes a value); with
# `gradient_accumulation_steps` above 1 every micro-step also copies the 16-bit gradients to a host accumulation
# buffer, which comes back to be added to from the second micro-step on; after CPU Adam the updated partition comes
# back in the training precision. <!-- claim: cpu-accelerator-device-is-host-memory --> <!-- claim: zero2-offload-pcie-each-step -->
#
# ### Exercise 4: offload bytes per rank and step
#
# Write `offload_traffic(params, ranks, grad_accum, precision)` for ZeRO-2 with CPU optimizer offload, `precision`
# being `"bf16"` or `"fp32"`: the bytes **one rank** copies per optimizer step, as `{"to_host": int, "to_device":
# int}`, counting the rank's partition as `params / ranks` values (DeepSpeed 0.19.8's accounting). Hidden tests
# compare with zerolab's model of DeepSpeed (`zerolab.engine.deepspeed_traffic`, which the course's tests check against the
# meter on real runs), so it and `comm.traffic` are off limits in your cell.

# %% [markdown] lang="zh" en="5cc4400d3e67"
# ## 6. 先预测，再实测：卸载的数据搬运量
#
# 卸载还会**每一步**都搬运字节。`zerolab.run` 带有一个流量计（`zerolab.run.meter`）：它包装了 DeepSpeed 的通信后端，以及优化器的设备张量与其主机端卸载缓冲区之间的拷贝，按 rank、按优化器步统计每个方向的字节数。在 CPU rank 上，"设备"和主机是同一块内存，所以它统计的是 DeepSpeed 在两者之间做的拷贝，也就是在 GPU 上要经过 PCIe 的那些拷贝。
#
# DeepSpeed 0.19.8 在 ZeRO-2 加 `offload_optimizer: cpu` 时的做法（`stage_1_and_2.py`）：在累积边界，每个 rank 把自己的梯度分片转成 fp32 并拷贝到主机（每个值 4 字节）；`gradient_accumulation_steps` 大于 1 时，每个微步还要把 16 位梯度拷贝到主机上的累积缓冲区，而从第二个微步起，这个缓冲区还要拷贝回来以便累加；CPU Adam 更新之后，更新过的分片以训练精度拷贝回来。 <!-- claim: cpu-accelerator-device-is-host-memory --> <!-- claim: zero2-offload-pcie-each-step -->
#
# ### 练习 4：每个 rank、每步卸载的字节数
#
# 为带 CPU 优化器卸载的 ZeRO-2 编写 `offload_traffic(params, ranks, grad_accum, precision)`，其中 `precision` 为 `"bf16"` 或 `"fp32"`：返回**一个 rank** 每个优化器步拷贝的字节数，形式为 `{"to_host": int, "to_device": int}`，rank 的分片按 `params / ranks` 个值计算（DeepSpeed 0.19.8 的口径）。隐藏测试会与 zerolab 对 DeepSpeed 的建模结果（`zerolab.engine.deepspeed_traffic`，课程的测试会在真实运行上用流量计检验这个模型）比较，所以你的单元格里不能使用它和 `comm.traffic`。

# %% nbgrader={"grade": false, "grade_id": "ex4_offload_traffic", "locked": false, "schema_version": 3, "solution": true, "task": false}
def offload_traffic(params, ranks, grad_accum, precision):
    """Bytes one rank copies to the host and back per optimizer step (ZeRO-2, CPU optimizer offload)."""
    ### BEGIN SOLUTION
    partition = params / ranks
    element = 4 if precision == "fp32" else 2
    accumulating = grad_accum if grad_accum > 1 else 0
    return {"to_host": round(4 * partition + element * partition * accumulating),
            "to_device": round(element * partition + element * partition * max(0, accumulating - 1))}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex4_offload_traffic", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to, dict_keys
from zerolab.lesson.checks_source import off_limits

off_limits("offload_traffic", ["zerolab.engine.deepspeed_traffic", "zerolab.engine.comm.traffic"], exercise="exercise 4",
           instead="count the copies each way from the text above")
_mine = dict_keys(offload_traffic(8000, 2, 1, "bf16"), ["to_host", "to_device"], "offload_traffic(8000, 2, 1, 'bf16')")
close_to(_mine["to_host"], 4 * 4000, "offload_traffic(8000, 2, 1, 'bf16')['to_host']", 0, "bytes",
         hint="without accumulation the gradient partition goes to the host once, as fp32",
         slips={2: "counted the whole model; each rank copies only its partition, params / ranks values"})
close_to(_mine["to_device"], 2 * 4000, "offload_traffic(8000, 2, 1, 'bf16')['to_device']", 0, "bytes",
         hint="the updated partition comes back once per step, in the training precision",
         slips={2: "counted bf16 as 4 bytes: bf16 is a 16-bit type, 2 bytes a value"})
assert offload_traffic(8000, 2, 1, "fp32")["to_device"] == 4 * 4000, "in fp32 the parameters are 4 bytes each"
assert offload_traffic(8000, 2, 3, "bf16")["to_host"] > _mine["to_host"], \
    "with accumulation each micro-step also sends its 16-bit gradients to the host"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import close_to as _close_to, dict_keys as _dict_keys, plain as _plain
from zerolab.engine.deepspeed_traffic import offload_bytes as _offload_bytes

for _params in (123_456, 13_000_000_000):
    for _ranks in (1, 2, 8):
        for _gas in (1, 2, 3, 16):
            for _precision in ("bf16", "fp32"):
                _want = dict(zip(("to_host", "to_device"), _offload_bytes(_params, 2, _ranks, _gas, _precision, "cpu")))
                _as_fp32 = dict(zip(("to_host", "to_device"), _offload_bytes(_params, 2, _ranks, _gas, "fp32", "cpu")))
                _name = f"offload_traffic({_params}, {_ranks}, {_gas}, {_precision!r})"
                _got = _dict_keys(_plain(offload_traffic(_params, _ranks, _gas, _precision), _name),
                                  ["to_host", "to_device"], _name)
                for _key in ("to_host", "to_device"):
                    _slips = {}
                    if _precision == "bf16" and _as_fp32[_key] != _want[_key]:
                        _slips[_as_fp32[_key] / _want[_key]] = "counted bf16 as 4 bytes: bf16 is a 16-bit type, 2 bytes a value"
                    _close_to(_got[_key], _want[_key], f"{_name}[{_key!r}]", 0, "bytes", abs_tol=2, slips=_slips,
                              hint="the fp32 gradient partition at the boundary, the 16-bit accumulation buffer each way "
                                   "with accumulation, and the updated partition back in the training precision")
### END HIDDEN TESTS

# %% [markdown]
# Now the run measures it: ZeRO-2, CPU optimizer offload, bf16, 3 accumulation steps, 2 ranks. The table prints the
# meter's bytes per rank next to zerolab's exact model (which counts the whole parameters that straddle a partition
# edge and the padding of the flat buffer), and your prediction (which uses `params / ranks`; on a tiny model the
# edges show, on a large one they vanish). <!-- claim: zero2-offload-host-accumulation-buffers -->

# %% [markdown] lang="zh" en="07dddf5b822c"
# 现在让运行来实测：ZeRO-2、CPU 优化器卸载、bf16、3 步梯度累积、2 个 rank。表中并列显示流量计测得的每个 rank 的字节数、zerolab 的精确模型（它计入跨越分片边界的完整参数，以及扁平缓冲区的填充），以及你的预测（它用的是 `params / ranks`；在小模型上边界的影响看得出来，在大模型上就可以忽略了）。 <!-- claim: zero2-offload-host-accumulation-buffers -->

# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    traffic_run = run_in_notebook(make_config(2, "cpu", precision="bf16", accumulation=3), ranks=RANKS, steps=2)
    try:
        yours = offload_traffic(PARAMS, RANKS, 3, "bf16")
        yours_to_host, yours_to_device = f"{yours['to_host']:,} B", f"{yours['to_device']:,} B"
    except Exception as error:  # exercise 4 not answered yet: the measurement is shown without your column
        yours_to_host = yours_to_device = "-"
        print(tr(f"(no 'yours' yet: offload_traffic raised {type(error).__name__})"))
    for rank in range(RANKS):
        measured, model = traffic_run.measured_traffic(rank), traffic_run.predicted_traffic[rank]
        print(tr(f"rank {rank}: to host measured {measured['device_to_host_bytes']:,} B, model "
                 f"{model['device_to_host_bytes']:,} B, yours {yours_to_host}; back measured "
                 f"{measured['host_to_device_bytes']:,} B, model {model['host_to_device_bytes']:,} B, "
                 f"yours {yours_to_device}"))
    print()
    print(traffic_run.traffic_table())

# %% [markdown]
# ## Summary
#
# - Per rank, mixed-precision Adam holds 2 + 2 bytes of parameters and gradients and 4 + 8 bytes of master
#   weights and moments per parameter; ZeRO-1 divides the 12 by the ranks, ZeRO-2 also the gradients, ZeRO-3
#   also the parameters. A real DeepSpeed engine holds exactly that on the optimizer side.
# - Offload moves bytes from the accelerator to host memory; it does not remove them.
# - DeepSpeed differs from the paper by design in a few places: stage 1 partitions gradients at each
#   accumulation boundary, an fp32 gradient partition exists (inside `step()`, or resident under offload), and
#   flat buffers are padded so partitions align.
# - A notebook can run DeepSpeed without its launcher by setting the rank environment itself.
#
# ## Interview questions
#
# **Q: With ZeRO-2 on 8 GPUs, how many bytes per parameter of Adam state does each GPU hold?**
# A: The 12 bytes of fp32 master weights, momentum and variance divided by 8, plus the 2-byte gradient partition
# divided by 8, on top of the whole 2-byte parameters. Compute it with lesson 01's rules; a measured engine
# agrees to the byte on the optimizer side.
#
# **Q: Your measured GPU memory is far above the model-state estimate. Is the estimate wrong?**
# A: Not necessarily: the estimate covers model states only. Activations, communication buckets
# (`reduce_bucket_size`, doubled under `overlap_comm`), the CUDA context and fragmentation come on top.
#
# **Q: DeepSpeed's estimator says 18 bytes per parameter are partitioned; the paper says 14. Who is right?**
# A: Both, for what they count: DeepSpeed adds a 4-byte fp32 gradient partition. Without offload it is built
# inside the optimizer step and freed; with offload it stays resident in host memory.
#
# **Q: How do you run DeepSpeed from a Jupyter notebook?**
# A: Start the ranks yourself: set `MASTER_ADDR`, `MASTER_PORT` (a free port), `RANK`, `LOCAL_RANK` and
# `WORLD_SIZE` for each process, start them as fresh processes (not a fork of a kernel that imported torch),
# and make sure every rank is stopped when one fails or the cell is interrupted. <!-- claim: mixed-precision-keeps-fp32-master-and-moments --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: optimizer-side-is-the-papers-to-the-byte --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: stage1-runs-stage2-code-keeps-its-partition --> <!-- claim: fp32-gradient-partition-only-inside-step --> <!-- claim: offload-fp32-gradient-partition-resident --> <!-- claim: zero12-flat-buffer-padded-to-2n --> <!-- claim: zero3-pads-each-parameter --> <!-- claim: deepspeed-starts-from-five-environment-variables --> <!-- claim: zero2-keeps-only-the-gradient-partition --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes -->

# %% [markdown] lang="zh" en="1a72dc22d82f"
# ## 小结
#
# - 每个 rank 上，混合精度 Adam 每个参数持有 2 + 2 字节的参数和梯度，以及 4 + 8 字节的主权重和矩；ZeRO-1 把这 12 字节除以 rank 数，ZeRO-2 再加上梯度，ZeRO-3 再加上参数。真实的 DeepSpeed 引擎在优化器这一侧持有的正是这么多。
# - 卸载把字节从加速器挪到主机内存；它并不会消除这些字节。
# - DeepSpeed 在几处与论文的不同是有意为之：stage 1 在每个累积边界切分梯度；存在一份 fp32 梯度分片（在 `step()` 内部，或在卸载时常驻）；扁平缓冲区会做填充（padding），让各分片对齐。
# - notebook 自己设置好 rank 的环境变量，就能不用启动器运行 DeepSpeed。
#
# ## 面试问题
#
# **问：8 张 GPU 上用 ZeRO-2，每张 GPU 每个参数持有多少字节的 Adam 相关状态？**
# 答：fp32 主权重、动量和方差共 12 字节除以 8，加上 2 字节的梯度分片除以 8，再加上完整的 2 字节参数。用第 01 课的规则算出来即可；实测的引擎在优化器这一侧与之精确到字节。
#
# **问：实测的显存远高于模型状态的估算值。是估算错了吗？**
# 答：不一定：估算只覆盖模型状态。激活值、通信桶（`reduce_bucket_size`，开 `overlap_comm` 时翻倍）、CUDA context 和内存碎片都要另算。
#
# **问：DeepSpeed 的估算函数说每个参数有 18 字节被切分；论文说是 14 字节。谁对？**
# 答：就各自统计的内容而言都对：DeepSpeed 多算了一份 4 字节的 fp32 梯度分片。不卸载时，它在优化器步内部创建并随即释放；卸载时，它常驻在主机内存中。
#
# **问：怎样在 Jupyter notebook 里运行 DeepSpeed？**
# 答：自己启动各个 rank：为每个进程设置 `MASTER_ADDR`、`MASTER_PORT`（一个空闲端口）、`RANK`、`LOCAL_RANK` 和 `WORLD_SIZE`，把它们作为全新的进程启动（而不是从已经 import 了 torch 的 kernel fork 出来），并确保某个 rank 失败或单元格被中断时，所有 rank 都会被停掉。 <!-- claim: mixed-precision-keeps-fp32-master-and-moments --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: optimizer-side-is-the-papers-to-the-byte --> <!-- claim: offload-fp32-master-and-moments-on-the-host --> <!-- claim: stage1-runs-stage2-code-keeps-its-partition --> <!-- claim: fp32-gradient-partition-only-inside-step --> <!-- claim: offload-fp32-gradient-partition-resident --> <!-- claim: zero12-flat-buffer-padded-to-2n --> <!-- claim: zero3-pads-each-parameter --> <!-- claim: deepspeed-starts-from-five-environment-variables --> <!-- claim: zero2-keeps-only-the-gradient-partition --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes -->
