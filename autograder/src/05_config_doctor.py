# %% [markdown]
# # Lesson 05: Config doctor
#
# Most ZeRO problems in practice are not in the code but in the `ds_config`: a key DeepSpeed never reads, a setting
# that only works at another stage, a value only the Hugging Face Trainer understands. DeepSpeed rejects some of these
# loudly and lets others through without a word. In this lesson you read configs like a reviewer, fix one, and
# predict what a change does to memory and traffic before you run anything. <!-- claim: config-blocks-strict-top-level-loose --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: hf-trainer-fills-auto -->

# %% [markdown] lang="zh" en="6630a146173b"
# # 第 05 课：配置诊断
#
# 实际使用 ZeRO 时，大多数问题不出在代码里，而出在 `ds_config` 里：DeepSpeed 根本不读的键、只在另一个 stage 才生效的设置、只有 Hugging Face Trainer 才认识的值。其中有些错误 DeepSpeed 会大声报错，另一些则一声不吭地放过去。本课你会像代码评审一样读配置，修好一份坏掉的配置，并在运行任何东西之前，先预测一次配置改动对显存和通信量的影响。 <!-- claim: config-blocks-strict-top-level-loose --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: hf-trainer-fills-auto -->

# %% [markdown]
# ## Learning goals
#
# After this lesson you can
#
# - say which mistakes DeepSpeed 0.19.8 rejects and which it silently ignores, and why;
# - find the wrong key in a config and name it by its dotted path (`zero_optimization.offload_param`);
# - fix a broken config so that DeepSpeed accepts it and it still means what its author wanted;
# - predict, with zerolab, how much GPU memory and traffic a config change saves or costs.
#
# Four graded exercises follow, each with a test cell. **Hidden tests** run when the notebook is graded: they check
# your answers again as plain JSON data and against zerolab's config doctor (`zerolab.config`), which runs DeepSpeed's
# own config classes.

# %% [markdown] lang="zh" en="e363f81ea20d"
# ## 学习目标
#
# 学完本课，你能够
#
# - 说出哪些错误 DeepSpeed 0.19.8 会拒绝、哪些会被静默忽略，以及原因；
# - 在配置中找出写错的键，并用点分路径（如 `zero_optimization.offload_param`）指出它；
# - 修好一份坏掉的配置，让 DeepSpeed 接受它，同时仍然表达作者的本意；
# - 用 zerolab 预测一次配置改动能省下或多花多少显存和通信量。
#
# 下面有四道计分练习，每道都带一个测试单元格。**隐藏测试**在评分时运行：它们会把你的答案当作纯 JSON 数据再检查一遍，并与 zerolab 的配置诊断工具（`zerolab.config`，内部运行的是 DeepSpeed 自己的配置类）的结果对照。

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import copy
import json

from zerolab.config import import_deepspeed

import_deepspeed()  # DeepSpeed's start-up log stays off the output
from deepspeed.runtime.config import DeepSpeedConfig

from zerolab.engine import units
from zerolab.base.i18n import tr
from zerolab.config import check_config, compare_configs, config_effect, explain_config, read_settings
from zerolab.lesson.reveal import passed, revealed


def show(report):
    print(tr("no errors") if report.valid else tr("errors: DeepSpeed rejects it, or the run fails at start-up"))
    for finding in report.findings:
        print("  ", finding)


# %% [markdown]
# ## How DeepSpeed reads a config
#
# DeepSpeed 0.19.8 validates the **blocks** of a config (`zero_optimization`, its `offload_*` parts, `fp16`, `bf16`)
# with strict pydantic models: an unknown key inside them is an error. The **top level** is different: DeepSpeed
# looks up the keys it knows with `dict.get` and never looks at the rest. A misspelled block name is therefore
# ignored, and everything in it takes its default. Watch both, measured on DeepSpeed itself:
# <!-- claim: config-blocks-strict-top-level-loose --> <!-- claim: offload-fp16-bf16-blocks-strict -->

# %% [markdown] lang="zh" en="ca1aadb953cd"
# ## DeepSpeed 如何读取配置
#
# DeepSpeed 0.19.8 用严格的 pydantic 模型校验配置中的各个**块**（`zero_optimization` 及其中的 `offload_*` 部分、`fp16`、`bf16`）：块里出现未知的键就会报错。**顶层**则不同：DeepSpeed 只用 `dict.get` 查它认识的键，其余的一概不看。所以块名拼错会被直接忽略，块里的所有设置都退回默认值。下面在 DeepSpeed 上实测这两种情况： <!-- claim: config-blocks-strict-top-level-loose --> <!-- claim: offload-fp16-bf16-blocks-strict -->

# %%
inner_typo = {"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_com": True}}
top_typo = {"train_batch_size": 8, "zero_optimisation": {"stage": 2, "overlap_comm": True}}
try:
    DeepSpeedConfig(copy.deepcopy(inner_typo))
except Exception as error:
    print(tr("typo inside zero_optimization:"), type(error).__name__, str(error).splitlines()[0:3])
parsed = DeepSpeedConfig(copy.deepcopy(top_typo))
print(tr("typo in the block name: accepted; ZeRO stage DeepSpeed will use:"), parsed.zero_optimization_stage)

