# %% [markdown]
# # Lesson 09: Checkpoints

# %% [markdown] lang="zh" en="1f8d84139bd3"
# # 第 09 课：Checkpoint

# %% [markdown]
# ## Learning goals
#
# After this lesson you can:
#
# - say which files `engine.save_checkpoint` writes at ZeRO stages 1, 2 and 3, what each rank's files hold, and
#   predict their sizes;
# - consolidate a ZeRO checkpoint into one ordinary PyTorch state dict, and make a ZeRO-3 save that plain
#   `torch.load` + `load_state_dict` can read;
# - resume a job on another number of GPUs through a universal checkpoint;
# - read any checkpoint folder with `zerolab ckpt inspect`, and diagnose the classic failures from their messages.
#
# Every run here is real: DeepSpeed trains a tiny GPT on 2 or 3 CPU ranks and saves it. The checkpoints go into a
# temporary folder that the last cell deletes (and the kernel deletes when it exits). Cells that start ranks skip
# themselves while nbgrader grades; the test cells of exercises 2 and 4 start their own.

# %% [markdown] lang="zh" en="f15618ef67b7"
# ## 学习目标
#
# 学完本课，你能够：
#
# - 说出 `engine.save_checkpoint` 在 ZeRO stage 1、2、3 下写出哪些文件、每个 rank 的文件里有什么，并预测它们的大小；
# - 把一个 ZeRO checkpoint 合并成一个普通的 PyTorch state dict，并让 ZeRO-3 的保存结果能被普通的 `torch.load` + `load_state_dict` 读取；
# - 通过 universal checkpoint 在另一个 GPU 数量上恢复训练；
# - 用 `zerolab ckpt inspect` 读懂任何 checkpoint 文件夹，并从错误信息诊断出典型的故障。
#
# 这里的每次运行都是真实的：DeepSpeed 在 2 个或 3 个 CPU rank 上训练一个小 GPT 并保存它。checkpoint 写进一个临时文件夹，最后一个单元格会删除它（kernel 退出时也会删除）。启动 rank 的单元格在 nbgrader 评分时会自动跳过；练习 2 和练习 4 的测试单元格会自己启动 rank。

# %%
import atexit
import os
import shutil
import tempfile

import torch

from zerolab.engine import memory
from zerolab.ckpt.runs import checkpoint_config, resume_run, save_run
from zerolab.lesson.checks import learner_value
from zerolab.config import import_deepspeed
from zerolab.base.i18n import tr
from zerolab.lesson.reveal import answer_first, passed, revealed
from zerolab.run import ModelSpec, RunFailed
from zerolab.run.model import TinyGPT, count_params

RANKS = 2
SPEC = ModelSpec()
with torch.device("meta"):
    PARAMS = count_params(TinyGPT(SPEC))
RUN = not os.environ.get("NBGRADER_EXECUTION")  # real runs skip while nbgrader grades
WORK = tempfile.mkdtemp(prefix="zerolab-lesson09-")
atexit.register(shutil.rmtree, WORK, True)
import_deepspeed()  # DeepSpeed's start-up log stays off the output
print(tr(f"tiny GPT: {PARAMS:,} parameters; {RANKS} ranks; checkpoints go to {WORK}"))

# %% [markdown]
# ## 1. What `save_checkpoint` writes
#
# `engine.save_checkpoint(save_dir)` writes a **tag folder** (by default `global_step<N>`) and, last, a file
# `latest` that holds the tag. From stage 1 on it also copies DeepSpeed's `zero_to_fp32.py` into `save_dir`. In the
# tag folder:
#
# - **model states**: `mp_rank_00_model_states.pt` at stages 0-2, written by rank 0 alone: the module's 16-bit
#   weights, whole, plus the step counters and the `ds_config`, and from stage 1 on the parameter names and shapes
#   (at stage 0 this file holds the optimizer's whole state too: a stage-0 save has no optimizer-state files). At
#   stage 3 every rank writes its own `zero_pp_rank_<R>_mp_rank_00_model_states.pt`, and the module inside holds
#   only placeholders (section 2 shows why).
# - **optimizer states**: one `bf16_zero_pp_rank_<R>_mp_rank_00_optim_states.pt` per rank (no `bf16_` prefix in
#   fp16 or fp32): the rank's partition of the fp32 master weights and of Adam's two moments, the states lesson 01
#   counted as K = 12 bytes per parameter, split over the ranks at every stage from 1 on.
#   <!-- claim: save-checkpoint-files-per-stage --> <!-- claim: save-checkpoint-default-tag-and-latest-last --> <!-- claim: ckpt-latest-beside-the-tag-folder --> <!-- claim: model-states-file-holds-module-steps-config --> <!-- claim: stage0-optimizer-in-the-model-states-file --> <!-- claim: zero3-model-states-files-hold-placeholders --> <!-- claim: optim-states-bf16-prefix-only-in-bf16 --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions -->
#
# ### Exercise 1: predict the file sizes (3 points)
#
# Write `checkpoint_file_bytes(params, stage, ranks)` for bf16 (or fp16) mixed-precision Adam: a dict
# `{"model_states": ..., "optimizer_states": ...}` with the bytes of **tensor data** in the model-states file one
# rank writes (rank 0's) and in **one rank's** optimizer-state file. Give bytes as a number, or a string with a
# unit (`"1.5 GB"`, `"1.4 GiB"`); the test accepts 1 % either way. The test cell checks the lesson's model; hidden
# tests check other sizes, stages and rank counts against `zerolab.engine.memory`, which is off limits in your cell.

