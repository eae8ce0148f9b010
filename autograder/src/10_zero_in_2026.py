# %% [markdown]
# # Lesson 10: ZeRO in 2026

# %% [markdown] lang="zh" en="cbadc917f83b"
# # 第 10 课：2026 年的 ZeRO

# %% [markdown]
# ## Learning goals
#
# The lessons so far count what the ZeRO paper (2019) counts: 2 bytes of parameters, 2 of gradients and K = 12 of
# Adam state per parameter. DeepSpeed has moved on, and the configs you are handed use its newer options. After
# this lesson you can:
#
# - predict a rank's bytes when DeepSpeed keeps the master weights and Adam's moments in bf16, and when Muon
#   replaces Adam, then check both on CPU ranks;
# - say what calling `loss.backward()` instead of `engine.backward(loss)` changes;
# - reproduce a ZeRO-3 hang on two CPU ranks, stop it with a timeout, read which rank waits where, and fix it;
# - pick the newer DeepSpeed feature a situation calls for, for the reason DeepSpeed's own figures give, and run
#   ZenFlow, AutoTP and Ulysses on CPU ranks;
# - count what ZeRO-3 sends across nodes per step and what ZeRO++ takes off it, and measure hpZ on 4 CPU ranks;
# - say how much host memory each rank needs to build a model, with and without `deepspeed.zero.Init`, and measure it.
#
# As in lesson 06, predictions come from the engine (`zerolab.engine.memory`) and measurements from real
# DeepSpeed 0.19.8 engines on CPU ranks (`zerolab.run`). There are hidden tests.

# %% [markdown] lang="zh" en="828036bc5939"
# ## 学习目标
#
# 前面几课按 ZeRO 论文（2019）的口径计数：每个参数 2 字节参数、2 字节梯度、K = 12 字节 Adam 状态。DeepSpeed 已经往前走了，别人交给你的配置里用的是它较新的选项。学完本课，你能够：
#
# - 预测 DeepSpeed 把主权重和 Adam 动量保存为 bf16 时、以及用 Muon 代替 Adam 时每个 rank 的字节数，并在 CPU rank 上验证这两种情况；
# - 说出用 `loss.backward()` 代替 `engine.backward(loss)` 会改变什么；
# - 在两个 CPU rank 上复现一次 ZeRO-3 挂起，用超时让它停下，看出哪个 rank 在哪里等待，并修好它；
# - 针对一个场景选出应该使用的 DeepSpeed 新特性，理由来自 DeepSpeed 自己公布的数字，并在 CPU rank 上运行 ZenFlow、AutoTP 和 Ulysses；
# - 算出 ZeRO-3 每步跨节点传输多少、ZeRO++ 能省掉多少，并在 4 个 CPU rank 上实测 hpZ；
# - 说出每个 rank 构建模型时需要多少主机内存（用与不用 `deepspeed.zero.Init`），并实测它。
#
# 和第 06 课一样，预测来自引擎（`zerolab.engine.memory`），实测来自在 CPU rank 上运行的真实 DeepSpeed 0.19.8 引擎（`zerolab.run`）。本课有隐藏测试。

# %%
import os

import torch

from zerolab.base.i18n import tr
from zerolab.engine import memory
from zerolab.run import ModelSpec, make_config, run_in_notebook
from zerolab.run.model import TinyGPT, count_params, muon_layout

RANKS = 2
SPEC = ModelSpec()
with torch.device("meta"):  # the shape only: no memory, no time
    _shape = TinyGPT(SPEC)
    PARAMS = count_params(_shape)
    MUON_PARAMS = sum(torch.Size(shape).numel() for shape, steps in muon_layout(_shape) if steps)
print(tr(f"tiny GPT: {SPEC}; {PARAMS:,} parameters, {MUON_PARAMS:,} of them in the matrices Muon would step; "
         f"{RANKS} ranks"))

# %% [markdown]
# ## 1. Master weights and moments in bf16
#
# Since 0.18.3 DeepSpeed's `bf16` block takes two more keys. `bf16_master_weights_and_grads: true` keeps the
# master copy of the weights (and the gradients the optimizer reads) in bf16, 2 bytes instead of 4;
# `bf16_optimizer_states: true` keeps Adam's momentum and variance in bf16 too. With both, K falls from 12 bytes
# per parameter to 6, and ZeRO partitions the 6 exactly as it partitioned the 12. <!-- claim: bf16-master-and-moments-make-k-6 -->
#
# DeepSpeed's config class accepts them only with ZeRO stage 1, 2 or 3, and `bf16_optimizer_states` only together
# with `bf16_master_weights_and_grads`. bf16 master weights with fp32 moments pass the config class, then
# `deepspeed.initialize` refuses them unless the optimizer is offloaded to DeepSpeed's CPU Adam; `zerolab check`
# says so before you launch. <!-- claim: bf16-master-options-need-zero-and-each-other --> <!-- claim: bf16-master-weights-need-cpu-adam -->
#
# The price is precision: a bf16 master weight keeps 8 significant bits, so an update below about 1/256 of the
# weight rounds away, where an fp32 master keeps it. DeepSpeed's own measurement, in its 0.18.3 release blog: peak memory from 31.38 to
# 18.93 GB, final loss from 3.09 to 3.12. <!-- claim: bf16-drops-small-updates -->

# %% [markdown] lang="zh" en="a4d8fd549925"
# ## 1. bf16 的主权重和动量
#
# 从 0.18.3 起，DeepSpeed 的 `bf16` 块多了两个键。`bf16_master_weights_and_grads: true` 把主权重副本（以及优化器读取的梯度）保存为 bf16，每个 2 字节而不是 4 字节；`bf16_optimizer_states: true` 把 Adam 的动量和方差也保存为 bf16。两个都打开时，K 从每个参数 12 字节降到 6 字节，ZeRO 切分这 6 字节的方式和切分那 12 字节完全一样。 <!-- claim: bf16-master-and-moments-make-k-6 -->
#
# DeepSpeed 的配置类只在 ZeRO stage 1、2、3 下接受它们，而且 `bf16_optimizer_states` 必须和 `bf16_master_weights_and_grads` 一起用。bf16 主权重配 fp32 动量能通过配置类，但除非优化器卸载到 DeepSpeed 的 CPU Adam，`deepspeed.initialize` 会拒绝它；`zerolab check` 会在你启动之前指出这一点。 <!-- claim: bf16-master-options-need-zero-and-each-other --> <!-- claim: bf16-master-weights-need-cpu-adam -->
#
# 代价是精度：bf16 主权重只有 8 位有效位，小于权重约 1/256 的更新会被舍入掉，而 fp32 主权重能保留它。DeepSpeed 在 0.18.3 发布博客中自己的测量：峰值显存从 31.38 GB 降到 18.93 GB，最终 loss 从 3.09 升到 3.12。 <!-- claim: bf16-drops-small-updates -->

# %% [markdown]
# ### Exercise 1: master weights and optimizer states per rank (3 points)
#
# Write `state_bytes(params, stage, ranks, master, moments)`: the bytes **one rank** keeps of master weights and of
# Adam's two moments when `params` parameters train in bf16 with ZeRO `stage` (1, 2 or 3) on `ranks` ranks,
# `master` and `moments` each `"fp32"` or `"bf16"`, by the paper's accounting (nothing offloaded). Return
# `{"master_weights": int, "optimizer_states": int}`. A combination DeepSpeed's config class refuses (stage 0, or
# bf16 moments with fp32 master weights) raises `ValueError`. Hidden tests check other sizes against
# `memory.estimate`, so it is off limits in your cell.

# %% [markdown] lang="zh" en="6902e6757277"
# ### 练习 1：每个 rank 的主权重和优化器状态（3 分）
#
# 编写 `state_bytes(params, stage, ranks, master, moments)`：`params` 个参数以 bf16 训练、ZeRO `stage`（1、2 或 3）、`ranks` 个 rank 时，**一个 rank** 保存的主权重字节数和 Adam 两个动量的字节数；`master` 和 `moments` 各为 `"fp32"` 或 `"bf16"`，按论文的口径计算（不卸载）。返回 `{"master_weights": int, "optimizer_states": int}`。DeepSpeed 的配置类拒绝的组合（stage 0，或 bf16 动量配 fp32 主权重）要抛出 `ValueError`。隐藏测试会用其他规模与 `memory.estimate` 比较，所以你的单元格里不能使用它。

# %% nbgrader={"grade": false, "grade_id": "ex1_state_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def state_bytes(params, stage, ranks, master, moments):
    """Per-rank bytes of master weights and Adam moments, bf16 training, the paper's accounting."""
    ### BEGIN SOLUTION
    if stage not in (1, 2, 3):
        raise ValueError("bf16 master weights and moments need ZeRO stage 1, 2 or 3")
    if moments == "bf16" and master != "bf16":
        raise ValueError("bf16 moments need bf16 master weights")
    size = {"fp32": 4, "bf16": 2}
    return {"master_weights": round(size[master] * params / ranks),
            "optimizer_states": round(2 * size[moments] * params / ranks)}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex1_state_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("state_bytes", ["zerolab.engine.memory.estimate"], exercise="exercise 1",
           instead="count the bytes a rank keeps yourself")
from zerolab.lesson.checks import close_to, dict_keys

_mine = dict_keys(state_bytes(PARAMS, 2, 3, "bf16", "bf16"), ["master_weights", "optimizer_states"],
                  "state_bytes(PARAMS, 2, 3, 'bf16', 'bf16')")