# %% [markdown]
# The second config trains with plain data parallelism and nobody is told. Other things DeepSpeed accepts without a
# word (facts from its 0.19.8 code):
#
# - `offload_param` with stage 1 or 2: the stage 1/2 optimizer never receives it, so parameters stay on the GPU;
# - `device: "nvme"` without `nvme_path`: accepted, then a stage 3 run fails when it builds the swap folder (below
#   stage 3 DeepSpeed offloads to CPU RAM instead);
# - `"auto"` inside `zero_optimization`, `fp16` or `bf16`: **dropped**, and the default used (`"auto"` is something
#   only the Hugging Face Trainer and Accelerate fill in before DeepSpeed sees the config). At the top level, for
#   the batch fields, `"auto"` crashes instead.
#
# And things it rejects: fp16 and bf16 both enabled, batch fields that do not multiply out for the world size,
# features DeepSpeed has removed, such as MiCS (`mics_shard_size`): 0.19.8 raises an error that points to a DeepSpeed issue (References). zerolab's doctor, `check_config(config, world_size)`,
# runs DeepSpeed's own validation for the world size you give and adds checks for the silent cases. Each finding has
# a dotted **path**, a **severity** and a message.
# <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: nvme-without-path-accepted --> <!-- claim: auto-dropped-inside-blocks --> <!-- claim: config-refuses-fp16-with-bf16-and-mics --> <!-- claim: nvme-without-path-fails-at-start-up --> <!-- claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload --> <!-- claim: hf-trainer-fills-auto --> <!-- claim: auto-dropped-in-precision-blocks --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: removed-features-raise-pointing-to-issue-8489 --> <!-- claim: config-blocks-strict-top-level-loose -->

# %% [markdown] lang="zh" en="1b648838845b"
# 第二份配置实际上是在用普通的数据并行训练，而且没有任何提示。DeepSpeed 还会一声不吭地接受下面这些情况（事实来自其 0.19.8 的代码）：
#
# - stage 1 或 2 下的 `offload_param`：stage 1/2 的优化器根本收不到这个设置，参数仍留在 GPU 上；
# - `device: "nvme"` 却没有 `nvme_path`：配置被接受，随后 stage 3 的运行在创建 swap 文件夹时失败（stage 3 以下 DeepSpeed 改为卸载到 CPU 内存）；
# - `zero_optimization`、`fp16` 或 `bf16` 里的 `"auto"`：被**丢弃**，改用默认值（`"auto"` 只有 Hugging Face Trainer 和 Accelerate 会在 DeepSpeed 看到配置之前替换掉）。而在顶层的 batch 字段里，`"auto"` 则会直接导致崩溃。
#
# 会被拒绝的情况有：fp16 和 bf16 同时开启、batch 相关字段在给定的总进程数（world size）下乘不出来，以及 DeepSpeed 已移除的功能，例如 MiCS（`mics_shard_size`）：0.19.8 会抛出一个错误，指向 DeepSpeed 的一个 issue（见参考资料）。zerolab 的配置诊断工具 `check_config(config, world_size)` 会按你给出的总进程数运行 DeepSpeed 自己的校验，并为那些静默的情况补上检查。每条检查结果（finding）都有一个点分**路径**（path）、一个**严重程度**（severity）和一条说明。 <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: nvme-without-path-accepted --> <!-- claim: auto-dropped-inside-blocks --> <!-- claim: config-refuses-fp16-with-bf16-and-mics --> <!-- claim: nvme-without-path-fails-at-start-up --> <!-- claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload --> <!-- claim: hf-trainer-fills-auto --> <!-- claim: auto-dropped-in-precision-blocks --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: removed-features-raise-pointing-to-issue-8489 --> <!-- claim: config-blocks-strict-top-level-loose -->

# %% [markdown]
# ## Exercise 1: which path is wrong? (3 points, one per config)
#
# Each config below has one thing wrong with it. Read them (do not run the doctor yet) and set `WRONG_PATH_A`,
# `WRONG_PATH_B` and `WRONG_PATH_C` to the dotted path of the wrong key, e.g. `"fp16.enabled"`.
#
# *Accepted:* a `str`; case, spaces, quotes, brackets or slashes do not matter (`zero_optimization["stage"]` is
# `zero_optimization.stage`). Any path whose change fixes the problem counts: the wrong key, the setting it conflicts
# with, or, for a **missing** key, the path where it should be or its block. Each config earns its own point; the
# doctor's explanation appears when your answer passes.

# %% [markdown] lang="zh" en="63b134f39479"
# ## 练习 1：哪个路径写错了？（3 分，每份配置 1 分）
#
# 下面每份配置都有一处错误。先读配置（暂时不要运行配置诊断工具），然后把 `WRONG_PATH_A`、`WRONG_PATH_B` 和 `WRONG_PATH_C` 设为出错键的点分路径，例如 `"fp16.enabled"`。
#
# *接受的答案*：一个 `str`；大小写、空格、引号、方括号或斜杠都不影响（`zero_optimization["stage"]` 等同于 `zero_optimization.stage`）。只要改动该路径就能修好问题，都算对：出错的键、与它冲突的设置，或者对于**缺失**的键，它应在的路径或它所在的块。每份配置单独得分；你的答案通过后，会显示配置诊断工具的解释。

# %% nbgrader={"grade": false, "grade_id": "cases", "locked": true, "schema_version": 3, "solution": false, "task": false}
CASES = {
    "A": {
        "train_batch_size": 256,
        "train_micro_batch_size_per_gpu": 4,
        "bf16": {"enabled": True},
        "zero_optimisation": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True},
    },
    "B": {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 8,
        "fp16": {"enabled": True, "loss_scale": 0},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
    },
    "C": {
        "train_batch_size": 32,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}, "offload_param": {"device": "cpu"}},
    },
}
for name, config in CASES.items():
    print(name, json.dumps(config, indent=2))