# %% [markdown] lang="zh" en="08bdb547254f"
# ## 1. `save_checkpoint` 写了什么
#
# `engine.save_checkpoint(save_dir)` 会写出一个 **tag 文件夹**（默认名为 `global_step<N>`），最后再写一个记录 tag 的文件 `latest`。从 stage 1 起，它还会把 DeepSpeed 的 `zero_to_fp32.py` 复制到 `save_dir`。tag 文件夹里有：
#
# - **模型状态（model states）**：stage 0-2 时是 `mp_rank_00_model_states.pt`，只由 rank 0 写出：模块完整的 16 位权重，加上步数计数器和 `ds_config`，从 stage 1 起还有参数名和形状（stage 0 时这个文件还装着优化器的全部状态：stage 0 的保存没有优化器状态文件）。stage 3 时每个 rank 各写一个 `zero_pp_rank_<R>_mp_rank_00_model_states.pt`，而其中的模块只有占位符（第 2 节说明原因）。
# - **优化器状态（optimizer states）**：每个 rank 一个 `bf16_zero_pp_rank_<R>_mp_rank_00_optim_states.pt`（fp16 或 fp32 时没有 `bf16_` 前缀）：该 rank 那一份 fp32 主权重和 Adam 的两个矩，也就是第 01 课算作每参数 K = 12 字节的那些状态，从 stage 1 起在每个 stage 都按 rank 切分。<!-- claim: save-checkpoint-files-per-stage --> <!-- claim: save-checkpoint-default-tag-and-latest-last --> <!-- claim: ckpt-latest-beside-the-tag-folder --> <!-- claim: model-states-file-holds-module-steps-config --> <!-- claim: stage0-optimizer-in-the-model-states-file --> <!-- claim: zero3-model-states-files-hold-placeholders --> <!-- claim: optim-states-bf16-prefix-only-in-bf16 --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions -->
#
# ### 练习 1：预测文件大小（3 分）
#
# 针对 bf16（或 fp16）混合精度 Adam，编写 `checkpoint_file_bytes(params, stage, ranks)`：返回一个 dict `{"model_states": ..., "optimizer_states": ...}`，分别是一个 rank（rank 0）写出的模型状态文件中、以及**一个 rank** 的优化器状态文件中**张量数据**的字节数。字节数可以写成数字，也可以写成带单位的字符串（`"1.5 GB"`、`"1.4 GiB"`）；测试接受上下 1% 的误差。测试单元格检查本课的模型；隐藏测试用 `zerolab.engine.memory` 检查其他模型大小、stage 和 rank 数，所以你的单元格里不能使用 `zerolab.engine.memory`。

# %% nbgrader={"grade": false, "grade_id": "ex1_file_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def checkpoint_file_bytes(params, stage, ranks):
    """Bytes of tensor data in rank 0's model-states file and in one rank's optimizer-state file."""
    ### BEGIN SOLUTION
    model_states = 0 if stage == 3 else 2 * params
    return {"model_states": model_states, "optimizer_states": 12 * params / ranks}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex1_file_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("checkpoint_file_bytes", ["zerolab.engine.memory"], exercise="exercise 1",
           instead="count the bytes each file holds yourself")
from zerolab.lesson.checks import close_to, dict_keys
from zerolab.ckpt.answers import as_bytes

for _stage in (1, 2, 3):
    _name = f"checkpoint_file_bytes(PARAMS, {_stage}, RANKS)"
    _mine = dict_keys(checkpoint_file_bytes(PARAMS, _stage, RANKS), ["model_states", "optimizer_states"], _name)
    _gpu = memory.estimate(PARAMS, _stage, gpus_per_node=RANKS, precision="bf16").breakdown["gpu"]
    close_to(as_bytes(_mine["optimizer_states"], _name + "['optimizer_states']"),
             _gpu["master_weights"] + _gpu["optimizer_states"], _name + "['optimizer_states']", 0.01, "bytes",
             hint="the file holds this rank's share of the fp32 master weights and of both Adam moments",
             slips={1 / 4: "counted fp32 values (elements), not bytes: an fp32 value takes 4 bytes",
                    2 / 3: "the fp32 master weights are in this file too, next to the two moments",
                    RANKS: "every stage from 1 on partitions the optimizer states over the ranks"})
_whole = memory.estimate(PARAMS, 0, precision="bf16").breakdown["gpu"]["params"]
close_to(as_bytes(checkpoint_file_bytes(PARAMS, 2, RANKS)["model_states"], "model_states at stage 2"), _whole,
         "checkpoint_file_bytes(PARAMS, 2, RANKS)['model_states']", 0.01, "bytes",
         hint="at stage 2 rank 0 writes the whole module, in its 16-bit training dtype",
         slips={2: "the module is saved in its 16-bit dtype, not in fp32", 1 / RANKS: "stages 0-2 keep whole 16-bit "
                "weights on every rank, and rank 0 saves them all"})
assert as_bytes(checkpoint_file_bytes(PARAMS, 3, RANKS)["model_states"], "model_states at stage 3") < _whole / RANKS / 2, \
    "checkpoint_file_bytes(PARAMS, 3, RANKS)['model_states'] is too large: at stage 3 the module holds placeholders"
### BEGIN HIDDEN TESTS
from zerolab.engine import memory as _memory
from zerolab.lesson.checks import close_to as _close_to, dict_keys as _dict_keys, plain as _plain
from zerolab.ckpt.answers import as_bytes as _as_bytes

for _params in (1_000_003, 13_000_000_000):
    for _stage in (1, 2, 3):
        for _ranks in (3, 8, 64):
            _name = f"checkpoint_file_bytes({_params}, {_stage}, {_ranks})"
            _got = _dict_keys(_plain(checkpoint_file_bytes(_params, _stage, _ranks), _name),
                              ["model_states", "optimizer_states"], _name)
            _gpu = _memory.estimate(_params, _stage, gpus_per_node=_ranks, precision="bf16").breakdown["gpu"]
            _close_to(_as_bytes(_got["optimizer_states"], _name), _gpu["master_weights"] + _gpu["optimizer_states"],
                      _name + "['optimizer_states']", 0.01, "bytes", hint="one rank's share of the fp32 states")
            _whole = _memory.estimate(_params, 0, precision="bf16").breakdown["gpu"]["params"]
            if _stage < 3:
                _close_to(_as_bytes(_got["model_states"], _name), _whole, _name + "['model_states']", 0.01, "bytes",
                          hint="rank 0 writes the whole 16-bit module at stages 0-2")
            else:
                assert _as_bytes(_got["model_states"], _name) < _whole / _ranks / 2, \
                    f"{_name}['model_states'] is too large: at stage 3 the module holds placeholders"
### END HIDDEN TESTS
passed("exercise 1")

# %% [markdown]
# Now the real thing: the tiny GPT trained for two steps on 2 ranks and saved at stages 1, 2 and 3. Once your test
# passes, the table lists every file DeepSpeed wrote with its size on disk, next to your prediction of its tensor
# bytes (the rest is the pickle around the tensors: names, shapes, the `ds_config`, a few kB). The three saves
# take a few minutes on a 2-core machine; a line after each says how long it took. <!-- claim: ckpt-files-a-few-kb-beyond-tensors -->

