# %% [markdown]
# # Lesson 05: Config doctor
#
# Most ZeRO problems in practice are not in the code but in the `ds_config`: a key DeepSpeed never reads, a setting
# that only works at another stage, a value only the Hugging Face Trainer understands. DeepSpeed rejects some of these
# loudly and lets others through without a word. In this lesson you read configs like a reviewer, fix one, and
# predict what a change does to memory and traffic before you run anything.

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

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import copy
import json

from zerolab.config import import_deepspeed

import_deepspeed()  # DeepSpeed's start-up log stays off the output
from deepspeed.runtime.config import DeepSpeedConfig

from zerolab import units
from zerolab.config import check_config, compare_configs, config_effect, explain_config, read_settings


def show(report):
    print("no errors" if report.valid else "errors: DeepSpeed rejects it, or the run fails at start-up")
    for finding in report.findings:
        print("  ", finding)


# %% [markdown]
# ## How DeepSpeed reads a config
#
# DeepSpeed 0.19.8 validates the **blocks** of a config (`zero_optimization`, its `offload_*` parts, `fp16`, `bf16`)
# with strict pydantic models: an unknown key inside them is an error. The **top level** is different: DeepSpeed
# looks up the keys it knows with `dict.get` and never looks at the rest. A misspelled block name is therefore
# ignored, and everything in it takes its default. Watch both, measured on DeepSpeed itself:

# %%
inner_typo = {"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_com": True}}
top_typo = {"train_batch_size": 8, "zero_optimisation": {"stage": 2, "overlap_comm": True}}
try:
    DeepSpeedConfig(copy.deepcopy(inner_typo))
except Exception as error:
    print("typo inside zero_optimization:", type(error).__name__, str(error).splitlines()[0:3])
parsed = DeepSpeedConfig(copy.deepcopy(top_typo))
print("typo in the block name: accepted; ZeRO stage DeepSpeed will use:", parsed.zero_optimization_stage)

# %% [markdown]
# The second config trains with plain data parallelism and nobody is told. Other things DeepSpeed accepts without a
# word (facts from its 0.19.8 code):
#
# - `offload_param` with stage 1 or 2: the stage 1/2 optimizer never receives it, so parameters stay on the GPU;
# - `device: "nvme"` without `nvme_path`: accepted, then the run fails when it builds the swap folder;
# - `"auto"` inside `zero_optimization`, `fp16` or `bf16`: **dropped**, and the default used (`"auto"` is something
#   only the Hugging Face Trainer and Accelerate fill in before DeepSpeed sees the config). At the top level, for
#   the batch fields, `"auto"` crashes instead.
#
# And things it rejects: fp16 and bf16 both enabled, batch fields that do not multiply out for the world size,
# features DeepSpeed has removed, such as MiCS (`mics_shard_size`): 0.19.8 raises an error that points to a DeepSpeed issue (References). zerolab's doctor, `check_config(config, world_size)`,
# runs DeepSpeed's own validation for the world size you give and adds checks for the silent cases. Each finding has
# a dotted **path**, a **severity** and a message.

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
from zerolab.checks import path_in

path_in(WRONG_PATH_A, fixing_paths(CASES["A"]), "WRONG_PATH_A",
        hint="DeepSpeed validates blocks strictly but reads the top level with dict.get: look at the block names")
### BEGIN HIDDEN TESTS
from zerolab.checks import path_in, plain

path_in(plain(WRONG_PATH_A, "WRONG_PATH_A"), fixing_paths(CASES["A"]), "WRONG_PATH_A")
### END HIDDEN TESTS
print("Right. DeepSpeed accepts A and trains with ZeRO off: it never reads the British spelling zero_optimisation. The doctor's report:")
show(check_config(CASES["A"], world_size=8))

# %% nbgrader={"grade": false, "grade_id": "ex1_path_b", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
WRONG_PATH_B = "zero_optimization.offload_param"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex1_path_b", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.checks import path_in

path_in(WRONG_PATH_B, fixing_paths(CASES["B"]), "WRONG_PATH_B",
        hint="which setting only works at stage 3?")
### BEGIN HIDDEN TESTS
from zerolab.checks import path_in, plain

path_in(plain(WRONG_PATH_B, "WRONG_PATH_B"), fixing_paths(CASES["B"]), "WRONG_PATH_B")
### END HIDDEN TESTS
print("Right. DeepSpeed accepts B and keeps the parameters on the GPU: offload_param is valid only with stage 3, and nothing enforces it. The doctor's report:")
show(check_config(CASES["B"], world_size=8))

# %% nbgrader={"grade": false, "grade_id": "ex1_path_c", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
WRONG_PATH_C = "zero_optimization.offload_optimizer.nvme_path"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_ex1_path_c", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from zerolab.checks import path_in

path_in(WRONG_PATH_C, fixing_paths(CASES["C"]), "WRONG_PATH_C",
        hint="what does an NVMe offload need to know that this config does not say?")
### BEGIN HIDDEN TESTS
from zerolab.checks import path_in, plain