# %% nbgrader={"grade": false, "grade_id": "fixing_paths", "locked": true, "schema_version": 3, "solution": false, "task": false}
def fixing_paths(config, world_size=8):
    """Paths whose change fixes a problem the doctor finds: each finding's path, the block of a missing key, and the
    setting a finding's message offers to change instead (the stage, or the offload device)."""
    from zerolab.config import check_config

    paths = set()
    for finding in check_config(config, world_size=world_size).findings:
        if finding.severity not in ("error", "warning"):
            continue
        paths.add(finding.path)
        parent, _, key = finding.path.rpartition(".")
        block = config
        for part in parent.split(".") if parent else []:
            block = block.get(part, {})
        if parent and key not in block:
            paths.add(parent)
        if '"stage"' in finding.message:
            paths.add("zero_optimization.stage")
        if "nvme_path" in finding.path:
            paths.add(parent + ".device")
        if "." not in finding.path and "zero_optimization" in finding.message:
            paths.add("zero_optimization")
    return paths


# %% nbgrader={"grade": false, "grade_id": "ex1_path_a", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
WRONG_PATH_A = "zero_optimisation"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex1_path_a", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import path_in

path_in(WRONG_PATH_A, fixing_paths(CASES["A"]), "WRONG_PATH_A",
        hint="DeepSpeed validates blocks strictly but reads the top level with dict.get: look at the block names")
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import path_in, plain

path_in(plain(WRONG_PATH_A, "WRONG_PATH_A"), fixing_paths(CASES["A"]), "WRONG_PATH_A")
### END HIDDEN TESTS
passed("WRONG_PATH_A", "Right. The doctor's report:")
show(check_config(CASES["A"], world_size=8))

# %% nbgrader={"grade": false, "grade_id": "ex1_path_b", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
WRONG_PATH_B = "zero_optimization.offload_param"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex1_path_b", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import path_in

path_in(WRONG_PATH_B, fixing_paths(CASES["B"]), "WRONG_PATH_B",
        hint="which setting only works at stage 3?")
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import path_in, plain

path_in(plain(WRONG_PATH_B, "WRONG_PATH_B"), fixing_paths(CASES["B"]), "WRONG_PATH_B")
### END HIDDEN TESTS
passed("WRONG_PATH_B", "Right. The doctor's report:")
show(check_config(CASES["B"], world_size=8))

# %% nbgrader={"grade": false, "grade_id": "ex1_path_c", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
WRONG_PATH_C = "zero_optimization.offload_optimizer.nvme_path"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex1_path_c", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import path_in

path_in(WRONG_PATH_C, fixing_paths(CASES["C"]), "WRONG_PATH_C",
        hint="what does an NVMe offload need to know that this config does not say?")
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import path_in, plain

path_in(plain(WRONG_PATH_C, "WRONG_PATH_C"), fixing_paths(CASES["C"]), "WRONG_PATH_C")
### END HIDDEN TESTS
passed("WRONG_PATH_C", "Right. The doctor's report:")
show(check_config(CASES["C"], world_size=8))

# %% [markdown]
# <details><summary>Answers: open them once your three test cells say "Right."</summary>
#
# - A: DeepSpeed accepts it and trains with ZeRO off: it never reads the British spelling `zero_optimisation`.
# - B: DeepSpeed accepts it and keeps the parameters on the GPU: `offload_param` is valid only with stage 3, and
#   nothing enforces it.
# - C: DeepSpeed's config check accepts it, and the run then fails at start-up: an NVMe offload needs `nvme_path`,
#   the folder for its swap files.
#
# </details>
#
# The doctor's notes (severity `note`) say what DeepSpeed picks for fields you left out, e.g. `overlap_comm`
# (stage-dependent) and `pin_memory` (true in 0.19.8). <!-- claim: config-blocks-strict-top-level-loose --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: nvme-without-path-accepted --> <!-- claim: nvme-without-path-fails-at-start-up --> <!-- claim: overlap-comm-default-by-stage --> <!-- claim: offload-pin-memory-defaults-true -->

# %% [markdown] lang="zh" en="077f4b916a33"
# <details><summary>答案：三个测试单元格都输出“正确。”之后再展开</summary>
#
# - A：DeepSpeed 接受它，但训练时 ZeRO 是关闭的：它从不读取英式拼写 `zero_optimisation`。
# - B：DeepSpeed 接受它，但参数仍留在 GPU 上：`offload_param` 只在 stage 3 下有效，而没有任何检查强制这一点。
# - C：DeepSpeed 的配置检查接受它，但运行会在启动时失败：NVMe 卸载需要 `nvme_path`，即存放 swap 文件的文件夹。
#
# </details>
#
# 配置诊断工具的提示（严重程度为 `note`）会告诉你，对你没写的字段 DeepSpeed 会取什么值，例如 `overlap_comm`（取决于 stage）和 `pin_memory`（0.19.8 中为 true）。 <!-- claim: config-blocks-strict-top-level-loose --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: nvme-without-path-accepted --> <!-- claim: nvme-without-path-fails-at-start-up --> <!-- claim: overlap-comm-default-by-stage --> <!-- claim: offload-pin-memory-defaults-true -->

# %% [markdown]
# ## More traps, in the doctor's words
#
# A gallery of mistakes seen in real configs, checked for 8 GPUs:

# %% [markdown] lang="zh" en="91ea58e5798c"
# ## 更多陷阱，听配置诊断工具怎么说
#
# 下面是一组在真实配置里见过的错误，按 8 张 GPU 检查：