# %% [markdown] lang="zh" en="5332e4f1470f"
# 下面是真实的运行：这个小 GPT 在 2 个 rank 上训练两步，分别在 stage 1、2、3 下保存。你的测试通过后，表格会列出 DeepSpeed 写出的每个文件及其磁盘大小，旁边是你对其中张量字节数的预测（其余部分是张量外面的 pickle：名字、形状、`ds_config`，几 kB）。在 2 核的机器上，这三次保存要花几分钟；每次保存完成后会有一行显示它用了多久。 <!-- claim: ckpt-files-a-few-kb-beyond-tensors -->

# %%
import time

SAVED = {}
if RUN:
    for _stage in (1, 2, 3):
        _started = time.perf_counter()
        SAVED[_stage] = save_run(checkpoint_config(stage=_stage), os.path.join(WORK, f"stage{_stage}"), ranks=RANKS,
                                 steps=2, model=SPEC)
        print(tr(f"ZeRO-{_stage}: trained 2 steps on {RANKS} ranks and saved, in {time.perf_counter() - _started:.1f} s"))
else:
    print(tr("Real runs are skipped while grading."))

# %%
if SAVED and revealed("exercise 1"):
    from zerolab.ckpt.inspect import inspect_checkpoint

    for _stage in SAVED:
        _checkpoint = inspect_checkpoint(os.path.join(WORK, f"stage{_stage}"))
        _yours = checkpoint_file_bytes(PARAMS, _stage, RANKS)
        print(f"ZeRO-{_stage}")
        for _file in _checkpoint.files:
            _kind = "model_states" if _file.kind == "model states" else "optimizer_states"
            print(f"  rank {_file.rank}  {_file.name:<48} {_file.bytes:>9,} B  " + tr("yours") +
                  f" {_yours[_kind]:>11,.0f} B")

# %% [markdown]
# `zerolab ckpt inspect DIR` reads the same facts from the files' headers, without DeepSpeed and without loading a
# tensor (a 70B checkpoint takes as long as this one), and ends with the commands that consolidate or convert it.
# In a terminal: `zerolab ckpt inspect <folder>`.

# %% [markdown] lang="zh" en="9b180493ca60"
# `zerolab ckpt inspect DIR` 从文件头读出同样的信息，既不需要 DeepSpeed，也不加载任何张量（70B 的 checkpoint 和这个一样快），最后给出合并或转换它的命令。在终端里：`zerolab ckpt inspect <folder>`。

# %%
if SAVED and revealed("exercise 1"):
    print("\n".join(inspect_checkpoint(os.path.join(WORK, "stage3")).lines()))

# %% [markdown]
# ## 2. Consolidating, and the empty ZeRO-3 save
#
# At stage 3 a rank holds a whole weight only while its layer computes: between uses each parameter is an empty
# tensor on every rank, and its data lives in the partitions. <!-- claim: zero3-state-dict-holds-placeholders -->
# (Parameters of at most `stage3_param_persistence_threshold` elements, 100,000 by default, are the exception: once
# the first step is over they stay whole on every rank between steps. This lesson's configs set the threshold to 0, so every
# parameter of the tiny GPT is partitioned.) `save_checkpoint` releases every parameter, those too, before it saves
# the module, so the model-states files hold an empty placeholder for each parameter. Load one into the plain model
# and PyTorch refuses; here is the real message: <!-- claim: stage3-small-parameters-stay-whole --> <!-- claim: zero3-model-states-files-hold-placeholders -->

# %% [markdown] lang="zh" en="9677131ca70a"
# ## 2. 合并，以及空空如也的 ZeRO-3 保存
#
# 在 stage 3，rank 只在某一层计算时才持有它的完整权重：不用的时候，每个参数在每个 rank 上都是一个空张量，数据存在各个分片里。<!-- claim: zero3-state-dict-holds-placeholders -->（元素数不超过 `stage3_param_persistence_threshold`（默认 100,000）的参数是例外：第一步结束之后，它们在步与步之间在每个 rank 上都保持完整。本课的配置把这个阈值设为 0，所以小 GPT 的每个参数都被切分。）`save_checkpoint` 在保存模块之前会释放每一个参数，包括这些参数，所以模型状态文件里每个参数都是一个空占位符。把其中一个加载进普通模型，PyTorch 会拒绝；下面是真实的报错： <!-- claim: stage3-small-parameters-stay-whole --> <!-- claim: zero3-model-states-files-hold-placeholders -->

# %%
LOAD_ERROR = None
if 3 in SAVED:
    _tag = open(os.path.join(WORK, "stage3", "latest")).read().strip()
    _file = os.path.join(WORK, "stage3", _tag, "zero_pp_rank_0_mp_rank_00_model_states.pt")
    _module = torch.load(_file, map_location="cpu", weights_only=False)["module"]
    try:
        TinyGPT(SPEC).load_state_dict(_module)
    except RuntimeError as error:
        LOAD_ERROR = str(error)
    print("\n".join(LOAD_ERROR.splitlines()[:3]) if LOAD_ERROR else tr("(it loaded)"))

# %% [markdown]
# ### Exercise 2: diagnose it (1 point)
#
# What made `load_state_dict` fail above?
#
# - A: the checkpoint was saved on 2 ranks and is loaded into 1 process
# - B: the file was cut short while it was being copied
# - C: ZeRO-3 partitions the parameters; the module in this file holds empty placeholders because the save did
#   not gather them
# - D: the weights were saved in bf16 and the model expects fp32
#
# Set `DIAGNOSIS` to a letter.

# %% [markdown] lang="zh" en="6291dcecfd62"
# ### 练习 2：诊断（1 分）
#
# 上面的 `load_state_dict` 为什么失败？
#
# - A：checkpoint 是在 2 个 rank 上保存的，却加载进 1 个进程
# - B：文件在复制过程中被截断了
# - C：ZeRO-3 切分了参数；这个文件里的模块只有空占位符，因为保存时没有把参数 gather 起来
# - D：权重以 bf16 保存，而模型需要 fp32
#
# 把 `DIAGNOSIS` 设为一个字母。