path_in(plain(WRONG_PATH_C, "WRONG_PATH_C"), fixing_paths(CASES["C"]), "WRONG_PATH_C")
### END HIDDEN TESTS
print("Right. DeepSpeed's config check accepts C, and the run then fails at start-up: an NVMe offload needs nvme_path, the folder for its swap files. The doctor's report:")
show(check_config(CASES["C"], world_size=8))

# %% [markdown]
# The doctor's notes (severity `note`) say what DeepSpeed picks for fields you left out, e.g. `overlap_comm`
# (stage-dependent) and `pin_memory` (true in 0.19.8).

# %% [markdown]
# ## More traps, in the doctor's words
#
# A gallery of mistakes seen in real configs, checked for 8 GPUs:

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
    print(f"--- {name}")
    show(check_config(config, world_size=8))

# %% [markdown]
# Read the severity: an **error** means DeepSpeed (or the run) will fail; a **warning** means it will run, but not as
# written. Silently dropped `"auto"` values are the most treacherous: `fp16.enabled: "auto"` outside the Trainer means
# fp32 training. What that does to memory, for a 7B model on 8 GPUs (paper accounting):

# %%
meant = copy.deepcopy(GALLERY["auto precision outside the Trainer"])
meant["fp16"]["enabled"] = True
for label, config in (("fp16 enabled: true", meant), ('fp16 enabled: "auto"', GALLERY["auto precision outside the Trainer"])):
    e = config_effect(config, params="7B", gpus_per_node=8, accounting="paper").memory
    print(f"{label:22} precision {read_settings(config, world_size=8).precision:5}  GPU {units.format_bytes(e.gpu_bytes, 'GB')} per GPU")

# %% [markdown]
# `explain_config` says what every field you set means and what DeepSpeed uses when you leave it out:

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
# again, repeat.

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
print("Visible checks passed.")
### BEGIN HIDDEN TESTS
import copy
from deepspeed.runtime.config import DeepSpeedConfig
from zerolab.checks import plain
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
# What had to change, and why:
#
# - `train_batch_size: "auto"`: only the Hugging Face Trainer or Accelerate replace it. Write the number (micro
#   batch x accumulation steps x 8 GPUs), or leave the field out and let DeepSpeed derive it.
# - fp16 and bf16 both on: DeepSpeed refuses. A100s run bf16, so drop the fp16 block.
# - `mics_shard_size`: MiCS was removed from DeepSpeed; the key is now an error.
# - `stage3_prefetch_bucket_size: "auto"`: dropped silently outside the Trainer; remove it or write a number.
# - NVMe without `nvme_path`: add the folder.

# %% [markdown]
# ## Predicting the effect of a change
#
# `config_effect(config, params, gpus_per_node)` reads the settings DeepSpeed will really use (its defaults, and
# ignoring what it ignores) and feeds them to `zerolab.memory` and `zerolab.comm`. `compare_configs(a, b, ...)` does it
# for two configs and lists the fields that differ. Here, what switching ZeRO-2 to ZeRO-3 does for a 7B model on 8
# GPUs (the batch fields give 2 accumulation steps on 8 GPUs, and traffic is counted per optimizer step):

# %%
zero2 = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
         "zero_optimization": {"stage": 2}}
zero3 = copy.deepcopy(zero2)
zero3["zero_optimization"]["stage"] = 3
diff = compare_configs(zero2, zero3, params="7B", gpus_per_node=8)
print("changed:", diff.changed)
for label, effect in (("ZeRO-2", diff.effect_a), ("ZeRO-3", diff.effect_b)):
    print(f"{label}: GPU {units.format_bytes(effect.memory.gpu_bytes, 'GiB')} per GPU, "
          f"{effect.traffic.volume_in_params:.0f} Ψ per step, {units.format_bytes(effect.traffic.wire_bytes, 'GB')} sent per GPU")

# %% [markdown]
# ## Exercise 3: how much does it save? (2 points)
#
# A colleague wants to fit a 7B model on 8 GPUs and has two candidate configs. Using the **paper's accounting**
# (2 + 2 + 12 bytes per parameter, model states only), how many **bytes per GPU** does config `Q` need *less* than
# config `P`? Read the configs carefully. Set `SAVED_BYTES` to a number of **bytes**.
#
# *Accepted:* an `int` or `float` of bytes (not GB or GiB), positive, within 1 % of zerolab's figure.

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
from zerolab.checks import close_to

effect_p = config_effect(P_CONFIG, params="7B", gpus_per_node=8, accounting="paper").memory.gpu_bytes
effect_q = config_effect(Q_CONFIG, params="7B", gpus_per_node=8, accounting="paper").memory.gpu_bytes
close_to(SAVED_BYTES, effect_p - effect_q, "SAVED_BYTES", 0.01, "bytes",
         hint="does P's offload_param do anything at stage 2? Then compare what ZeRO-3 partitions that ZeRO-2 does not",
         slips={-1: "wrong sign: Q needs less than P, so the saving is positive (P minus Q)"})
print("Visible checks passed.")
### BEGIN HIDDEN TESTS
from zerolab.checks import plain
from zerolab.config import config_effect

