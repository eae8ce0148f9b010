# %% [markdown]
# # Lesson 04: Writing the config
#
# Everything lessons 01 to 03 computed is switched on or off by one JSON file: the DeepSpeed config
# (`ds_config`). In this lesson you write one, field by field, and let DeepSpeed's own config classes
# and zerolab tell you what it does.

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
# classes, check that it is made of plain JSON values, and try more inputs.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import copy
import json

import torch
from zerolab.config import import_deepspeed

import_deepspeed()  # DeepSpeed's start-up log stays off the output
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig, DeepSpeedZeroOffloadParamConfig

from zerolab import comm, units
from zerolab.config import check_config, config_effect

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
#   2 to the power `initial_scale_power`. When a step overflows, the step is skipped; after `hysteresis`
#   overflows the scale is halved, never below `min_loss_scale` (at the floor DeepSpeed stops the run with
#   "Current loss scale already at minimum"). After `loss_scale_window` clean steps the scale doubles.
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
# What does DeepSpeed 0.19.8 use when a field is missing? Ask its own config classes:

# %%
for stage in (1, 2, 3):
    zero = DeepSpeedZeroConfig(stage=stage)
    print(f"stage {stage}: overlap_comm={zero.overlap_comm}  contiguous_gradients={zero.contiguous_gradients}  "
          f"reduce_bucket_size={zero.reduce_bucket_size:.0e}  allgather_bucket_size={zero.allgather_bucket_size:.0e}")
print("offload_optimizer.pin_memory default:", DeepSpeedZeroOffloadOptimizerConfig().pin_memory)
print("offload_param.pin_memory default:    ", DeepSpeedZeroOffloadParamConfig().pin_memory)

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
# check the same things through DeepSpeed's own `DeepSpeedConfig` and as plain JSON data.

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
from zerolab.checks import dict_keys, same_value
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
print("Visible checks passed: ZeRO-2 + overlap_comm + CPU optimizer offload with pinned memory, given fields kept.")
### BEGIN HIDDEN TESTS
import copy
from deepspeed.runtime.config import DeepSpeedConfig
from zerolab.checks import plain
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

# %%
from zerolab.checks import learner_value
from zerolab.config import reference

PARAMS = units.parse_count("13B")
GPUS = 8
config = reference.zero2_offload()  # the course's answer; yours is added below when it runs
without_offload = copy.deepcopy(config)
del without_offload["zero_optimization"]["offload_optimizer"]
rows = [("ZeRO-2", without_offload), ("ZeRO-2 + CPU optimizer offload", config)]
yours = learner_value(build_deepspeed_config)
if yours is not None and learner_value(config_effect, yours, PARAMS, GPUS) is not None:
    rows.append(("your build_deepspeed_config()", yours))
for label, cfg in rows:
    for accounting in ("paper", "deepspeed"):
        e = config_effect(cfg, params=PARAMS, gpus_per_node=GPUS, accounting=accounting).memory
        print(f"{label:31} {accounting:9}: GPU {units.format_bytes(e.gpu_bytes, 'GB'):>9} "
              f"({units.format_bytes(e.gpu_bytes, 'GiB')})   host per node {units.format_bytes(e.cpu_bytes, 'GB')}")

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
# `reduce_bucket_size`) and fp16 elements (the size torch reports):

# %%
bucket_elements = DeepSpeedZeroConfig(stage=2).reduce_bucket_size
for overlap in (False, True):
    buffers = comm.bucket_buffer_bytes(bucket_elements, "fp16", overlap_comm=overlap)
    print(f"overlap_comm={overlap!s:5}: {units.format_bytes(buffers, 'GB')} of gradient buckets "
          f"(reduce_bucket_size = {bucket_elements:.0e} fp16 elements)")

# %% [markdown]
# One more thing the config doctor of lesson 05 notices: the batch numbers of the skeleton multiply out on **one**
# GPU. Take the same config to 8 GPUs and DeepSpeed refuses it:

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
# not divide. Hidden tests compare your function with DeepSpeed's own batch derivation on more inputs.

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
from zerolab.checks import whole

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
print("Visible checks passed.")
### BEGIN HIDDEN TESTS
from zerolab.checks import plain
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
# bf16 has the exponent range of fp32, so it needs no loss scaling and never overflows where fp32 would not. It runs
# fast on tensor cores from the Ampere generation on (compute capability 8.0: A100, RTX 30xx, and later H100 at 9.0).
# Older cards such as the T4 that free Colab gives you (Turing, 7.5) or the V100 (7.0) have fast fp16 but no bf16
# tensor cores, so there you train in fp16 with dynamic loss scaling. Enabling both is an error:

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
# reports fp16 as unsupported below 7.0 (a P100 is 6.0) unless `DS_ALLOW_DEPRECATED_FP16=1` is set, and the engine
# then refuses an fp16 config: there, enable neither and train in fp32. Hidden tests try more GPUs, ask DeepSpeed's
# own accelerator rule, and pass your blocks to DeepSpeed.

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
from zerolab.checks import dict_keys

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
print("Visible checks passed.")
### BEGIN HIDDEN TESTS
import copy
import os as _os
from unittest import mock as _mock
from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator as _CUDA
from deepspeed.runtime.config import DeepSpeedConfig
from zerolab.checks import plain


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