# %% nbgrader={"grade": false, "grade_id": "ex2_diagnosis", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
DIAGNOSIS = "C"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex2_diagnosis", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import choice
from zerolab.ckpt.answers import diagnosis_letter

from zerolab.ckpt.answers import diagnosis_key

_letter = choice(DIAGNOSIS, "ABCD", "DIAGNOSIS")
assert _letter != diagnosis_letter("dtype"), "DIAGNOSIS is not right: a dtype difference alone loads (PyTorch copies and casts); " \
    "read the shapes in the message"
assert _letter != diagnosis_letter("world_size"), "DIAGNOSIS is not right: this is plain torch.load and " \
    "load_state_dict, which know nothing of ranks; read the shapes in the message"
assert _letter != diagnosis_letter("truncated"), "DIAGNOSIS is not right: a file cut short fails in torch.load " \
    "itself, before load_state_dict sees any shape"
assert _letter == diagnosis_key(), "DIAGNOSIS is not right: read the shapes the message compares"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks_source import off_limits as _off_limits

_off_limits("DIAGNOSIS", ["zerolab.ckpt.answers"], exercise="exercise 2",
            instead="write your own answer: the course's answer key is what grades it")
from zerolab.lesson.checks import choice as _choice, plain as _plain
from zerolab.ckpt.answers import diagnosis_key as _diagnosis_key

assert _choice(_plain(DIAGNOSIS, "DIAGNOSIS"), "ABCD", "DIAGNOSIS") == _diagnosis_key(), \
    "DIAGNOSIS is not right: read the shapes the message compares"
### END HIDDEN TESTS
passed("exercise 2")

# %% [markdown]
# <details><summary>Answer: open it once your test cell says "Right."</summary>
#
# **Answer.** Every size mismatch reads `torch.Size([0])` from the checkpoint: the tensors are ZeRO-3's
# placeholders. The weights are in the checkpoint all the same, as fp32 partitions inside the optimizer-state
# files; consolidating puts them back together (exercise 3). A world-size mismatch shows up only when DeepSpeed
# loads its own checkpoint (section 3); a truncated file fails in `torch.load` itself; a dtype difference loads.
# <!-- claim: zero3-model-states-files-hold-placeholders --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: truncated-file-fails-in-torch-load --> <!-- claim: load-state-dict-casts-dtype -->
#
# </details>

# %% [markdown] lang="zh" en="fbed108fd141"
# <details><summary>答案：测试单元格输出“正确。”之后再展开</summary>
#
# **答案。** 每一条 size mismatch 里，来自 checkpoint 的形状都是 `torch.Size([0])`：这些张量正是 ZeRO-3 的占位符。权重其实仍在 checkpoint 里，以 fp32 分片的形式存在各个优化器状态文件中；合并会把它们拼回去（练习 3）。world size 不一致只有在 DeepSpeed 加载它自己的 checkpoint 时才会出现（第 3 节）；文件被截断会在 `torch.load` 阶段就失败；dtype 不同则可以正常加载。
# <!-- claim: zero3-model-states-files-hold-placeholders --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: truncated-file-fails-in-torch-load --> <!-- claim: load-state-dict-casts-dtype -->
#
# </details>

# %% [markdown]
# ### Exercise 3: consolidate (3 points)
#
# Write `consolidate(checkpoint_dir)`: from the folder `save_checkpoint` wrote (with its `latest`), return one
# ordinary state dict `{parameter name: fp32 tensor}` equal to the weights the ranks trained, for any stage from 1
# to 3. Use DeepSpeed's own functions (`deepspeed.utils.zero_to_fp32`), not a merge of your own. The test cell
# starts 2 ranks, trains and saves a ZeRO-3 checkpoint under a tag of its own in a temporary folder, and compares
# your state dict with the parameters the ranks held (10 s to a minute, depending on the machine's load).
# <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master -->

# %% [markdown] lang="zh" en="0d43e1b0bdd7"
# ### 练习 3：合并（3 分）
#
# 编写 `consolidate(checkpoint_dir)`：对 `save_checkpoint` 写出的文件夹（带 `latest`），返回一个普通的 state dict `{参数名: fp32 张量}`，它要等于各 rank 训练出的权重，对 stage 1 到 3 的任何一个都成立。请使用 DeepSpeed 自己的函数（`deepspeed.utils.zero_to_fp32`），不要自己写合并。测试单元格会启动 2 个 rank，训练并以它自己的 tag 在临时文件夹中保存一个 ZeRO-3 checkpoint，然后把你的 state dict 与各 rank 持有的参数比较（10 秒到 1 分钟，视机器负载而定）。 <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master -->

# %% nbgrader={"grade": false, "grade_id": "ex3_consolidate", "locked": false, "schema_version": 3, "solution": true, "task": false}
def consolidate(checkpoint_dir):
    """One fp32 state dict from a ZeRO checkpoint folder."""
    ### BEGIN SOLUTION
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex3_consolidate", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
import tempfile as _tempfile

import torch as _torch

from zerolab.lesson.checks_source import off_limits

off_limits("consolidate", ["zerolab.ckpt"], exercise="exercise 3", instead="call DeepSpeed's zero_to_fp32 functions")
from zerolab.ckpt.answers import quietly as _quietly
from zerolab.ckpt.runs import SMALL as _SMALL, checkpoint_config as _config, save_run as _save_run

with _tempfile.TemporaryDirectory(prefix="zerolab-test-ex3-") as _folder:
    _ranks = _quietly(_save_run, _config(stage=3), _folder, ranks=2, steps=2, model=_SMALL, tag="test_ex3")
    try:
        _state = _quietly(consolidate, _folder)
    except NotImplementedError:
        raise
    except Exception as _error:
        raise AssertionError(f"consolidate(...) failed: {type(_error).__name__}: {_error}. This test saves under a "
                             "tag of its own: the folder's `latest` names it") from None