# %% nbgrader={"grade": false, "grade_id": "gallery", "locked": true, "schema_version": 3, "solution": false, "task": false}
GALLERY = {
    "copied from a Trainer example": {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                      "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}},
    "auto precision outside the Trainer": {"train_batch_size": 64, "fp16": {"enabled": "auto"},
                                           "zero_optimization": {"stage": 2}},
    "both precisions on": {"train_batch_size": 64, "fp16": {"enabled": True}, "bf16": {"enabled": True}},
    "an old MiCS config": {"train_batch_size": 64, "zero_optimization": {"stage": 3, "mics_shard_size": 8}},
    "batch written for one GPU": {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                                  "gradient_accumulation_steps": 8, "zero_optimization": {"stage": 2}},
}

# %%
for name, config in GALLERY.items():
    print(f"--- {tr(name)}")
    show(check_config(config, world_size=8))

# %% [markdown]
# Read the severity: an **error** means DeepSpeed (or the run) will fail; a **warning** means it will run, but not as
# written. Silently dropped `"auto"` values are the most treacherous: `fp16.enabled: "auto"` outside the Trainer means
# fp32 training. What that does to memory, for a 7B model on 8 GPUs (paper accounting):
# <!-- claim: fp16-auto-means-fp32 -->

# %% [markdown] lang="zh" en="3f9a6364d340"
# 看严重程度：**error** 表示 DeepSpeed（或这次运行）会失败；**warning** 表示能跑，但跑的不是你写的样子。被静默丢弃的 `"auto"` 最具迷惑性：在 Trainer 之外写 `fp16.enabled: "auto"`，意味着用 fp32 训练。下面看它对显存的影响，以 7B 模型、8 张 GPU 为例（ZeRO 论文的口径）： <!-- claim: fp16-auto-means-fp32 -->

# %%
meant = copy.deepcopy(GALLERY["auto precision outside the Trainer"])
meant["fp16"]["enabled"] = True
for label, config in (("fp16 enabled: true", meant), ('fp16 enabled: "auto"', GALLERY["auto precision outside the Trainer"])):
    e = config_effect(config, params="7B", gpus_per_node=8, accounting="paper").memory
    print(tr(f"{label:22} precision {read_settings(config, world_size=8).precision:5}  GPU {units.format_bytes(e.gpu_bytes, 'GB')} per GPU"))

# %% [markdown]
# `explain_config` says what every field you set means and what DeepSpeed uses when you leave it out:

# %% [markdown] lang="zh" en="7f5e5ef01064"
# `explain_config` 会说明你设置的每个字段是什么意思，以及不写时 DeepSpeed 用什么值：

# %%
for line in explain_config(GALLERY["batch written for one GPU"]):
    print(f"{line.path:32} {line.value!s:8} (default {line.default!s:6}) {line.text}")

# %% [markdown]
# ## Exercise 2: fix a broken config (3 points)
#
# The config below was meant for **8 A100 GPUs**: ZeRO-3, parameters offloaded to CPU memory, optimizer states
# offloaded to the NVMe drive mounted at `/local_nvme`, 4 samples per GPU per micro-step and 2 accumulation steps,
# bf16. Set `FIXED` to a corrected config (a dict) that DeepSpeed accepts at world size 8, that the doctor reports no
# errors and no warnings for, and that still means exactly that. (`check_config(FIXED, world_size=8)` is allowed.)
#
# *Accepted:* a `dict`; any config that DeepSpeed reads as those settings, whether you write `train_batch_size` or
# leave it for DeepSpeed to derive; `nvme_path` may end in a slash. Hidden tests check the settings DeepSpeed reads
# from it.
#
# DeepSpeed stops at the first error it raises, so the doctor's first report does not list everything: fix, check
# again, repeat. <!-- claim: config-stops-at-first-error --> <!-- claim: batch-term-derived-by-floor-division -->

# %% [markdown] lang="zh" en="f154544a32f4"
# ## 练习 2：修好一份坏掉的配置（3 分）
#
# 下面这份配置原本是为 **8 张 A100 GPU** 写的：ZeRO-3，参数卸载（offload）到 CPU 内存，优化器状态卸载到挂载在 `/local_nvme` 的 NVMe 盘，每张 GPU 每个微步 4 个样本、梯度累积 2 步，bf16。把 `FIXED` 设为一份修正后的配置（一个 dict）：DeepSpeed 在总进程数为 8 时接受它，配置诊断工具对它既不报 error 也不报 warning，而且它表达的仍然恰好是上面的意思。（允许调用 `check_config(FIXED, world_size=8)`。）
#
# *接受的答案*：一个 `dict`；只要 DeepSpeed 读出来是上述设置的配置都可以，`train_batch_size` 写出来或留给 DeepSpeed 自己推导都行；`nvme_path` 末尾可以带斜杠。隐藏测试检查的是 DeepSpeed 从中读出的设置。
#
# DeepSpeed 遇到第一个错误就会停下，所以配置诊断工具的第一份报告并不会列出所有问题：修一处，再检查，如此反复。 <!-- claim: config-stops-at-first-error --> <!-- claim: batch-term-derived-by-floor-division -->

# %% nbgrader={"grade": false, "grade_id": "broken", "locked": true, "schema_version": 3, "solution": false, "task": false}
BROKEN = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "fp16": {"enabled": True},
    "bf16": {"enabled": True},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "nvme"},
        "offload_param": {"device": "cpu"},
        "mics_shard_size": 8,
        "stage3_prefetch_bucket_size": "auto",
    },
}
show(check_config(BROKEN, world_size=8))

# %% nbgrader={"grade": false, "grade_id": "ex2_fix_config", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
FIXED = {
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "bf16": {"enabled": True},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"},
        "offload_param": {"device": "cpu"},
    },
}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex2_fix_config", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
import os

assert type(FIXED) is dict, f"wrong type: FIXED should be a dict (the config itself), got {type(FIXED).__name__}"
report = check_config(FIXED, world_size=8)
assert report.valid, f"the doctor still finds errors: {[str(f) for f in report.errors]}"
assert not report.warnings, f"the doctor still warns: {[str(f) for f in report.warnings]}"
settings = read_settings(FIXED, world_size=8)
assert settings.stage == 3, "the author wanted ZeRO-3"
assert settings.precision == "bf16", "the author wanted bf16 (A100s)"
assert settings.offload_param == "cpu", "the parameters should be offloaded to CPU"
assert settings.offload_optimizer == "nvme", "the optimizer states should be offloaded to NVMe"
assert (settings.micro_batch, settings.grad_accum) == (4, 2), "keep 4 samples per micro-step and 2 accumulation steps"
_nvme = FIXED["zero_optimization"]["offload_optimizer"].get("nvme_path")
assert isinstance(_nvme, str) and os.path.normpath(_nvme) == "/local_nvme", \
    f"zero_optimization.offload_optimizer.nvme_path {_nvme!r} is not the folder the text names for the NVMe drive"