close_to(_mine["master_weights"], 2 * PARAMS / 3, "state_bytes(PARAMS, 2, 3, 'bf16', 'bf16')['master_weights']",
         0, "bytes", abs_tol=1, hint="a bf16 master weight takes 2 bytes, and stage 2 splits the master copy over the ranks",
         slips={3: "that is every rank's master weights together: give one rank's share",
                2: "counted a bf16 value as 4 bytes: bf16 takes 2",
                0.5: "counted bf16 values (elements), not bytes: a bf16 value takes 2 bytes"})
assert abs(_mine["optimizer_states"] - 2 * _mine["master_weights"]) <= 1, \
    "with bf16 moments Adam keeps two bf16 tensors (momentum and variance) per master weight"
_fp32 = state_bytes(PARAMS, 2, 3, "fp32", "fp32")
assert abs(_fp32["master_weights"] - 2 * _mine["master_weights"]) <= 1, \
    "an fp32 master weight takes 4 bytes, twice bf16's 2"
for _stage, _master, _moments in ((0, "bf16", "bf16"), (2, "fp32", "bf16")):
    try:
        state_bytes(PARAMS, _stage, RANKS, _master, _moments)
    except ValueError:
        pass
    else:
        raise AssertionError(f"state_bytes(PARAMS, {_stage}, RANKS, {_master!r}, {_moments!r}) should raise ValueError: "
                             "DeepSpeed's config class refuses that combination")
### BEGIN HIDDEN TESTS
from zerolab.engine import memory as _memory
from zerolab.lesson.checks import close_to as _close_to, dict_keys as _dict_keys, plain as _plain

for _params in (1_000_003, 7_000_000_000):
    for _stage in (1, 2, 3):
        for _ranks in (1, 3, 8):
            for _master, _moments in (("bf16", "bf16"), ("bf16", "fp32"), ("fp32", "fp32")):
                _expected = _memory.estimate(_params, _stage, gpus_per_node=_ranks, precision="bf16", master=_master,
                                             moments=_moments).breakdown["gpu"]
                _name = f"state_bytes({_params}, {_stage}, {_ranks}, {_master!r}, {_moments!r})"
                _got = _dict_keys(_plain(state_bytes(_params, _stage, _ranks, _master, _moments), _name),
                                  ["master_weights", "optimizer_states"], _name)
                for _key in ("master_weights", "optimizer_states"):
                    _close_to(_got[_key], _expected[_key], f"{_name}[{_key!r}]", 0, "bytes", abs_tol=1,
                              hint="which dtype does each part keep, and into how many shares does ZeRO split it?",
                              slips={0.5: "counted values (elements) of 2 bytes as 1 byte each",
                                     2: "counted a bf16 value as 4 bytes: bf16 takes 2"})
for _stage, _master, _moments in ((0, "fp32", "fp32"), (0, "bf16", "fp32"), (1, "fp32", "bf16"), (3, "fp32", "bf16")):
    try:
        state_bytes(1_000_003, _stage, 4, _master, _moments)
    except ValueError:
        pass
    else:
        raise AssertionError(f"state_bytes(1000003, {_stage}, 4, {_master!r}, {_moments!r}) should raise ValueError")
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Muon: one momentum instead of two moments
#
# Muon (DeepSpeed's optimizer type `"Muon"`, with ZeRO-3 since 0.18.9) turns each hidden matrix's update into an
# orthogonal one with a few Newton-Schulz iterations. It keeps **one** momentum buffer per matrix, in the
# gradients' dtype: 2 bytes per parameter in bf16 training, where Adam keeps two fp32 moments, 8 bytes. <!-- claim: muon-momentum-in-the-gradient-dtype -->
#
# Not every parameter is a hidden matrix. `deepspeed.initialize` gives Muon the 2-D parameters whose names hold
# neither "embed" nor "lm_head"; the embeddings, the output head, the norms and the biases go to an Adam that runs
# beside it, with Adam's two moments. The rule reads names, not roles: the tiny GPT here calls its embeddings
# `tokens` and `positions`, so DeepSpeed hands them to Muon too. Both halves keep fp32 master weights. At stage 3 DeepSpeed accepts Muon only
# with `zero_optimization.reduce_scatter` false. <!-- claim: muon-steps-2d-parameters-but-embeddings-and-head --> <!-- claim: muon-at-stage-3-needs-reduce-scatter-off -->

# %% [markdown] lang="zh" en="a6ff1120049b"
# ## 2. Muon：一个动量代替两个动量
#
# Muon（DeepSpeed 的优化器类型 `"Muon"`，从 0.18.9 起支持 ZeRO-3）用几次 Newton-Schulz 迭代把每个隐藏层矩阵的更新变成正交的更新。它为每个矩阵只保存**一个**动量缓冲区，数据类型与梯度相同：bf16 训练时每个参数 2 字节，而 Adam 保存两个 fp32 动量，共 8 字节。 <!-- claim: muon-momentum-in-the-gradient-dtype -->
#
# 并不是每个参数都是隐藏层矩阵。`deepspeed.initialize` 把名字里既不含 "embed" 也不含 "lm_head" 的二维参数交给 Muon；词嵌入、输出头、归一化层和偏置交给与它并行的一个 Adam，带有 Adam 的两个动量。这条规则看的是名字，而不是作用：本课的小 GPT 把词嵌入叫作 `tokens` 和 `positions`，所以 DeepSpeed 也把它们交给了 Muon。两半都保存 fp32 主权重。在 stage 3，只有 `zero_optimization.reduce_scatter` 为 false 时 DeepSpeed 才接受 Muon。 <!-- claim: muon-steps-2d-parameters-but-embeddings-and-head --> <!-- claim: muon-at-stage-3-needs-reduce-scatter-off -->

# %% [markdown]
# ### Exercise 2: Muon's optimizer state per rank (3 points)
#
# Write `muon_state_bytes(params, muon_params, stage, ranks)`: the bytes one rank keeps of optimizer state (Muon's
# momentum and the Adam half's two moments, master weights apart) when `params` parameters train in bf16 with ZeRO
# `stage` (1-3) on `ranks` ranks and Muon steps `muon_params` of them. Count as the paper does: every part split
# evenly over the ranks. (The measurement below shows where DeepSpeed departs from the even split.) Hidden tests
# check other sizes against `memory.estimate`, off limits in your cell.

# %% [markdown] lang="zh" en="cada668bc779"
# ### 练习 2：每个 rank 的 Muon 优化器状态（3 分）
#
# 编写 `muon_state_bytes(params, muon_params, stage, ranks)`：`params` 个参数以 bf16 训练、ZeRO `stage`（1-3）、`ranks` 个 rank，且其中 `muon_params` 个由 Muon 更新时，一个 rank 保存的优化器状态字节数（Muon 的动量加上 Adam 那一半的两个动量，不含主权重）。按论文的方式计数：每一部分都平均分给各个 rank。（下面的实测会显示 DeepSpeed 在哪里偏离了平均切分。）隐藏测试会用其他规模与 `memory.estimate` 比较，你的单元格里不能使用它。

# %% nbgrader={"grade": false, "grade_id": "ex2_muon_state_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def muon_state_bytes(params, muon_params, stage, ranks):
    """Per-rank bytes of Muon's momentum and the Adam half's moments, bf16 training, split evenly."""
    ### BEGIN SOLUTION
    return round((2 * muon_params + 8 * (params - muon_params)) / ranks)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex2_muon_state_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("muon_state_bytes", ["zerolab.engine.memory.estimate", "zerolab.engine.muon"], exercise="exercise 2",
           instead="count the momentum and the moments yourself")
from zerolab.lesson.checks import close_to

close_to(muon_state_bytes(PARAMS, 0, 1, 3), 8 * PARAMS / 3, "muon_state_bytes(PARAMS, 0, 1, 3)", 0, "bytes",
         abs_tol=1, hint="with no matrix for Muon every parameter goes to the Adam half: two fp32 moments",
         slips={3: "that is every rank's state together: give one rank's share"})
close_to(muon_state_bytes(PARAMS, PARAMS, 1, 3), 2 * PARAMS / 3, "muon_state_bytes(PARAMS, PARAMS, 1, 3)", 0,
         "bytes", abs_tol=1, hint="Muon keeps one momentum per parameter, in the gradients' dtype (bf16 here)",
         slips={3: "that is every rank's state together: give one rank's share",
                2: "counted the momentum in fp32: Muon keeps it in the gradients' dtype, bf16 here",
                4: "counted two fp32 moments for Muon's parameters: Muon keeps one momentum, in bf16 here"})
### BEGIN HIDDEN TESTS
from zerolab.engine import memory as _memory
from zerolab.lesson.checks import close_to as _close_to, plain as _plain

for _params, _muon in ((1_000_003, 700_001), (7_000_000_000, 6_400_000_000)):
    for _stage in (1, 2, 3):
        for _ranks in (1, 3, 8):
            _expected = _memory.estimate(_params, _stage, gpus_per_node=_ranks, precision="bf16", optimizer="muon",
                                         muon_params=_muon).breakdown["gpu"]["optimizer_states"]
            _name = f"muon_state_bytes({_params}, {_muon}, {_stage}, {_ranks})"
            _close_to(_plain(muon_state_bytes(_params, _muon, _stage, _ranks), _name), _expected, _name, 0, "bytes",
                      abs_tol=1, hint="which parameters keep one bf16 momentum, which two fp32 moments, and how many "
                                      "shares?")
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Measure
#
# Three runs of the tiny GPT on two CPU ranks at stage 2, bf16 training: DeepSpeed's default (fp32 master weights
# and moments), bf16 master weights and moments, and Muon. Each table puts what every rank holds next to the
# engine's prediction and, once your exercises pass, yours. The runs skip themselves while the notebook is graded.