assert isinstance(_state, dict), f"wrong type: consolidate(...) should return a dict, got {type(_state).__name__}"
_trained = _ranks[0]["final"]["params"]
_missing = sorted(set(_trained) - set(_state))
assert not _missing, f"missing key: the state dict has no {_missing[0]!r}; every parameter of the model belongs in it"
for _key, _values in _trained.items():
    _tensor = _state[_key]
    assert isinstance(_tensor, _torch.Tensor), f"wrong type: {_key!r} should be a torch.Tensor"
    assert _tensor.numel() == len(_values), \
        f"wrong shape: {_key!r} has {_tensor.numel()} elements; an empty tensor is a ZeRO-3 placeholder, and the " \
        "weights are in the optimizer-state files"
    assert _tensor.dtype == _torch.float32, f"wrong dtype: {_key!r} is {_tensor.dtype}; consolidate to fp32"
    assert _tensor.to(_torch.bfloat16).float().flatten().tolist() == _values, \
        f"wrong values: {_key!r} is not what the ranks trained"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import plain as _plain

for _key, _values in _trained.items():
    _got = _plain(_state[_key].to(_torch.bfloat16).float().flatten().tolist(), _key)
    assert _got == _values, f"wrong values: {_key!r} is not what the ranks trained"
assert sorted(_plain(list(_state), "the state dict's keys")) == sorted(_trained), \
    "extra keys: the state dict holds more than the model's parameters"
### END HIDDEN TESTS
passed("exercise 3")

# %% [markdown]
# `zero_to_fp32` rebuilds each weight from the fp32 master partitions in the optimizer-state files, so it works
# at every stage from 1 to 3 (a stage-0 save has no such files, and needs none: its model-states file holds the
# weights whole) and needs no GPU and no DeepSpeed engine; the same script sits in every such checkpoint folder
# (`python zero_to_fp32.py . out/`), and `zerolab ckpt consolidate DIR OUT` is a front to it (fp32, bf16 or fp16,
# safetensors). Its memory need: `get_fp32_state_dict_from_zero_checkpoint` (exercise 3) returns the whole fp32
# model in host RAM, while the script and `zerolab ckpt consolidate` map the optimizer-state files instead of
# reading them and make and write one output shard at a time (5 GB by default), so they hold about one shard of
# fp32 at a time, besides the model-states file they read whole (the 16-bit weights, at stages 1-2).
#
# The other way out is to save whole 16-bit weights at the end of training: `engine.save_16bit_model(dir)`. At
# stage 3 it has something to save only when the config asks DeepSpeed to gather the partitions at save time.
# <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: stage0-optimizer-in-the-model-states-file --> <!-- claim: model-states-file-holds-module-steps-config --> <!-- claim: ckpt-latest-beside-the-tag-folder --> <!-- claim: zero-to-fp32-script-in-the-folder --> <!-- claim: zero-to-fp32-memory --> <!-- claim: save-16bit-model-whole-and-gather-flag -->

# %% [markdown] lang="zh" en="8354a64dd6cf"
# `zero_to_fp32` 从优化器状态文件里的 fp32 主权重分片重建每个权重，所以它在 stage 1 到 3 都能用（stage 0 的保存没有这些文件，也用不着：它的模型状态文件里就是完整的权重），既不需要 GPU，也不需要 DeepSpeed 引擎；每个这样的 checkpoint 文件夹里都有同一个脚本（`python zero_to_fp32.py . out/`），`zerolab ckpt consolidate DIR OUT` 则是它的一个前端（fp32、bf16 或 fp16，可输出 safetensors）。内存需求：`get_fp32_state_dict_from_zero_checkpoint`（练习 3）会在主机内存里返回整个 fp32 模型；而脚本和 `zerolab ckpt consolidate` 以内存映射（mmap）方式打开优化器状态文件而不把它们整个读入，并且一次只生成并写出一个输出分片（默认 5 GB），所以它们同一时刻只持有大约一个分片的 fp32 数据，另外还有整个读入的模型状态文件（stage 1-2 时其中是 16 位权重）。
#
# 另一条路是在训练结束时保存完整的 16 位权重：`engine.save_16bit_model(dir)`。在 stage 3，只有当配置要求 DeepSpeed 在保存时把分片 gather 起来，它才有东西可存。
# <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: stage0-optimizer-in-the-model-states-file --> <!-- claim: model-states-file-holds-module-steps-config --> <!-- claim: ckpt-latest-beside-the-tag-folder --> <!-- claim: zero-to-fp32-script-in-the-folder --> <!-- claim: zero-to-fp32-memory --> <!-- claim: save-16bit-model-whole-and-gather-flag -->

# %% [markdown]
# ### Exercise 4: a ZeRO-3 config whose 16-bit save loads (2 points)
#
# Write `zero3_save_config(config)`: return a copy of the ds_config `config` (a dict; leave it unchanged) that
# trains with ZeRO stage 3 and makes `engine.save_16bit_model(dir)` write the whole 16-bit weights, so that plain
# `torch.load` + `load_state_dict` reads them. Keep every other field of `config`. The test checks your config
# with DeepSpeed's own config class; after it passes, the cell below runs it for real. <!-- claim: save-16bit-model-whole-and-gather-flag -->

# %% [markdown] lang="zh" en="a9fc505f24d5"
# ### 练习 4：让 ZeRO-3 的 16 位保存可以被加载（2 分）
#
# 编写 `zero3_save_config(config)`：返回 ds_config `config`（一个 dict；不要修改它本身）的一个副本，它用 ZeRO stage 3 训练，并让 `engine.save_16bit_model(dir)` 写出完整的 16 位权重，使普通的 `torch.load` + `load_state_dict` 能读取它们。保留 `config` 的其他所有字段。测试用 DeepSpeed 自己的配置类检查你的配置；通过后，下面的单元格会真实地运行它。 <!-- claim: save-16bit-model-whole-and-gather-flag -->

# %% nbgrader={"grade": false, "grade_id": "ex4_zero3_save_config", "locked": false, "schema_version": 3, "solution": true, "task": false}
def zero3_save_config(config):
    """A copy of ``config`` at ZeRO-3 whose save_16bit_model writes whole 16-bit weights."""
    ### BEGIN SOLUTION
    import copy

    config = copy.deepcopy(config)
    zero = config.setdefault("zero_optimization", {})
    zero["stage"] = 3
    zero["stage3_gather_16bit_weights_on_model_save"] = True
    return config
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex4_zero3_save_config", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
import json as _json

from zerolab.config import import_deepspeed as _import_deepspeed

_import_deepspeed()  # its start-up log stays off the output
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig as _ZeroConfig