passed("exercise 2", "Visible checks passed.")
### BEGIN HIDDEN TESTS
import copy
from deepspeed.runtime.config import DeepSpeedConfig
from zerolab.lesson.checks import plain
from zerolab.config import check_config, read_settings

import os

fixed = plain(FIXED, "FIXED")
report = check_config(fixed, world_size=8)
assert report.valid and not report.warnings, "the doctor finds errors or warnings in FIXED at world size 8"
settings = read_settings(fixed, world_size=8)
assert (settings.stage, settings.precision, settings.offload_param, settings.offload_optimizer) == (3, "bf16", "cpu", "nvme"), \
    "DeepSpeed does not read ZeRO-3, bf16, parameters on CPU and optimizer on NVMe from FIXED"
assert (settings.micro_batch, settings.grad_accum, settings.world_size) == (4, 2, 8), \
    "DeepSpeed does not read 4 samples per micro-step and 2 accumulation steps on 8 GPUs from FIXED"
assert not check_config(fixed, world_size=4).valid or fixed.get("train_batch_size") is None, \
    "train_batch_size should be the one for 8 GPUs"
assert os.path.normpath(fixed["zero_optimization"]["offload_optimizer"]["nvme_path"]) == "/local_nvme", \
    "nvme_path is not the folder the text names"
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>What had to change, and why: open it once your test cell says "Visible checks passed."</summary>
#
# - `train_batch_size: "auto"`: only the Hugging Face Trainer or Accelerate replace it. Write the number (micro
#   batch x accumulation steps x 8 GPUs), or leave the field out and let DeepSpeed derive it.
# - fp16 and bf16 both on: DeepSpeed refuses. A100s run bf16, so drop the fp16 block.
# - `mics_shard_size`: MiCS was removed from DeepSpeed; the key is now an error.
# - `stage3_prefetch_bucket_size: "auto"`: dropped silently outside the Trainer; remove it or write a number.
# - NVMe without `nvme_path`: add the folder.
#
# </details> <!-- claim: hf-trainer-fills-auto --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: config-refuses-fp16-with-bf16-and-mics --> <!-- claim: auto-dropped-inside-blocks --> <!-- claim: nvme-without-path-fails-at-start-up -->

# %% [markdown] lang="zh" en="c989d4d098fa"
# <details><summary>需要改什么，以及为什么：测试单元格输出“可见测试已通过。”之后再展开</summary>
#
# - `train_batch_size: "auto"`：只有 Hugging Face Trainer 或 Accelerate 会替换它。写出具体数字（微批次（micro-batch）大小 x 累积步数 x 8 张 GPU），或者干脆不写，让 DeepSpeed 自己推导。
# - fp16 和 bf16 同时开启：DeepSpeed 会拒绝。A100 用 bf16，所以删掉 fp16 块。
# - `mics_shard_size`：MiCS 已从 DeepSpeed 中移除，这个键现在会报错。
# - `stage3_prefetch_bucket_size: "auto"`：在 Trainer 之外会被静默丢弃；删掉它，或者写一个数字。
# - NVMe 却没有 `nvme_path`：补上文件夹路径。
#
# </details> <!-- claim: hf-trainer-fills-auto --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: config-refuses-fp16-with-bf16-and-mics --> <!-- claim: auto-dropped-inside-blocks --> <!-- claim: nvme-without-path-fails-at-start-up -->

# %% [markdown]
# ## Predicting the effect of a change
#
# `config_effect(config, params, gpus_per_node)` reads the settings DeepSpeed will really use (its defaults, and
# ignoring what it ignores) and feeds them to `zerolab.engine.memory` and `zerolab.engine.comm`. `compare_configs(a, b, ...)` does it
# for two configs and lists the fields that differ. Here, what switching ZeRO-2 to ZeRO-3 does for a 7B model on 8
# GPUs (the batch fields give 2 accumulation steps on 8 GPUs, and traffic is counted per optimizer step): <!-- claim: batch-term-derived-by-floor-division -->

# %% [markdown] lang="zh" en="d07cdac3129b"
# ## 预测一次改动的效果
#
# `config_effect(config, params, gpus_per_node)` 读取 DeepSpeed 实际会用的设置（包括它的默认值，并忽略它会忽略的部分），再交给 `zerolab.engine.memory` 和 `zerolab.engine.comm` 计算。`compare_configs(a, b, ...)` 对两份配置做同样的事，并列出不同的字段。下面看 7B 模型在 8 张 GPU 上从 ZeRO-2 换成 ZeRO-3 会怎样（batch 字段在 8 张 GPU 上得出 2 步梯度累积，通信量按每个优化器步（optimizer step）计）： <!-- claim: batch-term-derived-by-floor-division -->

# %%
zero2 = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
         "zero_optimization": {"stage": 2}}
zero3 = copy.deepcopy(zero2)
zero3["zero_optimization"]["stage"] = 3
diff = compare_configs(zero2, zero3, params="7B", gpus_per_node=8)
print(tr("changed:"), diff.changed)
for label, effect in (("ZeRO-2", diff.effect_a), ("ZeRO-3", diff.effect_b)):
    print(tr(f"{label}: GPU {units.format_bytes(effect.memory.gpu_bytes, 'GiB')} per GPU, "
             f"{effect.traffic.volume_in_params:.0f} Ψ per step, {units.format_bytes(effect.traffic.wire_bytes, 'GB')} sent per GPU"))