# %% [markdown] lang="zh" en="40e5bae325cf"
# ## 3. 实测
#
# 在两个 CPU rank 上以 stage 2、bf16 训练这个小 GPT，跑三次：DeepSpeed 的默认设置（fp32 主权重和动量）、bf16 主权重和动量、以及 Muon。每张表把每个 rank 实际持有的字节数与引擎的预测并排列出；你的练习通过后，还会列出你的预测。评分时这些运行会自动跳过。

# %%
RUNS = {"fp32 master weights and moments": make_config(2, precision="bf16"),
        "bf16 master weights and moments": make_config(2, precision="bf16", master="bf16", moments="bf16"),
        "Muon": make_config(2, precision="bf16", optimizer="muon")}
measured = {}
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    for name, config in RUNS.items():
        print(tr(name) + ":")
        measured[name] = run_in_notebook(config, ranks=RANKS, steps=3)

# %%
for name, result in measured.items():
    s = result.setup
    try:
        if s["update_rule"] == "muon":
            yours = {"optimizer_states": muon_state_bytes(PARAMS, MUON_PARAMS, s["stage"], RANKS)}
        else:
            yours = state_bytes(PARAMS, s["stage"], RANKS, s["master"], s["moments"])
    except Exception as error:  # not answered yet, or not working: the table goes on without your column
        yours = None
        print(tr(f"(no column 'yours' yet: your function raised {type(error).__name__})"))
    print(tr(name) + ":")
    print(result.table(yours=yours), end="\n\n")

# %% [markdown]
# ### What the measurement teaches
#
# - **bf16 master weights and moments** halve the optimizer side to the byte, and the gradient copy the optimizer
#   reads is bf16 too: no fp32 gradient is made inside `step()`. <!-- claim: bf16-master-step-makes-no-fp32-gradient -->
# - **Muon** differs between the ranks at stages 1 and 2. Newton-Schulz needs a whole matrix, and DeepSpeed splits
#   the flat buffer of Muon's matrices (sorted by shape, largest first) at element boundaries: a matrix that
#   straddles two ranks' partitions keeps its whole momentum on both. The even split of exercise 2 is the paper's
#   view; the engine's per-rank prediction (`zerolab.engine.muon.rank_bytes`) counts the straddling matrix. At
#   stage 3 each parameter is split on its own and the ranks agree again. <!-- claim: muon-straddling-matrix-momentum-on-both-ranks -->

# %% [markdown] lang="zh" en="7962d464bc0b"
# ### 实测告诉我们什么
#
# - **bf16 主权重和动量**让优化器这一侧的字节数精确减半，优化器读取的梯度副本也是 bf16：`step()` 里不会生成 fp32 梯度。 <!-- claim: bf16-master-step-makes-no-fp32-gradient -->
# - **Muon** 在 stage 1 和 2 下各个 rank 的字节数不同。Newton-Schulz 需要完整的矩阵，而 DeepSpeed 按元素边界切分 Muon 矩阵的展平缓冲区（矩阵按形状从大到小排序）：跨在两个 rank 分区之间的矩阵，会在两个 rank 上都保存完整的动量。练习 2 的平均切分是论文的视角；引擎的逐 rank 预测（`zerolab.engine.muon.rank_bytes`）把跨分区的矩阵算了进去。到了 stage 3，每个参数单独切分，各 rank 又一致了。 <!-- claim: muon-straddling-matrix-momentum-on-both-ranks -->

# %% [markdown]
# ## 4. `loss.backward()` or `engine.backward(loss)`
#
# DeepSpeed's examples call `engine.backward(loss)`. Since 0.18.3 a ZeRO engine (stages 1-3) also accepts the
# plain PyTorch call, `loss.backward()`, on a loss computed by `engine(...)`, and trains exactly as
# `engine.backward(loss)` would: DeepSpeed still divides the gradients by `gradient_accumulation_steps` itself.
# Without ZeRO (stage 0) it refuses the plain call and says to use `engine.backward(loss)`. <!-- claim: torch-style-backward-scales-by-gas --> <!-- claim: stage0-refuses-torch-style-backward -->
#
# The trap is the habit plain PyTorch teaches: dividing the loss by the accumulation steps before `backward()`.
# DeepSpeed divides too, so the gradients come out divided twice. <!-- claim: dividing-the-loss-by-gas-scales-twice -->
#
# The next cell trains the tiny GPT on two CPU ranks three times from the same seed, ZeRO-2, two micro-steps per
# optimizer step, torch's SGD and no clipping (Adam and DeepSpeed's default clipping of 1.0 would both hide a
# gradient scaled by a constant), and prints the gradient norm DeepSpeed computed at each step and how far each
# run's parameters end from the `engine.backward` run's.

# %% [markdown] lang="zh" en="6644320663fc"
# ## 4. `loss.backward()` 还是 `engine.backward(loss)`
#
# DeepSpeed 的示例调用的是 `engine.backward(loss)`。从 0.18.3 起，ZeRO 引擎（stage 1-3）也接受 PyTorch 的普通写法：对 `engine(...)` 算出的 loss 调用 `loss.backward()`，训练结果与 `engine.backward(loss)` 完全相同：DeepSpeed 仍然自己把梯度除以 `gradient_accumulation_steps`。不用 ZeRO（stage 0）时，它拒绝这种普通写法，并提示改用 `engine.backward(loss)`。 <!-- claim: torch-style-backward-scales-by-gas --> <!-- claim: stage0-refuses-torch-style-backward -->
#
# 陷阱在于普通 PyTorch 教给我们的习惯：在 `backward()` 之前先把 loss 除以累积步数。DeepSpeed 自己也会除，于是梯度被除了两次。 <!-- claim: dividing-the-loss-by-gas-scales-twice -->
#
# 下一个单元格在两个 CPU rank 上从同一个随机种子把小 GPT 训练三遍：ZeRO-2，每个优化器步两个微步，使用 torch 的 SGD，不做裁剪（Adam 和 DeepSpeed 默认的 1.0 裁剪都会掩盖被乘上常数的梯度），然后打印 DeepSpeed 在每一步算出的梯度范数，以及每次运行结束时的参数与 `engine.backward` 那次相差多少。

# %%
from zerolab.run import backward

if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    print(backward.table(backward.compare(stage=2, ranks=RANKS)))

# %% [markdown]
# ### Exercise 3: the plain call (1 point)
#
# Your config is ZeRO-2 with `gradient_accumulation_steps` 4, and your loop runs
# `loss = engine(tokens, targets)` then `engine.backward(loss)`. Which replacement updates the model exactly as
# before?
#
# - A: `loss = engine(tokens, targets)` then `(loss / 4).backward()`
# - B: `loss = engine(tokens, targets)` then `loss.backward()`
# - C: `loss = engine(tokens, targets)` then `engine.backward(loss / 4)`
# - D: none of these: DeepSpeed refuses `loss.backward()` on every engine
#
# Set `BACKWARD` to a letter.

# %% [markdown] lang="zh" en="8f1e90c08dbb"
# ### 练习 3：普通写法（1 分）
#
# 你的配置是 ZeRO-2，`gradient_accumulation_steps` 为 4，训练循环先执行 `loss = engine(tokens, targets)`，再执行 `engine.backward(loss)`。下面哪种替换方式对模型的更新与原来完全相同？
#
# - A：`loss = engine(tokens, targets)`，然后 `(loss / 4).backward()`
# - B：`loss = engine(tokens, targets)`，然后 `loss.backward()`
# - C：`loss = engine(tokens, targets)`，然后 `engine.backward(loss / 4)`
# - D：都不行：DeepSpeed 在任何引擎上都拒绝 `loss.backward()`
#
# 把 `BACKWARD` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex3_backward", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
BACKWARD = "B"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex3_backward", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson import new_features
from zerolab.lesson.checks import choice
from zerolab.lesson.reveal import passed

_letter = choice(BACKWARD, "ABCD", "BACKWARD")
assert new_features.is_right("BACKWARD", _letter), \
    "BACKWARD is not right: compare the gradient norms of the three runs above; who divides by the accumulation steps?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("BACKWARD", ["zerolab.lesson.new_features"], exercise="exercise 3",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import new_features as _keys
from zerolab.lesson.checks import choice as _choice, plain as _plain

assert _choice(_plain(BACKWARD, "BACKWARD"), "ABCD", "BACKWARD") == _keys.key("BACKWARD"), "BACKWARD is not right"
### END HIDDEN TESTS
passed("BACKWARD")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **B.** DeepSpeed divides each micro-step's gradients by `gradient_accumulation_steps` in both calls, so A and C
# divide twice: their gradients are a quarter of the right ones, and SGD's steps shrink with them. D holds only
# without ZeRO (stage 0).
#
# </details>

# %% [markdown] lang="zh" en="8fad85d5c864"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **B。** 两种调用方式下，DeepSpeed 都会把每个微步的梯度除以 `gradient_accumulation_steps`，所以 A 和 C 除了两次：它们的梯度只有正确值的四分之一，SGD 的步长也随之变小。D 只在不用 ZeRO（stage 0）时成立。
#
# </details>