_given = checkpoint_config(stage=2)
_given["zero_optimization"]["contiguous_gradients"] = False  # a field of its own that must survive
_before = _json.dumps(_given, sort_keys=True)
_mine = zero3_save_config(_given)
assert _json.dumps(_given, sort_keys=True) == _before, "changed input: return a copy and leave config as it was"
assert isinstance(_mine, dict), f"wrong type: zero3_save_config(...) should return a dict, got {type(_mine).__name__}"
assert isinstance(_mine.get("zero_optimization"), dict), "missing key: the ZeRO settings belong in 'zero_optimization'"
_parsed = _ZeroConfig(**_mine["zero_optimization"])
assert int(_parsed.stage) == 3, "wrong stage: DeepSpeed reads a stage other than 3 from your zero_optimization"
assert _parsed.gather_16bit_weights_on_model_save is True, \
    "not gathered: DeepSpeed's config class reads your zero_optimization as not gathering the 16-bit weights at save"
for _key in _given:
    assert _key in _mine, f"missing key: {_key!r} of the given config is gone; keep every other field"
for _key, _value in _given["zero_optimization"].items():
    assert _key == "stage" or _mine["zero_optimization"].get(_key) == _value, \
        f"missing key: zero_optimization's {_key!r} of the given config is gone or changed; keep the other " \
        "zero_optimization fields"
### BEGIN HIDDEN TESTS
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig as _ZeroConfig2
from zerolab.lesson.checks import plain as _plain

_given = {"train_batch_size": 32, "bf16": {"enabled": True},
          "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": 12345}}
_before = _json.dumps(_given, sort_keys=True)
_mine = _plain(zero3_save_config(_given), "zero3_save_config(...)")
assert _json.dumps(_given, sort_keys=True) == _before, "changed input: return a copy and leave config as it was"
_parsed = _ZeroConfig2(**_mine["zero_optimization"])
assert int(_parsed.stage) == 3 and _parsed.gather_16bit_weights_on_model_save is True, \
    "not gathered: DeepSpeed's config class reads your zero_optimization as not gathering the 16-bit weights at save"
assert _mine["zero_optimization"]["offload_optimizer"] == _given["zero_optimization"]["offload_optimizer"] and \
    _parsed.reduce_bucket_size == _given["zero_optimization"]["reduce_bucket_size"], \
    "missing key: keep the other zero_optimization fields of the given config"
assert {k: v for k, v in _mine.items() if k != "zero_optimization"} == \
    {k: v for k, v in _given.items() if k != "zero_optimization"}, "changed field: keep every other field as given"
### END HIDDEN TESTS
passed("exercise 4")

# %% [markdown]
# Your config, for real: ZeRO-3 on 2 ranks, `save_16bit_model`, then plain PyTorch loads the file into a fresh
# model with `strict=True`. <!-- claim: save-16bit-model-whole-and-gather-flag -->

# %% [markdown] lang="zh" en="3ac5df454992"
# 真实地运行你的配置：2 个 rank 上的 ZeRO-3，调用 `save_16bit_model`，然后用普通 PyTorch 以 `strict=True` 把文件加载进一个新模型。 <!-- claim: save-16bit-model-whole-and-gather-flag -->

# %%
_learner_config = learner_value(zero3_save_config, checkpoint_config(stage=2))
if not RUN:
    print(tr("Real runs are skipped while grading."))
elif _learner_config is None:
    answer_first("exercise 4")
elif revealed("exercise 4"):
    _folder = os.path.join(WORK, "stage3_16bit")
    _ranks = save_run(_learner_config, _folder, ranks=RANKS, steps=2, model=SPEC, save_16bit="model.bin")
    _model = TinyGPT(SPEC)
    _model.load_state_dict(torch.load(os.path.join(_folder, "model.bin"), map_location="cpu"), strict=True)
    _same = all(p.float().flatten().tolist() == _ranks[0]["final"]["params"][name]
                for name, p in _model.named_parameters())
    print(tr(f"loaded with strict=True; every weight equal to what the ranks trained: {_same}"))

# %% [markdown]
# ## 3. Resuming on another number of GPUs
#
# A ZeRO checkpoint is cut for the world size that saved it: each optimizer-state file is one rank's flat
# partition. Here is what DeepSpeed says when the 2-rank ZeRO-2 checkpoint of section 1 is loaded on 3 ranks
# (measured now): <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions -->

# %% [markdown] lang="zh" en="dfa6121b49a8"
# ## 3. 在另一个 GPU 数量上恢复训练
#
# ZeRO checkpoint 是按保存它的 world size 切分的：每个优化器状态文件都是某一个 rank 的扁平分片。下面是把第 1 节那个 2 rank 的 ZeRO-2 checkpoint 放到 3 个 rank 上加载时，DeepSpeed 给出的报错（现场实测）：<!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions -->

# %%
if 2 in SAVED:
    try:
        resume_run(checkpoint_config(stage=2), os.path.join(WORK, "stage2"), ranks=3, steps=0, model=SPEC)
        print(tr("(it loaded)"))
    except RunFailed as failure:
        print(str(failure))

# %% [markdown]
# The way out is a **universal checkpoint**: DeepSpeed's `ds_to_universal` rewrites the tag folder as one folder per
# parameter (`zero/<name>/fp32.pt`, `exp_avg.pt`, `exp_avg_sq.pt`), with no trace of the old partitioning, and writes
# `latest_universal` next to it. A job on any number of ranks loads it when its config has
# `"checkpoint": {"load_universal": true}`. <!-- claim: universal-checkpoint-per-parameter -->
# <!-- claim: universal-info-needed-at-stages-1-2 --> (At stages 1 and 2
# the save must carry `client_state={"universal_checkpoint_info": {"universal_checkpoint_version": 0.4}}`, which the
# lesson's runs pass: DeepSpeed 0.19.8 writes it only for AutoTP and AutoEP models, and 0.4 is its
# `UNIVERSAL_CHECKPOINT_VERSION_VALUE`. `ds_to_universal --inject_missing_state` adds it to a save without it. A
# stage-3 save converts without it.)
#
# ### Exercise 5: resume on 3 ranks (4 points)
#
# Write `prepare_resume(checkpoint_dir, universal_dir, config)`: convert the checkpoint that `latest` names in
# `checkpoint_dir` into a universal checkpoint in `universal_dir` (DeepSpeed's
# `deepspeed.checkpoint.ds_to_universal`: call its `main` with its command-line arguments as an
# `argparse.Namespace` of the seven fields it reads, `input_folder`, `output_folder`, `num_extract_workers`,
# `num_merge_workers`, `keep_temp_folder`, `strict` and `inject_missing_state`, one tag folder in, the same tag name out, one extract and one merge worker: the grader's
# sandbox allows no process pool), and return the ds_config to resume with: a copy of `config` that
# loads universal checkpoints. The test saves a 2-rank ZeRO-2 job under a tag of its own, calls your function,
# resumes on **3 ranks**
# from `universal_dir` for one more step, and checks that every rank starts from the saved parameters and that the
# step counters continue (20 s to 2 minutes, depending on the machine's load). <!-- claim: ds-to-universal-in-process-with-one-worker -->