# %%
if torch.cuda.is_available():
    capability = torch.cuda.get_device_capability()
    print(torch.cuda.get_device_name(), capability, "->", mixed_precision(capability))
else:
    print("No GPU here: on a GPU this cell prints its compute capability and your choice.")

# %% [markdown]
# Memory is the same either way: fp16 and bf16 both store 2 bytes per value, so every estimate in this course is the
# same for both. (One caution, read in the code but not tried on a real card: DeepSpeed's CUDA accelerator asks
# `torch.cuda.is_bf16_supported()`, which in recent PyTorch also accepts *emulated* bf16, so it can say yes on a
# pre-Ampere card that then runs bf16 slowly or fails in a kernel. Trust the compute capability.)

# %% [markdown]
# ## Exercise 4: ZeRO-3 with parameter offload (2 points)
#
# When even the fp16 parameters do not fit, ZeRO-3 partitions them too, and `offload_param` moves the partition
# to host memory. `offload_param` only works with stage 3: DeepSpeed accepts it with stage 2 without a word and then
# ignores it (the stage 1/2 optimizer never receives it; lesson 05 catches that).
#
# Write `zero3_offload(config)`: return a **new** config (leave the argument unchanged) with `stage` 3 and both the
# optimizer and the parameters offloaded to CPU with pinned memory; everything else stays as it was. Hidden tests
# pass your result to DeepSpeed, try other configs and check that the input is unchanged.
#
# *Accepted:* a new `dict` whose `zero_optimization` has `stage` 3 (an `int`) and `offload_optimizer` and
# `offload_param` blocks with `device` `"cpu"` and `pin_memory` `True`; other fields of those blocks may stay. The
# visible test also tries a config without a `zero_optimization` block.

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
base = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True},
        "zero_optimization": {"stage": 2, "overlap_comm": True}}
from zerolab.checks import same_value

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
print("Visible checks passed.")
### BEGIN HIDDEN TESTS
import copy
from deepspeed.runtime.config import DeepSpeedConfig
from zerolab.checks import plain

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
# figure includes the largest layer, gathered in full while it computes):

# %%
rows = [("exercise 1: ZeRO-2, optimizer on CPU", reference.zero2_offload()),
        ("exercise 4: ZeRO-3, optimizer and parameters on CPU", reference.zero3_offload(reference.zero2_offload()))]
yours = learner_value(zero3_offload, reference.zero2_offload())
if yours is not None and learner_value(config_effect, yours, PARAMS, GPUS) is not None:
    rows.append(("your zero3_offload(...)", yours))
for label, cfg in rows:
    e = config_effect(cfg, params=PARAMS, gpus_per_node=GPUS, accounting="deepspeed").memory
    print(f"{label:52}: GPU {units.format_bytes(e.gpu_bytes, 'GiB'):>10}   host per node {units.format_bytes(e.cpu_bytes, 'GiB'):>10}")

# %% [markdown]
# The GPU side shrinks to little more than one gathered layer; the host side carries everything else. The price is
# PCIe traffic: with parameter offload each GPU fetches its parameter partition from the host for the forward pass
# and again for the backward pass (ZeRO-3 gathers twice, lesson 03), on every micro-step. Per GPU and optimizer step
# in DeepSpeed 0.19.8's accounting (gradients go down as fp32; lessons 02 and 06 measure it), with the config's
# accumulation steps on 8 GPUs (`train_batch_size` is dropped so that DeepSpeed derives it for 8
# GPUs; the value in the config only fits one, as the doctor showed above):

# %%
for label, cfg in (("exercise 1", build_deepspeed_config()), ("exercise 4", zero3_offload(build_deepspeed_config()))):
    cfg = copy.deepcopy(cfg)
    cfg.pop("train_batch_size")  # let DeepSpeed derive it for 8 GPUs
    t = config_effect(cfg, params=PARAMS, gpus_per_node=GPUS).traffic
    print(f"{label}: host -> GPU {units.format_bytes(t.host_to_device_bytes, 'GB'):>9}, "
          f"GPU -> host {units.format_bytes(t.device_to_host_bytes, 'GB'):>9} per GPU per optimizer step")

# %% [markdown]
# So parameter offload is the last resort, not the first.

# %% [markdown]
# ## Summary
#
# - The three answers of the classic exercise: `"stage": 2`, `"overlap_comm": true`,
#   `"offload_optimizer": {"device": "cpu", "pin_memory": true}`.
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
# the host must hold the fp32 state of every GPU of the node; that host RAM runs out first.

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