# %% [markdown]
# ## 5. A ZeRO-3 hang, and how to end it
#
# Under ZeRO-3 every rank gathers a layer's parameters when that layer runs. If one rank skips a layer (a branch
# that depends on its data), the ranks stop making the same collectives in the same order, and each waits for a
# partner that never comes: the job hangs.
#
# The next cell reproduces it on two CPU ranks: a three-layer network, every parameter partitioned
# (`stage3_param_persistence_threshold` 0: the default keeps layers this small whole), and rank 1 skips the middle
# layer `l1` in step 1. torch.distributed is started with a 10-second timeout
# (`deepspeed.init_distributed(dist_backend="gloo", timeout=datetime.timedelta(seconds=10))`), so a stuck rank raises
# instead of waiting for ever, and each rank reports where it was waiting, read from its traceback. It takes about
# 15 seconds. <!-- claim: gloo-timeout-ends-zero3-hang -->

# %% [markdown] lang="zh" en="ad86275a7ecc"
# ## 5. 一次 ZeRO-3 挂起，以及如何结束它
#
# 在 ZeRO-3 下，每一层运行时每个 rank 都要 gather 这一层的参数。如果某个 rank 跳过了一层（一个依赖于数据的分支），各个 rank 就不再按相同的顺序做相同的集合通信，每个 rank 都在等一个永远不会来的对方：作业挂起。
#
# 下一个单元格在两个 CPU rank 上复现它：一个三层网络，每个参数都被切分（`stage3_param_persistence_threshold` 为 0：默认值会让这么小的层保持完整），rank 1 在第 1 步跳过中间层 `l1`。torch.distributed 启动时设置了 10 秒超时（`deepspeed.init_distributed(dist_backend="gloo", timeout=datetime.timedelta(seconds=10))`），所以卡住的 rank 会抛出异常而不是永远等下去，每个 rank 都从自己的 traceback 中报告它在等什么。大约需要 15 秒。 <!-- claim: gloo-timeout-ends-zero3-hang -->

# %%
from zerolab.run import hang

if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    print(hang.describe(hang.reproduce(fix="none", timeout_s=10)))

# %% [markdown]
# Neither rank waits for the layer that was skipped. Rank 0 ran every layer and waits in backward, in the
# reduce-scatter of the gradients; rank 1 waits in forward, at the next layer `l2`, for an all-gather. Both had
# fetched the whole small model ahead in step 1, along the order step 0 recorded; when rank 1 met `l2` where `l1` was
# expected, DeepSpeed dropped that order and what it had fetched, and asked for `l2` again. Whichever rank reaches
# the timeout first raises it; gloo then closes the connection, which ends the other's wait too ("Connection closed
# by peer"). <!-- claim: zero3-skip-hangs-in-different-collectives -->
#
# On a real cluster set the timeout well above your slowest step, and when it fires, read each rank's traceback:
# which collective, and which line of your model.

# %% [markdown] lang="zh" en="207ffdf30315"
# 两个 rank 都不是在等被跳过的那一层。rank 0 跑完了每一层，在反向中等待梯度的 reduce-scatter；rank 1 在前向中、在下一层 `l2` 处等待一次 all-gather。在第 1 步，两个 rank 都已沿着第 0 步记录下的顺序预取了整个小模型；当 rank 1 在本该是 `l1` 的位置遇到 `l2` 时，DeepSpeed 丢弃了这个顺序和已经取来的参数，又去请求 `l2`。先到达超时的 rank 抛出超时异常；随后 gloo 关闭连接，另一个 rank 的等待也随之结束（"Connection closed by peer"）。 <!-- claim: zero3-skip-hangs-in-different-collectives -->
#
# 在真实集群上，把超时设得远大于最慢的一步；超时触发时，读每个 rank 的 traceback：是哪个集合通信，在你模型的哪一行。

# %% [markdown]
# ### Exercise 4: the fix (1 point)
#
# Which change lets rank 1 skip `l1` safely, both ranks finishing with the same parameters?
#
# - A: set `stage3_param_persistence_threshold` high enough that every parameter stays whole on every rank
# - B: register `l1`'s parameters on the network with `deepspeed.zero.register_external_parameter`
# - C: set `stage3_prefetch_bucket_size` to 0, so nothing is fetched ahead
# - D: run `l1` on every rank, and on the rank that skips it add `0 * output.sum()` instead of using its output
#
# Set `FIX` to a letter. The next cell runs A, B and D for you (about 30 seconds) once you have answered.

# %% [markdown] lang="zh" en="bfcffb62755f"
# ### 练习 4：修复（1 分）
#
# 下面哪种改动能让 rank 1 安全地跳过 `l1`，使两个 rank 都结束训练并得到相同的参数？
#
# - A：把 `stage3_param_persistence_threshold` 设得足够大，让每个参数在每个 rank 上都保持完整
# - B：用 `deepspeed.zero.register_external_parameter` 把 `l1` 的参数注册到整个网络上
# - C：把 `stage3_prefetch_bucket_size` 设为 0，什么都不提前取
# - D：在每个 rank 上都运行 `l1`，在要跳过它的 rank 上不用它的输出，而是加上 `0 * output.sum()`
#
# 把 `FIX` 设为一个字母。回答之后，下一个单元格会替你运行 A、B 和 D（大约 30 秒）。

# %% nbgrader={"grade": false, "grade_id": "ex4_hang_fix", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
FIX = "D"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex4_hang_fix", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson import new_features
from zerolab.lesson.checks import choice
from zerolab.lesson.reveal import passed

_letter = choice(FIX, "ABCD", "FIX")
assert _letter != new_features.letter("FIX", "prefetch_0"), \
    "FIX is not right: with nothing fetched ahead, the ranks' all-gathers pair up in the wrong order instead"