from zerolab.checks import close_to

answer = plain(SAVED_BYTES, "SAVED_BYTES")
reference = (config_effect(P_CONFIG, params="7B", gpus_per_node=8, accounting="paper").memory.gpu_bytes
             - config_effect(Q_CONFIG, params="7B", gpus_per_node=8, accounting="paper").memory.gpu_bytes)
_ = close_to(answer, reference, "SAVED_BYTES", 0.01, "bytes")
### END HIDDEN TESTS

# %% [markdown]
# P's `offload_param` does nothing at stage 2, so P is plain ZeRO-2: the bf16 parameters stay whole on every GPU,
# the gradients and optimizer states are divided over the GPUs. Q, ZeRO-3, divides the parameters too. The saving is
# the parameters' bytes minus the share each GPU still holds. Both accountings side by side (DeepSpeed's adds fp32
# gradients and, for ZeRO-3, the largest layer gathered in full):

# %%
for accounting in ("paper", "deepspeed"):
    diff = compare_configs(P_CONFIG, Q_CONFIG, params="7B", gpus_per_node=8, accounting=accounting)
    saved = diff.effect_a.memory.gpu_bytes - diff.effect_b.memory.gpu_bytes
    print(f"{accounting:9}: P {units.format_bytes(diff.effect_a.memory.gpu_bytes, 'GB')}, "
          f"Q {units.format_bytes(diff.effect_b.memory.gpu_bytes, 'GB')}, saved {units.format_bytes(saved, 'GB')} per GPU")

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
# *Accepted:* an `int` or `float`, a multiple of Ψ (not bytes or GB), exact to one part in a million.

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
from zerolab.checks import close_to, number

volume_r = config_effect(R_CONFIG, params="7B", gpus_per_node=8).traffic.volume_in_params
volume_s = config_effect(S_CONFIG, params="7B", gpus_per_node=8).traffic.volume_in_params
assert number(EXTRA_PSI, "EXTRA_PSI", "Ψ") != 0, "ZeRO-1 and ZeRO-2 move the same volume only without gradient accumulation"
close_to(EXTRA_PSI, volume_s - volume_r, "EXTRA_PSI", 1e-6,
         hint="when does each stage reduce gradients, once per optimizer step or once per micro-step?",
         slips={-1: "wrong sign: S moves more than R; give S minus R",
                2 * 7e9: "wrong unit: that is bytes (2 per bf16 value); give a multiple of Ψ",
                7e9: "wrong unit: that is a number of values; divide by Ψ",
                2 * 7e9 / 1e9: "wrong unit: that is GB; give a multiple of Ψ"})
print("Visible checks passed.")
### BEGIN HIDDEN TESTS
from zerolab.checks import plain
from zerolab.config import config_effect

from zerolab.checks import close_to

reference = (config_effect(S_CONFIG, params="13B", gpus_per_node=16).traffic.volume_in_params
             - config_effect(R_CONFIG, params="13B", gpus_per_node=16).traffic.volume_in_params)
_ = close_to(plain(EXTRA_PSI, "EXTRA_PSI"), reference, "EXTRA_PSI", 1e-6)
### END HIDDEN TESTS

# %% [markdown]
# ZeRO-1 keeps whole gradients on every GPU, sums the micro-steps locally and reduce-scatters once per optimizer step.
# ZeRO-2 keeps only its gradient partition, so it reduce-scatters on every micro-step. Both all-gather the updated
# parameters once. With long accumulation ZeRO-1 can be the better choice when the network is slow and the memory
# allows it:

# %%
for label, config in (("R (ZeRO-1)", R_CONFIG), ("S (ZeRO-2)", S_CONFIG)):
    effect = config_effect(config, params="7B", gpus_per_node=8)
    print(f"{label}: {effect.traffic.volume_in_params:.0f} Ψ per optimizer step, "
          f"{units.format_bytes(effect.traffic.wire_bytes, 'GB')} sent per GPU, GPU memory {units.format_bytes(effect.memory.gpu_bytes, 'GiB')}")

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
# **A config from a Hugging Face example fails with a TypeError about `str` and `//`. Why?**
# It contains `"auto"` values, which only the Trainer and Accelerate fill in. Used with DeepSpeed directly the batch
# fields must be numbers; inside blocks `"auto"` is dropped silently and the default used.
#
# **Does ZeRO-2 communicate more than ZeRO-1?**
# Without gradient accumulation they move the same volume per step (the paper's 2Ψ). With accumulation ZeRO-2 reduces
# gradients on every micro-step and ZeRO-1 only at the boundary, so per optimizer step ZeRO-2 moves more.

# %% [markdown]
# ## References
#
# - DeepSpeed 0.19.8 source: `deepspeed/runtime/zero/config.py` (stage-dependent `overlap_comm`),
#   `deepspeed/runtime/zero/offload_config.py` (`pin_memory`), `deepspeed/runtime/config.py` (batch arithmetic).
# - DeepSpeed issue #8489: features removed from DeepSpeed, MiCS among them.
# - zerolab's doctor: `zerolab/config/checks.py` (the checks DeepSpeed does not make).