# %% [markdown]
# ## Exercise 3: how much does it save? (2 points)
#
# A colleague wants to fit a 7B model on 8 GPUs and has two candidate configs. Using the **paper's accounting**
# (2 + 2 + 12 bytes per parameter, model states only), how many **bytes per GPU** does config `Q` need *less* than
# config `P`? Read the configs carefully. Set `SAVED_BYTES` to a number of **bytes**.
#
# *Accepted:* an `int` or `float` of bytes (not GB or GiB), positive, within 1 % of zerolab's figure.

# %% [markdown] lang="zh" en="9bf6d9384383"
# ## 练习 3：能省多少？（2 分）
#
# 一位同事想在 8 张 GPU 上放下一个 7B 模型，手上有两份候选配置。按 **ZeRO 论文的口径**（每个参数 2 + 2 + 12 字节，只算模型状态），配置 `Q` 每张 GPU 比配置 `P` *少*需要多少**字节**？仔细读配置。把 `SAVED_BYTES` 设为一个以**字节**为单位的数。
#
# *接受的答案*：一个 `int` 或 `float`，单位是字节（不是 GB 或 GiB），为正数，与 zerolab 的结果相差不超过 1 %。

# %% nbgrader={"grade": false, "grade_id": "candidates", "locked": true, "schema_version": 3, "solution": false, "task": false}
P_CONFIG = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}
Q_CONFIG = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3}}

# %% nbgrader={"grade": false, "grade_id": "ex3_saved_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
_diff = compare_configs(P_CONFIG, Q_CONFIG, params="7B", gpus_per_node=8, accounting="paper")
SAVED_BYTES = _diff.effect_a.memory.gpu_bytes - _diff.effect_b.memory.gpu_bytes
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex3_saved_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to

effect_p = config_effect(P_CONFIG, params="7B", gpus_per_node=8, accounting="paper").memory.gpu_bytes
effect_q = config_effect(Q_CONFIG, params="7B", gpus_per_node=8, accounting="paper").memory.gpu_bytes
close_to(SAVED_BYTES, effect_p - effect_q, "SAVED_BYTES", 0.01, "bytes",
         hint="does P's offload_param do anything at stage 2? Then compare what ZeRO-3 partitions that ZeRO-2 does not",
         slips={-1: "wrong sign: Q needs less than P, so the saving is positive (P minus Q)"})
passed("exercise 3", "Visible checks passed.")
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import plain
from zerolab.config import config_effect

from zerolab.lesson.checks import close_to

answer = plain(SAVED_BYTES, "SAVED_BYTES")
reference = (config_effect(P_CONFIG, params="7B", gpus_per_node=8, accounting="paper").memory.gpu_bytes
             - config_effect(Q_CONFIG, params="7B", gpus_per_node=8, accounting="paper").memory.gpu_bytes)
_ = close_to(answer, reference, "SAVED_BYTES", 0.01, "bytes")
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Visible checks passed."</summary>
#
# P's `offload_param` does nothing at stage 2, so P is plain ZeRO-2: the bf16 parameters stay whole on every GPU,
# the gradients and optimizer states are divided over the GPUs. Q, ZeRO-3, divides the parameters too. The saving is
# the parameters' bytes minus the share each GPU still holds. Both accountings side by side (DeepSpeed's adds fp32
# gradients and, for ZeRO-3, the largest layer gathered in full):
#
# </details> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: deepspeed-zero3-estimator-adds-largest-layer -->

# %% [markdown] lang="zh" en="c1d3687f576c"
# <details><summary>答案：测试单元格输出“可见测试已通过。”之后再展开</summary>
#
# P 的 `offload_param` 在 stage 2 下不起作用，所以 P 就是普通的 ZeRO-2：bf16 参数在每张 GPU 上都是完整的一份，梯度和优化器状态被切分到各张 GPU 上。Q 是 ZeRO-3，连参数也切分了。省下的就是参数的字节数减去每张 GPU 仍持有的那份分片。下面把两种口径并排列出（DeepSpeed 的口径额外计入 fp32 梯度，对 ZeRO-3 还计入完整聚合的最大一层）：
#
# </details> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: zero-stages-partition-states-then-parameters --> <!-- claim: deepspeed-zero2-estimator-counts-18-partitioned-bytes --> <!-- claim: deepspeed-zero3-estimator-adds-largest-layer -->

# %%
if revealed("exercise 3"):
    for accounting in ("paper", "deepspeed"):
        diff = compare_configs(P_CONFIG, Q_CONFIG, params="7B", gpus_per_node=8, accounting=accounting)
        saved = diff.effect_a.memory.gpu_bytes - diff.effect_b.memory.gpu_bytes
        print(tr(f"{accounting:9}: P {units.format_bytes(diff.effect_a.memory.gpu_bytes, 'GB')}, "
                 f"Q {units.format_bytes(diff.effect_b.memory.gpu_bytes, 'GB')}, saved {units.format_bytes(saved, 'GB')} per GPU"))

# %% [markdown]
# ## Exercise 4: what does it cost in traffic? (2 points)
#
# Two configs for the same model on 8 GPUs, both with 8 gradient accumulation steps: `R` uses ZeRO-1, `S` ZeRO-2.
# Per **optimizer step**, how many times the parameter count Ψ more does `S` move per GPU than `R`, in the paper's
# accounting of communication volume? Set `EXTRA_PSI` to a number.
#
# What you need: ZeRO-1 keeps whole gradients on every GPU between micro-steps; ZeRO-2 keeps only its own gradient
# partition (lesson 03 counts the collectives).
#
# *Accepted:* an `int` or `float`, a multiple of Ψ (not bytes or GB), exact to one part in a million. <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: zero2-keeps-only-the-gradient-partition -->