# %% [markdown] lang="zh" en="0578e20db83e"
# 出路是 **universal checkpoint**：DeepSpeed 的 `ds_to_universal` 把 tag 文件夹改写成每个参数一个文件夹（`zero/<name>/fp32.pt`、`exp_avg.pt`、`exp_avg_sq.pt`），不再留有原先切分的痕迹，并在旁边写出 `latest_universal`。只要配置里有 `"checkpoint": {"load_universal": true}`，任意 rank 数的作业都能加载它。<!-- claim: universal-checkpoint-per-parameter --> <!-- claim: universal-info-needed-at-stages-1-2 -->（在 stage 1 和 2，保存时必须带上 `client_state={"universal_checkpoint_info": {"universal_checkpoint_version": 0.4}}`，本课的运行都传了它：DeepSpeed 0.19.8 只为 AutoTP 和 AutoEP 模型自动写入它，0.4 就是它的 `UNIVERSAL_CHECKPOINT_VERSION_VALUE`。对没有它的保存，`ds_to_universal --inject_missing_state` 会把它补上。stage 3 的保存不需要它也能转换。）
#
# ### 练习 5：在 3 个 rank 上恢复（4 分）
#
# 编写 `prepare_resume(checkpoint_dir, universal_dir, config)`：把 `checkpoint_dir` 中 `latest` 指向的 checkpoint 转换成 `universal_dir` 中的 universal checkpoint（用 DeepSpeed 的 `deepspeed.checkpoint.ds_to_universal`：把它的命令行参数做成一个 `argparse.Namespace` 传给它的 `main`，其中要有它读取的七个字段：`input_folder`、`output_folder`、`num_extract_workers`、`num_merge_workers`、`keep_temp_folder`、`strict` 和 `inject_missing_state`；输入一个 tag 文件夹，输出用同一个 tag 名，extract 和 merge 各用一个 worker：评分沙箱不允许使用进程池），并返回用于恢复的 ds_config：`config` 的一个副本，它会加载 universal checkpoint。测试会用它自己的 tag 保存一个 2 rank 的 ZeRO-2 作业，调用你的函数，再从 `universal_dir` 在 **3 个 rank** 上恢复并多训练一步，检查每个 rank 都从保存的参数开始、步数计数器接着往下走（20 秒到 2 分钟，视机器负载而定）。 <!-- claim: ds-to-universal-in-process-with-one-worker -->

# %% nbgrader={"grade": false, "grade_id": "ex5_prepare_resume", "locked": false, "schema_version": 3, "solution": true, "task": false}
def prepare_resume(checkpoint_dir, universal_dir, config):
    """Convert checkpoint_dir's latest tag into universal_dir; return the ds_config that resumes from it."""
    ### BEGIN SOLUTION
    import argparse
    import copy

    from deepspeed.checkpoint import ds_to_universal

    with open(os.path.join(checkpoint_dir, "latest")) as handle:
        tag = handle.read().strip()
    # One worker each: the conversion runs in this process (more would start a process pool).
    ds_to_universal.main(argparse.Namespace(
        input_folder=os.path.join(checkpoint_dir, tag), output_folder=os.path.join(universal_dir, tag),
        num_extract_workers=1, num_merge_workers=1, keep_temp_folder=False, strict=True, inject_missing_state=False))
    config = copy.deepcopy(config)
    config["checkpoint"] = {"load_universal": True}
    return config
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex5_prepare_resume", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
import os as _os
import tempfile as _tempfile
from subprocess import CalledProcessError as _CalledProcessError

from zerolab.lesson.checks_source import off_limits

off_limits("prepare_resume", ["zerolab.ckpt"], exercise="exercise 5", instead="run DeepSpeed's ds_to_universal")
from zerolab.ckpt.answers import no_process_pool as _no_process_pool, quietly as _quietly
from zerolab.ckpt.runs import SMALL as _SMALL, checkpoint_config as _config, resume_run as _resume, save_run as _save
from zerolab.run import RunFailed as _RunFailed

with _tempfile.TemporaryDirectory(prefix="zerolab-test-ex5-") as _folder, _no_process_pool():
    _saved_dir, _universal_dir = _os.path.join(_folder, "ck"), _os.path.join(_folder, "universal")
    _saved = _quietly(_save, _config(stage=2), _saved_dir, ranks=2, steps=2, model=_SMALL, tag="test_ex5")[0]["final"]
    try:
        _resume_config = _quietly(prepare_resume, _saved_dir, _universal_dir, _config(stage=2))
    except _CalledProcessError as _failure:
        raise AssertionError(f"ds_to_universal failed in the process you started (exit status "
                             f"{_failure.returncode}): call ds_to_universal.main in this process instead, with an "
                             "argparse.Namespace of its seven fields (see the exercise)") from None
    except (NotImplementedError, AssertionError):
        raise
    except Exception as _error:
        raise AssertionError(f"prepare_resume(...) failed: {type(_error).__name__}: {_error}. This test saves under "
                             "a tag of its own: the folder's `latest` names it") from None
    assert isinstance(_resume_config, dict), \
        f"wrong type: prepare_resume(...) should return a ds_config dict, got {type(_resume_config).__name__}"
    assert _os.path.isfile(_os.path.join(_universal_dir, "latest_universal")), \
        "missing file: universal_dir has no latest_universal; convert the tag folder into universal_dir/<tag>"
    ### BEGIN HIDDEN TESTS
    import json as _json

    _tag = open(_os.path.join(_saved_dir, "latest")).read().strip()
    assert not _os.path.exists(_os.path.join(_universal_dir, _tag, "tmp")), \
        "leftover files: ds_to_universal's scratch folder tmp is still in universal_dir/<tag>; let it delete it"
    _given = _config(stage=2)
    _before = _json.dumps(_given, sort_keys=True)
    _quietly(prepare_resume, _saved_dir, _os.path.join(_folder, "universal_again"), _given)
    assert _json.dumps(_given, sort_keys=True) == _before, "changed input: return a copy and leave config as it was"
    ### END HIDDEN TESTS
    try:
        _resumed = _quietly(_resume, _resume_config, _universal_dir, ranks=3, steps=1, model=_SMALL)
    except _RunFailed as _failure:
        raise AssertionError(f"the resume on 3 ranks failed: {_failure}") from None