assert new_features.is_right("FIX", _letter), \
    "FIX is not right: what must every rank do at each layer for their collectives to match?"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("FIX", ["zerolab.lesson.new_features"], exercise="exercise 4",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import new_features as _keys
from zerolab.lesson.checks import choice as _choice, plain as _plain

assert _choice(_plain(FIX, "FIX"), "ABCD", "FIX") == _keys.key("FIX"), "FIX is not right"
### END HIDDEN TESTS
passed("FIX")

# %%
from zerolab.lesson.reveal import revealed

if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
elif revealed("FIX"):
    for fix, option in (("persist", "A"), ("external", "B"), ("mask", "D")):
        print(f"{option}:")
        print(hang.describe(hang.reproduce(fix=fix, timeout_s=10)))

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **D.** The ranks must make the same collectives in the same order, so every rank runs every module; the skipping
# rank keeps `l1` in its graph with a zero weight, and its gradients (zeros) are reduced like the others'. A and B
# still hang: once rank 1 leaves the recorded order, DeepSpeed releases even the parameters it would have kept whole,
# and fetches them again. C turns the hang into a crash: the ranks' all-gathers pair up in order, `l1`'s against
# `l2`'s, and gloo aborts on the size that does not match. <!-- claim: zero3-every-rank-runs-every-module --> <!-- claim: zero3-persistence-and-external-parameters-still-hang --> <!-- claim: zero3-prefetch-0-pairs-all-gathers-in-order -->
#
# </details>

# %% [markdown] lang="zh" en="291b90f7f7a7"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **D。** 各个 rank 必须按相同的顺序做相同的集合通信，所以每个 rank 都要运行每个模块；要跳过的 rank 以零权重把 `l1` 留在计算图里，它的梯度（全为零）和其他梯度一样参与规约。A 和 B 仍会挂起：rank 1 一旦偏离记录下的顺序，DeepSpeed 连本该保持完整的参数也会释放，然后重新去取。C 把挂起变成崩溃：各个 rank 的 all-gather 按顺序配对，`l1` 的对上了 `l2` 的，gloo 发现大小不一致就中止了。 <!-- claim: zero3-every-rank-runs-every-module --> <!-- claim: zero3-persistence-and-external-parameters-still-hang --> <!-- claim: zero3-prefetch-0-pairs-all-gathers-in-order -->
#
# </details>

# %% [markdown]
# ## 6. Which newer feature, when
#
# ZeRO itself has not changed since lesson 01; what DeepSpeed added around it each answers one bottleneck. The
# figures are DeepSpeed's own, from the pages linked, measured on GPUs; after exercise 5 you run on CPU ranks those
# features that DeepSpeed's CPU accelerator supports:
#
# | feature | the bottleneck it attacks | DeepSpeed's published figure | what DeepSpeed's pages say it needs |
# |---|---|---|---|
# | DeepCompile | ZeRO's collectives sit in Python hooks the compiler cannot schedule | "up to 1.28× speedup over ZeRO-3 on Llama-3-70B" (32 H100, sequence 1024); up to 7× with offloading on half the GPUs ([blog](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/deepcompile)) | CUDA, torch ≥ 2.6, ZeRO 1-3, `"compile": {"deepcompile": true}` and `engine.compile()` |
# | ZenFlow | under ZeRO-Offload the GPU waits for the CPU's Adam and for PCIe | "up to 5× end-to-end speed-up over ZeRO-Offload", "> 85% reduction in GPU stalls" ([blog](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/deepspeed-zenflow)) | CPU optimizer offload at ZeRO 1-2, `zero_optimization.zenflow` |
# | SuperOffload | offload designed for PCIe under-uses a Superchip's 900 GB/s CPU-GPU link | up to 600 TFLOPS fine-tuning Qwen3-14B on one GH200, "up to 4× higher throughput compared to prior work such as ZeRO-Offload" ([blog](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/deepspeed-superoffload)) | a Grace-Hopper (or similar) Superchip, ZeRO-3, `offload_optimizer.super_offload` |
# | AutoTP training | ZeRO-3's gathers cost too much and ZeRO-1/2 do not fit | no speed figure published; the same accuracy as plain ZeRO ([blog](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/huggingface-tp)) | a Hugging Face model, fast links inside the tensor-parallel group, `"tensor_parallel": {"autotp_size": N}` |
# | Ulysses / ALST | activations grow with the sequence, and ZeRO does not split them | Llama-8B at "500K tokens on a single H100 GPU, 3.7M on a single node, and 15M [...] using just four nodes" ([tutorial](https://www.deepspeed.ai/tutorials/ulysses-alst-sequence-parallelism/)) | attention heads divisible by the ranks, the `mpu` it returns passed to `deepspeed.initialize` |
# | ZeRO++ | the bytes of ZeRO-3's collectives over a slow network | "reduces communication volume by 4x compared to ZeRO baseline", "up to 2.16x better throughput at 384 GPU scale" ([tutorial](https://www.deepspeed.ai/tutorials/zeropp/), [paper](https://arxiv.org/abs/2306.10209)) | ZeRO-3, `zero_quantized_weights`, `zero_hpz_partition_size`, `zero_quantized_gradients` |

# %% [markdown] lang="zh" en="04dc648b37fb"
# ## 6. 什么时候用哪个新特性
#
# 从第 01 课以来 ZeRO 本身没有变；DeepSpeed 在它周围新增的东西，各自针对一个瓶颈。下面的数字是 DeepSpeed 自己公布的，出自所附链接的页面，在 GPU 上测得；做完练习 5 之后，你会在 CPU rank 上运行 DeepSpeed 的 CPU 加速器支持的那几个特性：
#
# | 特性 | 它针对的瓶颈 | DeepSpeed 公布的数字 | DeepSpeed 的页面说它需要什么 |
# |---|---|---|---|
# | DeepCompile | ZeRO 的集合通信藏在编译器无法调度的 Python 钩子里 | "up to 1.28× speedup over ZeRO-3 on Llama-3-70B"（32 张 H100，序列长度 1024）；开启卸载、只用一半 GPU 时最高 7 倍（[博客](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/deepcompile)） | CUDA、torch ≥ 2.6、ZeRO 1-3、`"compile": {"deepcompile": true}` 以及 `engine.compile()` |
# | ZenFlow | 在 ZeRO-Offload 下，GPU 要等 CPU 上的 Adam 和 PCIe | "up to 5× end-to-end speed-up over ZeRO-Offload"、"> 85% reduction in GPU stalls"（[博客](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/deepspeed-zenflow)） | ZeRO 1-2 下的 CPU 优化器卸载、`zero_optimization.zenflow` |
# | SuperOffload | 为 PCIe 设计的卸载用不满超级芯片 900 GB/s 的 CPU-GPU 链路 | 在一块 GH200 上全参数微调 Qwen3-14B 最高 600 TFLOPS，"up to 4× higher throughput compared to prior work such as ZeRO-Offload"（[博客](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/deepspeed-superoffload)） | Grace-Hopper（或类似的）超级芯片、ZeRO-3、`offload_optimizer.super_offload` |
# | AutoTP 训练 | ZeRO-3 的 gather 代价太高，而 ZeRO-1/2 又放不下 | 没有公布速度数字；精度与普通 ZeRO 相同（[博客](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/huggingface-tp)） | Hugging Face 模型、张量并行组内部的高速链路、`"tensor_parallel": {"autotp_size": N}` |
# | Ulysses / ALST | 激活随序列长度增长，而 ZeRO 不切分激活 | Llama-8B 上 "500K tokens on a single H100 GPU, 3.7M on a single node, and 15M [...] using just four nodes"（[教程](https://www.deepspeed.ai/tutorials/ulysses-alst-sequence-parallelism/)） | 注意力头数能被 rank 数整除、把它返回的 `mpu` 传给 `deepspeed.initialize` |
# | ZeRO++ | 慢速网络上 ZeRO-3 集合通信的字节数 | "reduces communication volume by 4x compared to ZeRO baseline"、"up to 2.16x better throughput at 384 GPU scale"（[教程](https://www.deepspeed.ai/tutorials/zeropp/)、[论文](https://arxiv.org/abs/2306.10209)） | ZeRO-3、`zero_quantized_weights`、`zero_hpz_partition_size`、`zero_quantized_gradients` |

# %% [markdown]
# ### Exercise 5: pick the feature (2 points)
#
# For each situation, the first feature to reach for, by the bottleneck it names:
#
# - **S1**: Llama-3-70B, ZeRO-3 on 32 H100 (4 nodes, 8 × 400 Gb/s InfiniBand each), sequence 1024. It fits with
#   room to spare, but the profiler shows each all-gather issued just in time, not overlapped, on a wire far from
#   full.
# - **S2**: full fine-tuning of Llama-2-7B on one server with 4 A100-40GB on PCIe Gen4. ZeRO-2 alone runs out of
#   memory, so the optimizer was offloaded to the CPU; the step went from 0.5 s to over 7 s, the GPUs idle most of it.
# - **S3**: full fine-tuning of Qwen3-14B on one GH200 (96 GB of HBM, 480 GB on the Grace CPU, NVLink-C2C between
#   them); 14B × 16 bytes of model states do not fit in the HBM.
# - **S4**: Llama-3.1-8B on 256K-token documents on one node of 8 H100-80GB. ZeRO-3 runs out of memory above 32K
#   tokens, although the model states are only 16 GB a GPU.
# - **S5**: a 30B GPT pre-trained with ZeRO-3 on 384 GPUs (48 nodes of 8) joined by one 100 Gb/s network; the step
#   time is cross-node all-gather and reduce-scatter.
#
# Set `PICKS` to a dict from `"S1"`…`"S5"` to one of `"deepcompile"`, `"zenflow"`, `"superoffload"`, `"autotp"`,
# `"ulysses"`, `"zeropp"`. A wrong pick is answered with the reason it does not fit.

# %% [markdown] lang="zh" en="65510cbf787d"
# ### 练习 5：选出特性（2 分）
#
# 对每个场景，按它点出的瓶颈，选出最先应该用的特性：
#
# - **S1**：Llama-3-70B，在 32 张 H100 上用 ZeRO-3（4 个节点，每个节点 8 × 400 Gb/s InfiniBand），序列长度 1024。显存绰绰有余，但 profiler 显示每次 all-gather 都是临用时才发出、没有重叠，而网络远没有跑满。
# - **S2**：在一台装有 4 张 A100-40GB、PCIe Gen4 的服务器上全参数微调 Llama-2-7B。只用 ZeRO-2 会显存不足，于是把优化器卸载到了 CPU；每步时间从 0.5 秒涨到 7 秒以上，GPU 大部分时间在空等。
# - **S3**：在一块 GH200 上全参数微调 Qwen3-14B（96 GB HBM，Grace CPU 上 480 GB 内存，两者之间是 NVLink-C2C）；14B × 16 字节的模型状态放不进 HBM。
# - **S4**：在一个 8 × H100-80GB 的节点上用 256K token 的文档训练 Llama-3.1-8B。超过 32K token 时 ZeRO-3 就显存不足，尽管每张 GPU 上的模型状态只有 16 GB。
# - **S5**：在 384 张 GPU（48 个节点，每个 8 张）上用 ZeRO-3 预训练一个 30B 的 GPT，节点之间只有一张 100 Gb/s 的网络；每步的时间都花在跨节点的 all-gather 和 reduce-scatter 上。
#
# 把 `PICKS` 设为一个 dict，键是 `"S1"`…`"S5"`，值是 `"deepcompile"`、`"zenflow"`、`"superoffload"`、`"autotp"`、`"ulysses"`、`"zeropp"` 之一。选错时，反馈会说明它为什么不合适。

# %% nbgrader={"grade": false, "grade_id": "ex5_picks", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
PICKS = {"S1": "deepcompile", "S2": "zenflow", "S3": "superoffload", "S4": "ulysses", "S5": "zeropp"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex5_picks", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson import new_features
from zerolab.lesson.checks import choice, dict_keys
from zerolab.lesson.reveal import passed

_picks = dict_keys(PICKS, new_features.SITUATIONS, "PICKS")
for _situation in new_features.SITUATIONS:
    _feature = choice(_picks[_situation], new_features.FEATURES, f"PICKS[{_situation!r}]")
    _why_not = new_features.why_not(_situation, _feature)
    if _why_not is not None:
        _changes, _limit = _why_not
        raise AssertionError(f"PICKS[{_situation!r}] is not right: {_changes}; {_limit}")
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("PICKS", ["zerolab.lesson.new_features"], exercise="exercise 5",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson import new_features as _keys
from zerolab.lesson.checks import choice as _choice, plain as _plain

_given = _plain(PICKS, "PICKS")
assert {_s: _choice(_given[_s], _keys.FEATURES, _s) for _s in _keys.SITUATIONS} == _keys.PICKS, "PICKS is not right"
### END HIDDEN TESTS
passed("PICKS")

# %% [markdown]
# ### Three of them on CPU ranks
#
# The speed-ups above need GPUs, but three of these features run on DeepSpeed's CPU accelerator, where you can see
# what each one changes. The next cells start 2 CPU ranks for each, about 20 seconds in all.
#
# ZenFlow first. A small MLP trains 4 steps on one batch under ZeRO-2 with the optimizer offloaded to DeepSpeed's
# CPU Adam, from the same seed twice: plainly (ZeRO-Offload), and with a `zero_optimization.zenflow` block
# (`topk_ratio` 0.1, `update_interval` 2, `select_strategy` "step" with `select_interval` 2, `overlap_step` false).
# After each step the cell reads the optimizer object: whether DeepSpeed's CPU Adam stepped, which columns of the
# first weight ZenFlow selected (`selected_indices`), and how many columns of that weight changed.
# <!-- claim: zenflow-trains-on-cpu-ranks -->

# %% [markdown] lang="zh" en="7cf1b7fba52f"
# ### 其中三个在 CPU rank 上运行
#
# 上面的加速需要 GPU，但这些特性里有三个能在 DeepSpeed 的 CPU 加速器上运行，在这里就能看到每一个改变了什么。接下来的单元格为每个特性启动 2 个 CPU rank，总共大约 20 秒。
#
# 先看 ZenFlow。一个小 MLP 在同一个 batch 上训练 4 步，使用 ZeRO-2，优化器卸载到 DeepSpeed 的 CPU Adam，从同一个随机种子出发训练两遍：一遍不加别的（ZeRO-Offload），一遍加上 `zero_optimization.zenflow` 块（`topk_ratio` 0.1，`update_interval` 2，`select_strategy` 为 "step"、`select_interval` 2，`overlap_step` 为 false）。每一步之后，单元格读取优化器对象：DeepSpeed 的 CPU Adam 这一步有没有更新，ZenFlow 在第一个权重里选中了哪些列（`selected_indices`），以及这个权重有多少列发生了变化。
# <!-- claim: zenflow-trains-on-cpu-ranks -->

# %%
from zerolab.run import features

if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    _zenflow_runs = features.compare(("zenflow",))
    print(features.zenflow_table(_zenflow_runs))
    _zenflow = _zenflow_runs["zenflow"][0]["ZenFlow"]
    print(tr(f"ZenFlow's optimizer: {_zenflow['optimizer']} over {_zenflow['cpu_optimizer']}; "
             f"gradient_accumulation_steps: {_zenflow['gradient_accumulation_steps']}"))
    print(tr(f"after deepspeed.initialize, the model's weights unchanged: {_zenflow['weights_kept']}; "
             f"each 2-D weight holding its transpose's values: {_zenflow['weights_transposed_in_place']}"))

# %% [markdown]
# Both losses fall. ZenFlow set `gradient_accumulation_steps` to its `update_interval`, so DeepSpeed's CPU Adam
# stepped only every second step, with the gradients summed since. On the steps between, only the columns ZenFlow
# selected changed: those with the largest gradients, `topk_ratio` of them, which its selective AdamW updated at
# once, without the CPU. That is ZenFlow's bet: the few important columns cannot wait, the rest can wait for the CPU.
# <!-- claim: zenflow-selected-columns-between-cpu-steps -->
#
# The first losses differ although nothing had stepped: ZenFlow lays each 2-D weight out column by column, and
# DeepSpeed 0.19.8's `initialize` reads that buffer back in the weight's own shape, so each 2-D weight starts out
# holding its transpose's values (the last line). A random start does not mind; with a pretrained model, compare
# the weights after `initialize`. <!-- claim: zenflow-initialize-transposes-weights -->

# %% [markdown] lang="zh" en="3a1dbb0c0459"
# 两条 loss 都在下降。ZenFlow 把 `gradient_accumulation_steps` 设成了它的 `update_interval`，所以 DeepSpeed 的 CPU Adam 每隔一步才更新一次，用的是这期间累加的梯度。在两次之间的那些步里，只有 ZenFlow 选中的列发生了变化：梯度最大的那些列，占 `topk_ratio`，由它的选择性 AdamW 立即更新，不等 CPU。这就是 ZenFlow 的赌注：少数重要的列等不得，其余的列可以等 CPU。
# <!-- claim: zenflow-selected-columns-between-cpu-steps -->
#
# 还没有任何更新，第一步的 loss 就不同了：ZenFlow 把每个 2 维权重按列排布，而 DeepSpeed 0.19.8 的 `initialize` 又按权重自己的形状把这块缓冲区读回来，于是每个 2 维权重一开始装的是它转置的值（最后一行）。随机初始化的模型不在乎这一点；如果是预训练模型，请在 `initialize` 之后比对一下权重。 <!-- claim: zenflow-initialize-transposes-weights -->

# %% [markdown]
# AutoTP next. A tiny Llama is built from a transformers config (no download: hidden size 64, 2 layers, 4 heads) and
# trained under ZeRO-1 with `"tensor_parallel": {"autotp_size": 2}`. DeepSpeed replaces each projection by a layer
# that holds half of its weight: split by output for q, k, v, gate and up (`LinearLayer`), by input for o and down
# (`LinearAllreduce`, which sums the ranks' partial outputs). The next cell prints each projection of the first layer,
# the whole weight next to rank 0's half, and the first loss next to the same model's without tensor parallelism.
# The 2 ranks form one tensor-parallel group, and the cell prints how many data-parallel ranks that leaves.
# <!-- claim: autotp-halves-every-projection -->

# %% [markdown] lang="zh" en="6ac55d9d4de6"
# 接下来是 AutoTP。从 transformers 的配置建出一个很小的 Llama（不下载：hidden size 64，2 层，4 个头），在 ZeRO-1 下用 `"tensor_parallel": {"autotp_size": 2}` 训练。DeepSpeed 把每个投影层换成只持有一半权重的层：q、k、v、gate 和 up 按输出切分（`LinearLayer`），o 和 down 按输入切分（`LinearAllreduce`，它把各个 rank 的部分输出相加）。下一个单元格打印第一层的每个投影：完整的权重和 rank 0 持有的一半并列，以及第一步的 loss 和同一个模型不用张量并行时的 loss 并列。2 个 rank 组成一个张量并行组，单元格也打印出这样还剩几个数据并行 rank。
# <!-- claim: autotp-halves-every-projection -->

# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    _autotp_runs = features.compare(("autotp",))
    print(features.autotp_table(_autotp_runs))
    _autotp = _autotp_runs["autotp"][0]
    print(tr(f"loss without tensor parallelism {_autotp['reference_loss']:.6f}, with AutoTP on 2 ranks "
             f"{_autotp['losses'][0]:.6f}; data-parallel ranks: {_autotp['data_parallel_ranks']}"))

# %% [markdown]
# Ulysses splits the sequence instead. `UlyssesSPAttentionHF.register_with_transformers(...,
# sequence_parallel_size=2)` wraps the same Llama's sdpa attention and returns the `mpu` passed to
# `deepspeed.initialize` (ZeRO-3 here). Each rank is given its half of a 16-token sequence, with the labels shifted
# before the split, as DeepSpeed's data-loader adapter does, and the ranks add up their losses into the whole
# sequence's. The next cell prints which tokens each rank held and the loss it got, next to the loss of the whole
# sequence on one process. <!-- claim: ulysses-reproduces-unsharded-loss -->

# %% [markdown] lang="zh" en="6091def44f2f"
# Ulysses 切分的则是序列。`UlyssesSPAttentionHF.register_with_transformers(..., sequence_parallel_size=2)` 包装同一个 Llama 的 sdpa 注意力，并返回要传给 `deepspeed.initialize` 的 `mpu`（这里用 ZeRO-3）。一个 16 个 token 的序列，每个 rank 拿到其中一半，标签在切分之前就已移位，和 DeepSpeed 的数据加载适配器的做法一样；各个 rank 再把自己的 loss 合成整个序列的 loss。下一个单元格打印每个 rank 持有哪些 token、得到的 loss，以及在一个进程上处理整个序列时的 loss。 <!-- claim: ulysses-reproduces-unsharded-loss -->

# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    _ulysses_runs = features.compare(("ulysses",))
    for _rank, _found in enumerate(_ulysses_runs["ulysses"]):
        print(tr(f"rank {_rank}: tokens {_found['local_positions'][0]} to {_found['local_positions'][-1]} of "
                 f"{_found['sequence']}, loss {_found['loss']:.6f}; the whole sequence on one process "
                 f"{_found['reference_loss']:.6f}"))

# %% [markdown]
# SuperOffload and DeepCompile do not run here. The next cell asks DeepSpeed on 2 CPU ranks: DeepCompile's own
# check, `deepspeed.compile.util.is_deepcompile_supported()` (torch 2.6 or later and a CUDA accelerator), and
# `deepspeed.initialize` with ZeRO-3 and `offload_optimizer.super_offload` true, whose error it prints as raised.
# Their figures in the table above stay DeepSpeed's own. <!-- claim: deepcompile-needs-cuda --> <!-- claim: superoffload-refuses-cpu -->

# %% [markdown] lang="zh" en="2e058e5398fd"
# SuperOffload 和 DeepCompile 在这里无法运行。下一个单元格在 2 个 CPU rank 上问 DeepSpeed：DeepCompile 自己的检查 `deepspeed.compile.util.is_deepcompile_supported()`（torch 2.6 或更高版本，以及 CUDA 加速器），以及用 ZeRO-3 加上 `offload_optimizer.super_offload` 为 true 调用 `deepspeed.initialize`，并原样打印它抛出的错误。上表中它们的数字仍然只是 DeepSpeed 自己公布的。 <!-- claim: deepcompile-needs-cuda --> <!-- claim: superoffload-refuses-cpu -->

# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    _refusals = features.compare(("refusals",))["refusals"][0]
    print(tr(f"deepspeed.compile.util.is_deepcompile_supported(): {_refusals['deepcompile_supported']}"))
    print(tr(f"SuperOffload: {_refusals['superoffload']['type']}: {_refusals['superoffload']['message']}"))

# %% [markdown]
# ## 7. ZeRO++: fewer bytes across nodes
#
# Between nodes the network is slower than inside one, and ZeRO-3 sends every step across it: an all-gather of the
# parameters for forward, another for backward, and a reduce-scatter of the gradients. Call M the bytes of the
# 16-bit model; in the ZeRO++ blog's accounting that is M + M + M = 3M per step. ZeRO++ attacks each of the three:
#
# - qwZ (`zero_quantized_weights`) sends the forward all-gather as int8: 0.5M;
# - hpZ (`zero_hpz_partition_size`, ideally the GPUs of one node) keeps a second copy of the parameters sharded
#   only over the node, and gathers backward's parameters from it: 0 across nodes, for more memory per GPU;
# - qgZ (`zero_quantized_gradients`) sends the gradients as int4 through an all-to-all inside, then across, nodes:
#   0.25M.
#
# All three: 0.75M, the blog's "4x" less. They are read by the stage-3 optimizer only: at stages 1-2 DeepSpeed 0.19.8
# ignores them, and `zerolab check` warns. <!-- claim: zero-plus-plus-ignored-below-stage-3 -->
#
# The next cell computes the blog's table for the tiny GPT in bf16.

# %% [markdown] lang="zh" en="86b3d526c97d"
# ## 7. ZeRO++：少走跨节点的字节
#
# 节点之间的网络比节点内部慢，而 ZeRO-3 每一步都要跨节点传输：前向时 all-gather 一次参数，反向时再 all-gather 一次，还要对梯度做一次 reduce-scatter。记 16 位模型的字节数为 M；按 ZeRO++ 博客的算法，每步就是 M + M + M = 3M。ZeRO++ 针对这三项各有一招：
#
# - qwZ（`zero_quantized_weights`）把前向的 all-gather 以 int8 发送：0.5M；
# - hpZ（`zero_hpz_partition_size`，最好等于一个节点的 GPU 数）再保存一份只在节点内切分的参数副本，反向需要的参数从这份副本里 gather：跨节点为 0，代价是每张 GPU 多占一些显存；
# - qgZ（`zero_quantized_gradients`）把梯度量化为 int4，先在节点内、再跨节点做 all-to-all：0.25M。
#
# 三者一起：0.75M，就是博客说的少 "4x"。只有 stage 3 的优化器会读取它们：在 stage 1-2，DeepSpeed 0.19.8 会忽略它们，`zerolab check` 会给出警告。 <!-- claim: zero-plus-plus-ignored-below-stage-3 -->
#
# 下一个单元格为 bf16 的小 GPT 算出博客里的这张表。

# %%
from zerolab.engine import comm

MODEL_BYTES = 2 * PARAMS  # the 16-bit model: the blog's M
for _name, _parts in (("ZeRO-3", {}), ("ZeRO-3 + hpZ", {"hpz": True}),
                      ("ZeRO++ (qwZ + hpZ + qgZ)", {"qwz": True, "hpz": True, "qgz": True})):
    _bytes = comm.zero_plus_plus_cross_node(MODEL_BYTES, **_parts)
    print(tr(f"{_name}: {', '.join(f'{tr(what)} {int(nbytes):,} B' for what, nbytes in _bytes.items())}; "
             f"across nodes {int(sum(_bytes.values())):,} B = {sum(_bytes.values()) / MODEL_BYTES:g}M per step "
             f"(the ZeRO++ blog's accounting)"))

# %% [markdown]
# Now measure hpZ. The next cell starts 4 CPU ranks and calls ranks {0, 1} one node and {2, 3} the other. Each rank
# trains the tiny GPT under ZeRO-3 twice from the same seed, plain and with `zero_hpz_partition_size: 2`, and records
# every collective with its process group: a group with ranks of both nodes crosses nodes. Both runs use
# `stage3_max_reuse_distance: 0` and `stage3_prefetch_bucket_size: 0`, the regime the blog counts: with DeepSpeed's
# defaults a model this small stays gathered from forward to backward, and there is no backward all-gather to save.
# About 15 seconds. <!-- claim: hpz-keeps-backward-all-gather-in-node -->
#
# qwZ and qgZ cannot be measured here: they need DeepSpeed's quantizer kernels, which its CPU accelerator lacks, and
# `deepspeed.initialize` stops with "This op had not been implemented on CPU backend." <!-- claim: zero-plus-plus-ignored-below-stage-3 -->

# %% [markdown] lang="zh" en="2fd65b53ef47"
# 现在实测 hpZ。下一个单元格启动 4 个 CPU rank，把 rank {0, 1} 当作一个节点，{2, 3} 当作另一个。每个 rank 从同一个随机种子出发，在 ZeRO-3 下把小 GPT 训练两遍：一遍不开 hpZ，一遍设置 `zero_hpz_partition_size: 2`，并记录每一次集合通信及其进程组：组里同时有两个节点的 rank，就是跨节点。两遍都设置了 `stage3_max_reuse_distance: 0` 和 `stage3_prefetch_bucket_size: 0`，也就是博客计数时的情形：按 DeepSpeed 的默认值，这么小的模型从前向到反向一直保持 gather 后的状态，反向就没有 all-gather 可省。大约需要 15 秒。 <!-- claim: hpz-keeps-backward-all-gather-in-node -->
#
# qwZ 和 qgZ 在这里无法实测：它们需要 DeepSpeed 的量化 kernel，而它的 CPU 加速器没有这些 kernel，`deepspeed.initialize` 会报错停止："This op had not been implemented on CPU backend." <!-- claim: zero-plus-plus-ignored-below-stage-3 -->

# %%
from zerolab.run import hpz

if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    HPZ_RUNS = hpz.compare()
    print(hpz.table(HPZ_RUNS))
    _plain, _hpz = HPZ_RUNS[0]["ZeRO-3"], HPZ_RUNS[0]["ZeRO-3 + hpZ"]
    print(tr(f"same losses in both runs on every rank: {all(r['ZeRO-3']['losses'] == r['ZeRO-3 + hpZ']['losses'] for r in HPZ_RUNS)}; "
             f"rank 0's secondary partition: {_hpz['secondary_elements']:,} elements, its primary one "
             f"{_hpz['primary_elements']:,}"))

# %% [markdown]
# Across nodes, plain ZeRO-3 all-gathers 2M per step (forward and backward) and reduce-scatters M: the blog's 3M.
# With hpZ, backward's all-gather moves inside the node, and the bytes across nodes fall to 2M; the losses do not
# change. The price is memory: the secondary partition is the model sharded over 2 ranks instead of 4, twice each
# rank's primary share, held from forward until the optimizer step. The "other" column is DeepSpeed's bookkeeping
# (the gradient norm, the order of the modules it records): bytes that do not grow with the model.
#
# PyTorch's FSDP2 offers the same trade. `fully_shard(module, reshard_after_forward=2)` takes an int as "the world
# size to reshard to after forward": each layer stays sharded over 2 ranks, not freed back to its share of all of
# them, and backward gathers it from those 2, as hpZ does. HSDP goes further: with a 2-D device mesh, `fully_shard`
# shards the parameters along one dimension (the GPUs of a node) and replicates them along the other (the nodes).
# <!-- claim: fsdp2-reshard-after-forward-int -->

# %% [markdown] lang="zh" en="138aa62611e7"
# 跨节点的部分，不开 hpZ 的 ZeRO-3 每步 all-gather 2M（前向和反向各一次），reduce-scatter M：正是博客的 3M。开了 hpZ，反向的 all-gather 移到了节点内，跨节点的字节降到 2M；loss 不变。代价是内存：第二份分区是把模型切给 2 个 rank 而不是 4 个，是每个 rank 主分区的两倍，从前向一直保留到优化器更新。“其他”一列是 DeepSpeed 的簿记（梯度范数、它记录下的模块顺序）：这些字节不随模型增大。
#
# PyTorch 的 FSDP2 提供同样的取舍。`fully_shard(module, reshard_after_forward=2)` 接受一个整数，表示"前向之后重新切分到的 world size"：每一层前向后仍切分在 2 个 rank 上，而不是退回到所有 rank 各自的一份，反向就从这 2 个 rank 中 gather，和 hpZ 一样。HSDP 更进一步：给 `fully_shard` 一个二维的 device mesh，它沿一个维度（一个节点的 GPU）切分参数，沿另一个维度（各个节点）复制参数。
# <!-- claim: fsdp2-reshard-after-forward-int -->

# %% [markdown]
# ## 8. Loading a model: host memory per rank
#
# A job that fine-tunes a pretrained model builds it on every rank. Built plainly, each rank holds the whole model
# in host memory until `deepspeed.initialize` partitions it, and a node with g ranks holds g whole copies at once:
# the host runs out of memory before ZeRO-3 has saved a byte. `deepspeed.zero.Init` partitions each parameter as its
# module is built, so a rank never holds more than its share of the parameters built so far.
# <!-- claim: zero-init-partitions-as-modules-are-built -->
#
# The next cell gives the rule for a real model, in bytes of parameters per rank and per node.

# %% [markdown] lang="zh" en="c2f8add36d63"
# ## 8. 加载模型：每个 rank 的主机内存
#
# 微调预训练模型的作业会在每个 rank 上建出这个模型。如果直接构建，每个 rank 都在主机内存里持有完整的模型，直到 `deepspeed.initialize` 才把它切分；一个有 g 个 rank 的节点同时持有 g 份完整的副本：ZeRO-3 还没省下一个字节，主机内存就先用光了。`deepspeed.zero.Init` 在每个模块建好时就切分它的参数，所以一个 rank 持有的，从不超过已建好参数中属于它的那一份。
# <!-- claim: zero-init-partitions-as-modules-are-built -->
#
# 下一个单元格给出一个真实模型的规律：每个 rank、每个节点的参数字节数。

# %%
from zerolab.engine import host_memory, models

_llama = models.preset("llama2-70b")
for _ranks_per_node, _nodes in ((8, 1), (8, 8)):
    _world = _ranks_per_node * _nodes
    _plain, _sharded = (host_memory.built_on_every_rank(_llama.params(), 2, _world, zero_init) for zero_init in (False, True))
    print(tr(f"{_llama.name} in bf16 on {_world} ranks, {_ranks_per_node} a node: built plainly {_plain / 1e9:,.1f} GB "
             f"per rank, {_ranks_per_node * _plain / 1e9:,.1f} GB per node; inside zero.Init {_sharded / 1e9:,.2f} GB "
             f"per rank, {_ranks_per_node * _sharded / 1e9:,.2f} GB per node"))

# %% [markdown]
# Now measure it. The next cell starts 2 CPU ranks; each builds the same small Llama from a config (transformers, no
# download, fp32: a 32,000-token vocabulary and 2 layers) twice, plainly and inside `deepspeed.zero.Init`, and
# reports the bytes of parameters it holds and how much its resident memory grew while building. About 20 seconds.

# %% [markdown] lang="zh" en="3db0f5cb31c9"
# 现在来实测。下一个单元格启动 2 个 CPU rank；每个 rank 从配置建出同一个小 Llama（transformers，不下载，fp32：32,000 个 token 的词表，2 层）两次，一次直接构建，一次在 `deepspeed.zero.Init` 里构建，并报告它持有的参数字节数，以及构建期间常驻内存增长了多少。大约需要 20 秒。

# %%
from zerolab.run import load

if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("Real runs are skipped while grading."))
else:
    with torch.device("meta"):
        from transformers import LlamaConfig, LlamaForCausalLM

        _sizes = [p.numel() for p in LlamaForCausalLM(LlamaConfig(**load.MODEL)).parameters()]
    _plain, _sharded = (host_memory.built_on_every_rank(_sizes, 4, load.RANKS, zero_init) for zero_init in (False, True))
    print(tr(f"predicted parameter bytes per rank: built plainly {_plain / 1e6:,.2f} MB, inside zero.Init "
             f"{_sharded / 1e6:,.2f} MB"))
    print(load.table(load.compare()))

# %% [markdown]
# Each rank held the whole model when it built it plainly, and half of it (each parameter's share, padded) inside
# `zero.Init`, as predicted; its resident memory grew by about that much. With 8 ranks on a node, the plain build
# needs 8 copies: for Llama-2-70B in bf16, more than a terabyte of host memory before training starts.

# %% [markdown] lang="zh" en="71e4afbc7238"
# 直接构建时，每个 rank 都持有整个模型；在 `zero.Init` 里构建时，只持有一半（每个参数中属于它的那一份，含填充），和预测一致；它的常驻内存大约也增长了这么多。一个节点上有 8 个 rank 时，直接构建需要 8 份：对 bf16 的 Llama-2-70B 来说，训练还没开始就要超过 1 TB 的主机内存。

# %% [markdown]
# ## Summary
#
# - With `bf16_master_weights_and_grads` and `bf16_optimizer_states`, K is 6 bytes per parameter, not 12,
#   partitioned as before; the price is the precision of small updates.
# - Muon keeps one momentum per matrix in the gradients' dtype, where Adam keeps two fp32 moments; at stages 1-2 a
#   matrix that straddles two partitions keeps its momentum on both ranks.
# - On a ZeRO engine `loss.backward()` trains as `engine.backward(loss)` does; do not divide by the accumulation
#   steps yourself.
# - Every ZeRO-3 rank must run every module in the same order; a timeout turns a hang into a traceback that says
#   where each rank waited.
# - DeepSpeed's newer features each attack one bottleneck: find yours first. On CPU ranks ZenFlow updates the
#   selected columns between CPU Adam steps, AutoTP holds half of every projection and Ulysses half of the sequence,
#   each with the loss of the run without it; SuperOffload and DeepCompile refuse the CPU accelerator.
# - ZeRO-3 moves 3M across nodes per step; hpZ keeps backward's all-gather inside the node (2M, measured), and qwZ
#   and qgZ shrink the rest to 0.75M in the ZeRO++ blog's accounting.
# - A model built on every rank without `zero.Init` is whole on every rank: g copies on a node of g ranks. Inside
#   `deepspeed.zero.Init` each rank keeps only its share.

# %% [markdown] lang="zh" en="9fd9f2a1b7cd"
# ## 小结
#
# - 打开 `bf16_master_weights_and_grads` 和 `bf16_optimizer_states` 后，K 是每个参数 6 字节而不是 12 字节，切分方式不变；代价是小更新的精度。
# - Muon 为每个矩阵保存一个与梯度同类型的动量，而 Adam 保存两个 fp32 动量；在 stage 1-2，跨两个分区的矩阵会在两个 rank 上都保存动量。
# - 在 ZeRO 引擎上，`loss.backward()` 的训练结果与 `engine.backward(loss)` 相同；不要自己再除以累积步数。
# - 每个 ZeRO-3 rank 都必须按相同的顺序运行每个模块；超时能把挂起变成一个 traceback，说明每个 rank 在哪里等待。
# - DeepSpeed 的新特性各自针对一个瓶颈：先找到你的瓶颈。在 CPU rank 上，ZenFlow 在两次 CPU Adam 更新之间只更新选中的列，AutoTP 让每个 rank 持有每个投影的一半，Ulysses 让每个 rank 持有序列的一半，loss 都和不用它们时一致；SuperOffload 和 DeepCompile 拒绝 CPU 加速器。
#
# - ZeRO-3 每步跨节点传输 3M；hpZ 让反向的 all-gather 留在节点内（实测为 2M），qwZ 和 qgZ 按 ZeRO++ 博客的算法再把其余部分降到 0.75M。
# - 不用 `zero.Init` 时，每个 rank 都会建出完整的模型：一个有 g 个 rank 的节点上就有 g 份。在 `deepspeed.zero.Init` 里，每个 rank 只保留自己的那一份。

# %% [markdown]
# ## References
#
# - DeepSpeed 0.18.3 core API update (bf16 master weights and optimizer states, `loss.backward()`):
#   [blogs/core_api_update](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/core_api_update)
# - Muon in DeepSpeed: `deepspeed/runtime/zero/muon/` in DeepSpeed 0.19.8
# - The features of section 6: the blogs and tutorials linked in its table; what runs on CPU ranks:
#   `deepspeed/runtime/zenflow/`, `deepspeed/module_inject/` (AutoTP's layers) and
#   `deepspeed/runtime/sequence_parallel/ulysses_sp.py` in DeepSpeed 0.19.8
# - `torch.distributed.init_process_group(timeout=...)`: PyTorch's distributed documentation
# - ZeRO++: Wang et al., [arXiv:2306.10209](https://arxiv.org/abs/2306.10209), and DeepSpeed's blog,
#   [blogs/zeropp](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/zeropp) (its table of M per collective)
# - FSDP2: `torch.distributed.fsdp.fully_shard` in PyTorch's documentation (`reshard_after_forward`)

# %% [markdown] lang="zh" en="6516de9c87d3"
# ## 参考资料
#
# - DeepSpeed 0.18.3 核心 API 更新（bf16 主权重与优化器状态、`loss.backward()`）：[blogs/core_api_update](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/core_api_update)
# - DeepSpeed 中的 Muon：DeepSpeed 0.19.8 的 `deepspeed/runtime/zero/muon/`
# - 第 6 节的各个特性：见该节表格中的博客和教程链接；在 CPU rank 上运行的部分：DeepSpeed 0.19.8 的 `deepspeed/runtime/zenflow/`、`deepspeed/module_inject/`（AutoTP 的层）和 `deepspeed/runtime/sequence_parallel/ulysses_sp.py`
# - `torch.distributed.init_process_group(timeout=...)`：PyTorch 的分布式文档
# - ZeRO++：Wang 等，[arXiv:2306.10209](https://arxiv.org/abs/2306.10209)，以及 DeepSpeed 的博客 [blogs/zeropp](https://github.com/deepspeedai/DeepSpeed/tree/master/blogs/zeropp)（其中按集合通信列出 M 的表）
# - FSDP2：PyTorch 文档中的 `torch.distributed.fsdp.fully_shard`（`reshard_after_forward`）