# %% [markdown] lang="zh" en="54fe52fc51de"
# ## 练习 4：通信量上要付出多少？（2 分）
#
# 同一个模型、8 张 GPU 的两份配置，梯度累积都是 8 步：`R` 用 ZeRO-1，`S` 用 ZeRO-2。按 ZeRO 论文的通信量口径，每个**优化器步**，`S` 每张 GPU 比 `R` 多传输的量是参数量 Ψ 的多少倍？把 `EXTRA_PSI` 设为一个数。
#
# 你需要知道的：ZeRO-1 在微步之间让每张 GPU 保留完整的梯度；ZeRO-2 只保留自己那份梯度分片（第 03 课统计了各个集合通信）。
#
# *接受的答案*：一个 `int` 或 `float`，是 Ψ 的倍数（不是字节或 GB），精确到百万分之一。 <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: zero2-keeps-only-the-gradient-partition -->

# %% nbgrader={"grade": false, "grade_id": "traffic_pair", "locked": true, "schema_version": 3, "solution": false, "task": false}
R_CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 1}}
S_CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 2}}

# %% nbgrader={"grade": false, "grade_id": "ex4_extra_traffic", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
_diff = compare_configs(R_CONFIG, S_CONFIG, params="7B", gpus_per_node=8)
EXTRA_PSI = _diff.effect_b.traffic.volume_in_params - _diff.effect_a.traffic.volume_in_params
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex4_extra_traffic", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to, number

volume_r = config_effect(R_CONFIG, params="7B", gpus_per_node=8).traffic.volume_in_params
volume_s = config_effect(S_CONFIG, params="7B", gpus_per_node=8).traffic.volume_in_params
assert number(EXTRA_PSI, "EXTRA_PSI", "Ψ") != 0, "ZeRO-1 and ZeRO-2 move the same volume only without gradient accumulation"
close_to(EXTRA_PSI, volume_s - volume_r, "EXTRA_PSI", 1e-6,
         hint="when does each stage reduce gradients, once per optimizer step or once per micro-step?",
         slips={-1: "wrong sign: S moves more than R; give S minus R",
                2 * 7e9: "wrong unit: that is bytes (2 per bf16 value); give a multiple of Ψ",
                7e9: "wrong unit: that is a number of values; divide by Ψ",
                2 * 7e9 / 1e9: "wrong unit: that is GB; give a multiple of Ψ"})
passed("exercise 4", "Visible checks passed.")
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import plain
from zerolab.config import config_effect

from zerolab.lesson.checks import close_to

reference = (config_effect(S_CONFIG, params="13B", gpus_per_node=16).traffic.volume_in_params
             - config_effect(R_CONFIG, params="13B", gpus_per_node=16).traffic.volume_in_params)
_ = close_to(plain(EXTRA_PSI, "EXTRA_PSI"), reference, "EXTRA_PSI", 1e-6)
### END HIDDEN TESTS

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Visible checks passed."</summary>
#
# ZeRO-1 keeps whole gradients on every GPU, sums the micro-steps locally and reduces them once per optimizer step.
# ZeRO-2 keeps only its gradient partition, so it reduces the gradients on every micro-step. Both all-gather the
# updated parameters once. The paper counts each reduction as a reduce-scatter (Ψ); DeepSpeed 0.19.8 all-reduces the
# gradient buckets by default (2Ψ), which changes the volumes, not the comparison. With long accumulation ZeRO-1 can be
# the better choice when the network is slow and the memory allows it:
#
# </details> <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero12-reduce-buckets-by-all-reduce -->

# %% [markdown] lang="zh" en="511db06ead94"
# <details><summary>答案：测试单元格输出“可见测试已通过。”之后再展开</summary>
#
# ZeRO-1 在每张 GPU 上保留完整梯度，在本地把各微步的梯度累加起来，每个优化器步只规约一次。ZeRO-2 只保留自己的梯度分片，所以每个微步都要规约梯度。两者都在最后对更新后的参数做一次 all-gather。论文把每次规约算作一次 reduce-scatter（Ψ）；DeepSpeed 0.19.8 默认对梯度桶做 all-reduce（2Ψ），这改变的是通信量，而不是两者的比较。梯度累积步数多、网络慢且显存够用时，ZeRO-1 可能是更好的选择：
#
# </details> <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero12-reduce-buckets-by-all-reduce -->

# %%
if revealed("exercise 4"):
    for label, config in (("R (ZeRO-1)", R_CONFIG), ("S (ZeRO-2)", S_CONFIG)):
        effect = config_effect(config, params="7B", gpus_per_node=8)
        print(tr(f"{label}: {effect.traffic.volume_in_params:.0f} Ψ per optimizer step, "
                 f"{units.format_bytes(effect.traffic.wire_bytes, 'GB')} sent per GPU, GPU memory {units.format_bytes(effect.memory.gpu_bytes, 'GiB')}"))