for _rank in _resumed:
    assert _rank["loaded"]["params"] == _saved["params"], \
        "wrong parameters: after load_checkpoint a rank does not hold the saved weights"
    assert _rank["loaded"]["global_steps"] == _saved["global_steps"], \
        "wrong step: the resumed engine does not continue from the saved global step"
    assert _rank["final"]["optimizer_step"] == _saved["optimizer_step"] + 1, \
        "wrong step: Adam's step count starts over; the optimizer states were not loaded"
### BEGIN HIDDEN TESTS
from zerolab.lesson.checks import plain as _plain

_plain(_resume_config, "prepare_resume(...)")
assert len(_resumed) == 3 and all(_rank["final"]["global_steps"] == _saved["global_steps"] + 1 for _rank in _resumed), \
    "wrong step: the resumed job did not take its step on every rank"
### END HIDDEN TESTS
passed("exercise 5")

# %% [markdown]
# <details><summary>Why it works: open it once your test cell says "Right."</summary>
#
# The universal folder stores every parameter whole, with its fp32 master copy and both Adam moments, so the
# loading job cuts its own partitions for its own world size; `latest_universal` tells `load_checkpoint` which tag
# to read when `load_universal` is on. The global step and Adam's step count come back, so the learning-rate
# schedule and Adam's bias correction go on as if nothing had happened. `zerolab ckpt inspect` prints the exact
# conversion command for any ZeRO checkpoint.
# <!-- claim: universal-checkpoint-per-parameter --> <!-- claim: load-universal-reads-latest-universal --> <!-- claim: universal-resume-restores-the-steps -->
#
# </details>

# %% [markdown] lang="zh" en="1eee8f106ad3"
# <details><summary>原理：测试单元格输出“正确。”之后再展开</summary>
#
# universal 文件夹把每个参数完整地存下来，连同它的 fp32 主权重和 Adam 的两个矩，所以加载它的作业会按自己的 world size 切出自己的分片；当 `load_universal` 打开时，`latest_universal` 告诉 `load_checkpoint` 读哪个 tag。全局步数和 Adam 的步数计数都被恢复，所以学习率调度和 Adam 的偏差校正会像什么都没发生一样继续下去。对任何 ZeRO checkpoint，`zerolab ckpt inspect` 都会打印出确切的转换命令。
# <!-- claim: universal-checkpoint-per-parameter --> <!-- claim: load-universal-reads-latest-universal --> <!-- claim: universal-resume-restores-the-steps -->
#
# </details>

# %% [markdown]
# ## Summary
#
# - `save_checkpoint` writes `latest`, a tag folder, and (from stage 1 on) `zero_to_fp32.py`; rank 0 writes `latest`
#   without waiting for the others, so a job killed during a save can leave a `latest` that names an incomplete tag
#   (`zerolab ckpt inspect` says which rank's file is missing).
# - One optimizer-state file per rank holds its share of the fp32 master weights and Adam moments (12 bytes per
#   parameter over the ranks); the module file holds whole 16-bit weights at stages 0-2 and placeholders at stage 3.
# - `zero_to_fp32` (or `zerolab ckpt consolidate`) rebuilds an ordinary state dict from any stage from 1 to 3;
#   `stage3_gather_16bit_weights_on_model_save` + `save_16bit_model` writes one directly at stage 3.
# - A ZeRO checkpoint loads only on the world size that saved it; `ds_to_universal` + `load_universal` resumes on
#   any other. <!-- claim: ckpt-latest-beside-the-tag-folder --> <!-- claim: latest-written-by-rank-0-without-waiting --> <!-- claim: save-checkpoint-files-per-stage --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions --> <!-- claim: zero3-model-states-files-hold-placeholders --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: save-16bit-model-whole-and-gather-flag --> <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: universal-checkpoint-per-parameter -->

# %% [markdown] lang="zh" en="888f0e2a8f41"
# ## 小结
#
# - `save_checkpoint` 写出 `latest`、一个 tag 文件夹和（从 stage 1 起）`zero_to_fp32.py`；rank 0 写 `latest` 时并不等待其他 rank，所以保存途中被杀掉的作业可能留下一个指向不完整 tag 的 `latest`（`zerolab ckpt inspect` 会指出缺了哪个 rank 的文件）。
# - 每个 rank 一个优化器状态文件，装着它那一份 fp32 主权重和 Adam 的矩（每参数 12 字节，按 rank 切分）；模块文件在 stage 0-2 装着完整的 16 位权重，在 stage 3 只有占位符。
# - `zero_to_fp32`（或 `zerolab ckpt consolidate`）能从 stage 1 到 3 的任何 stage 重建普通的 state dict；在 stage 3，`stage3_gather_16bit_weights_on_model_save` + `save_16bit_model` 可以直接写出一份。
# - ZeRO checkpoint 只能在保存它的 world size 上加载；`ds_to_universal` + `load_universal` 可以在任意其他 world size 上恢复。 <!-- claim: ckpt-latest-beside-the-tag-folder --> <!-- claim: latest-written-by-rank-0-without-waiting --> <!-- claim: save-checkpoint-files-per-stage --> <!-- claim: optim-states-hold-the-ranks-fp32-partitions --> <!-- claim: zero3-model-states-files-hold-placeholders --> <!-- claim: zero-to-fp32-rebuilds-from-the-fp32-master --> <!-- claim: save-16bit-model-whole-and-gather-flag --> <!-- claim: zero-checkpoint-cut-for-its-world-size --> <!-- claim: universal-checkpoint-per-parameter -->

# %%
shutil.rmtree(WORK, ignore_errors=True)
print(tr(f"removed {WORK}"))