# %% [markdown]
# ## Summary
#
# - DeepSpeed validates blocks strictly but ignores unknown top-level keys: a misspelled `zero_optimization` means no
#   ZeRO at all.
# - Accepted but ignored or broken: `offload_param` below stage 3, NVMe without `nvme_path`, `"auto"` inside blocks
#   outside the Hugging Face Trainer. Rejected: fp16 + bf16, batch fields that do not multiply out for the world
#   size, removed features such as MiCS.
# - Name problems by dotted path; check a config for the world size it will run at.
# - Predict a change before running it: `config_effect` and `compare_configs` read the settings DeepSpeed will really
#   use and compute memory and traffic from them.
#
# ## Interview questions
#
# **Your ZeRO-2 run uses as much memory as plain DDP. What do you check first?**
# That DeepSpeed really reads the ZeRO block: a misspelled top-level key is ignored without a message, and the run
# falls back to stage 0. The engine's log line with the ZeRO stage, or a validation tool, tells you.
#
# **You set `offload_param` and memory did not change. Why?**
# Parameter offload works only with ZeRO-3; at stages 1 and 2 DeepSpeed accepts the key and never uses it.
#
# **A config from a Hugging Face example fails with a TypeError about a `str` (in a `//` or a `>`). Why?**
# It contains `"auto"` values, which only the Trainer and Accelerate fill in. Used with DeepSpeed directly the batch
# fields must be numbers; inside blocks `"auto"` is dropped silently and the default used.
#
# **Does ZeRO-2 communicate more than ZeRO-1?**
# Without gradient accumulation they move the same volume per step: the paper's 2Ψ, or 3Ψ in DeepSpeed 0.19.8's
# default, which all-reduces the gradient buckets of both. With accumulation ZeRO-2 reduces gradients on every
# micro-step and ZeRO-1 only at the boundary, so per optimizer step ZeRO-2 moves more. <!-- claim: config-blocks-strict-top-level-loose --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: nvme-without-path-fails-at-start-up --> <!-- claim: auto-dropped-inside-blocks --> <!-- claim: config-refuses-fp16-with-bf16-and-mics --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: engine-logs-its-zero-stage --> <!-- claim: auto-batch-fields-raise-typeerror --> <!-- claim: hf-trainer-fills-auto --> <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: zero2-reduces-gradients-every-micro-step -->

# %% [markdown] lang="zh" en="c85039e35214"
# ## 小结
#
# - DeepSpeed 严格校验各个块，却忽略顶层的未知键：`zero_optimization` 拼错，就等于完全没有 ZeRO。
# - 被接受但被忽略或会出错的：stage 3 以下的 `offload_param`、没有 `nvme_path` 的 NVMe、在 Hugging Face Trainer 之外写在块里的 `"auto"`。会被拒绝的：fp16 + bf16、batch 字段在给定总进程数下乘不出来、MiCS 这类已移除的功能。
# - 用点分路径指出问题；按实际运行时的总进程数检查配置。
# - 改动之前先预测：`config_effect` 和 `compare_configs` 读取 DeepSpeed 实际会用的设置，并据此计算显存和通信量。
#
# ## 面试问题
#
# **你的 ZeRO-2 训练占用的显存和普通 DDP 一样多。首先检查什么？**
# 检查 DeepSpeed 是否真的读到了 ZeRO 块：顶层的键拼错会被无声忽略，训练退回 stage 0。引擎日志里打印 ZeRO stage 的那一行，或者一个配置校验工具，都能告诉你答案。
#
# **你设置了 `offload_param`，显存却没变。为什么？**
# 参数卸载只在 ZeRO-3 下生效；在 stage 1 和 2 下，DeepSpeed 接受这个键，但从不使用它。
#
# **一份来自 Hugging Face 示例的配置报了一个与 `str` 有关的 TypeError（出在 `//` 或 `>` 上）。为什么？**
# 它包含 `"auto"` 值，而这些值只有 Trainer 和 Accelerate 会填。直接交给 DeepSpeed 用时，batch 字段必须是数字；块里的 `"auto"` 会被静默丢弃并改用默认值。
#
# **ZeRO-2 的通信量比 ZeRO-1 大吗？**
# 没有梯度累积时，两者每步的通信量相同：论文口径下是 2Ψ；DeepSpeed 0.19.8 默认对两者的梯度桶都做 all-reduce，则是 3Ψ。有梯度累积时，ZeRO-2 每个微步都要规约梯度，而 ZeRO-1 只在累积边界规约一次，所以每个优化器步 ZeRO-2 传输得更多。 <!-- claim: config-blocks-strict-top-level-loose --> <!-- claim: offload-param-ignored-below-stage-3 --> <!-- claim: nvme-without-path-fails-at-start-up --> <!-- claim: auto-dropped-inside-blocks --> <!-- claim: config-refuses-fp16-with-bf16-and-mics --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: engine-logs-its-zero-stage --> <!-- claim: auto-batch-fields-raise-typeerror --> <!-- claim: hf-trainer-fills-auto --> <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: stage1-full-gradients-until-the-boundary --> <!-- claim: zero2-reduces-gradients-every-micro-step -->

# %% [markdown]
# ## References
#
# - DeepSpeed 0.19.8 source: `deepspeed/runtime/zero/config.py` (stage-dependent `overlap_comm`),
#   `deepspeed/runtime/zero/offload_config.py` (`pin_memory`), `deepspeed/runtime/config.py` (batch arithmetic).
# - DeepSpeed issue #8489: features removed from DeepSpeed, MiCS among them.
# - zerolab's doctor: `zerolab/config/checks.py` (the checks DeepSpeed does not make). <!-- claim: overlap-comm-default-by-stage --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: removed-features-raise-pointing-to-issue-8489 -->

# %% [markdown] lang="zh" en="3d0f709e472b"
# ## 参考资料
#
# - DeepSpeed 0.19.8 源码：`deepspeed/runtime/zero/config.py`（取决于 stage 的 `overlap_comm`）、`deepspeed/runtime/zero/offload_config.py`（`pin_memory`）、`deepspeed/runtime/config.py`（batch 的算术关系）。
# - DeepSpeed issue #8489：从 DeepSpeed 中移除的功能，MiCS 在其中。
# - zerolab 的配置诊断工具：`zerolab/config/checks.py`（DeepSpeed 自己不做的那些检查）。 <!-- claim: overlap-comm-default-by-stage --> <!-- claim: offload-pin-memory-defaults-true --> <!-- claim: batch-term-derived-by-floor-division --> <!-- claim: removed-features-raise-pointing-to-issue-8489 -->
