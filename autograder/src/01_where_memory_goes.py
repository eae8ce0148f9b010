# %% [markdown]
# # Lesson 01: Where the memory goes

# %% [markdown]
# ## Learning goals
#
# After this lesson you can:
#
# - list what mixed-precision Adam keeps for every parameter, and why it adds up to 16 bytes (the ZeRO paper's
#   accounting, section 3.1);
# - compute the per-GPU model-state memory of DDP, ZeRO-1, ZeRO-2 and ZeRO-3 for any model size and GPU count;
# - say what fraction of the DDP memory each stage keeps, and why that fraction depends on the GPU count;
# - read DeepSpeed's own estimator and explain why it counts more bytes than the paper.
#
# Every number in this notebook is computed by the `zerolab` package (`zerolab.memory`), which the course's
# tests check against the ZeRO paper and against DeepSpeed's estimator functions.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math

from zerolab import memory, units
from zerolab.units import GB, GiB

P13B = units.parse_count("13B")

# %% [markdown]
# ## 1. Model states: what training keeps per parameter
#
# Training with mixed precision and Adam keeps, for every parameter:
#
# - the 16-bit parameters used in forward and backward;
# - the 16-bit gradients produced by backward;
# - the optimizer states, which the paper writes as K bytes per parameter: an fp32 *master copy* of the
#   weights, plus Adam's momentum and variance, also fp32.
#
# These are the **model states**. Activations, temporary buffers and fragmentation come on top (the paper's
# "residual states"); this lesson is about model states only. `memory.estimate` breaks them down:

# %%
ddp = memory.estimate(P13B, stage=0)
for part, nbytes in ddp.breakdown["gpu"].items():
    print(f"{part:18s} {nbytes / P13B:4.0f} bytes/param  {units.format_bytes(nbytes)}")
print(f"{'total':18s} {ddp.gpu_bytes / P13B:4.0f} bytes/param  {units.format_bytes(ddp.gpu_bytes)}")

# %% [markdown]
# ### A common claim: "Adam optimizer states for a 13B model take 52GB"
#
# It is wrong. The 52 GB is one fp32 tensor of 13B values: the `master_weights` line above. Adam's momentum and
# variance are two such tensors (`optimizer_states` above), and with the master copy the optimizer holds K = 12
# bytes per parameter:

# %%
adam_only = ddp.breakdown["gpu"]["optimizer_states"]
with_master = adam_only + ddp.breakdown["gpu"]["master_weights"]
print("Adam momentum + variance:     ", units.format_bytes(adam_only), "=", units.format_bytes(adam_only, "GiB"))
print("+ fp32 master weights (K=12): ", units.format_bytes(with_master), "=", units.format_bytes(with_master, "GiB"))
print("all model states:             ", units.format_bytes(ddp.gpu_bytes))

# %% [markdown]
# ### Exercise 1: the bytes of each model state
#
# Write `model_state_bytes(params)`: the bytes that plain data parallelism (DDP, ZeRO stage 0) keeps **on each
# GPU** for a model of `params` parameters trained in fp16 with Adam, as a dict with the keys `"params"`,
# `"grads"`, `"master_weights"` and `"optimizer_states"` (momentum + variance), each a number of **bytes**.
#
# *Accepted:* a `dict` with exactly those four keys (lower case); each value an `int`, or a `float` equal to it.
# The cell after it checks your function; hidden tests check it on other model sizes.

# %% nbgrader={"grade": false, "grade_id": "ex1_model_state_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def model_state_bytes(params):
    """Bytes per GPU of each model state under DDP with fp16 mixed-precision Adam."""
    ### BEGIN SOLUTION
    return {"params": 2 * params, "grads": 2 * params, "master_weights": 4 * params, "optimizer_states": 8 * params}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex1_model_state_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.checks import close_to, dict_keys, number

answer = dict_keys(model_state_bytes(1000), ["params", "grads", "master_weights", "optimizer_states"],
                   "model_state_bytes(1000)")
for _key in answer:
    number(answer[_key], f"model_state_bytes(1000)[{_key!r}]", "bytes")
assert answer["params"] == answer["grads"], "fp16 parameters and fp16 gradients take the same bytes"
assert answer["optimizer_states"] == 2 * answer["master_weights"], \
    "momentum and variance are two fp32 tensors; the master copy is one"
close_to(sum(answer.values()), memory.estimate(1000, 0).gpu_bytes, "the sum of model_state_bytes(1000)", 1e-9, "bytes",
         hint="the four states together should match the total printed above (per parameter)",
         slips={5 / 16: "counted values (elements), not bytes: a 16-bit value takes 2 bytes, an fp32 one 4"})
### BEGIN HIDDEN TESTS
from zerolab import memory as _memory
from zerolab.checks import plain as _plain

from zerolab.checks import close_to as _close_to, dict_keys as _dict_keys

for _params in (1, 7, 123_456_789, 175_000_000_000):
    _name = f"model_state_bytes({_params})"
    _want = _memory.estimate(_params, 0).breakdown["gpu"]
    _got = _dict_keys(_plain(model_state_bytes(_params), _name), list(_want), _name)
    for _key in _want:
        _close_to(_got[_key], _want[_key], f"{_name}[{_key!r}]", 1e-9, "bytes",
                  hint="count bytes per parameter: 2 for each 16-bit tensor, 4 for each fp32 one",
                  slips={0.5: "counted 16-bit values (elements), not bytes: a 16-bit value takes 2 bytes",
                         0.25: "counted fp32 values (elements), not bytes: an fp32 value takes 4 bytes"})
### END HIDDEN TESTS

# %% [markdown]
# ## 2. ZeRO: partition the states instead of copying them
#
# DDP keeps all of these on every GPU: N GPUs hold N identical copies. ZeRO (Zero Redundancy Optimizer)
# splits them into N partitions, each GPU owning one:
#
# | stage | partitioned over the N GPUs | still copied on every GPU |
# |---|---|---|
# | ZeRO-1 | optimizer states (master weights, momentum, variance) | 16-bit parameters and gradients |
# | ZeRO-2 | + gradients | 16-bit parameters |
# | ZeRO-3 | + parameters | nothing |
#
# Move the sliders: the model size, the number of GPUs and the accounting (the paper's, or DeepSpeed's
# estimator, section 4). Where widgets cannot render you see the static figure for 1, 8 and 64 GPUs.

# %%
from zerolab import widgets

widgets.memory_explorer(params="13B", gpus=8)

# %% [markdown]
# ### A common claim: "ZeRO-2 per GPU = 26GB + 78GB/8 ≈ 36GB" (13B model, 8 GPUs)
#
# Its first term, the fp16 parameters that ZeRO-2 keeps whole, is right. Its second term is not: divide the claimed
# 78 GB by the 13B parameters and you get a number of bytes per parameter that matches no accounting. What ZeRO-2
# partitions is the fp16 gradients plus the K = 12 bytes of optimizer state. The paper's figure and DeepSpeed's
# estimator both give much more:

# %%
paper = memory.estimate(P13B, 2, gpus_per_node=8)
deepspeed_view = memory.estimate(P13B, 2, gpus_per_node=8, accounting="deepspeed")
claimed_partitioned = 78 * GB  # the claim's second term
partitioned = sum(nbytes for part, nbytes in memory.estimate(P13B, 0).breakdown["gpu"].items() if part != "params")
print("fp16 parameters, whole on every GPU:", units.format_bytes(paper.breakdown["gpu"]["params"]))
print("the claim partitions    ", claimed_partitioned / P13B, "bytes per parameter")
print("the paper partitions    ", partitioned / P13B, "bytes per parameter")
print("paper, per GPU:              ", units.format_bytes(paper.gpu_bytes))
print("DeepSpeed estimator, per GPU:", units.format_bytes(deepspeed_view.gpu_bytes, "GiB"))

# %% [markdown]
# ### Exercise 2: per-GPU bytes for any stage
#
# Write `per_gpu_bytes(params, stage, gpus)`: the model-state bytes each GPU holds with ZeRO `stage` (0 = DDP)
# on `gpus` GPUs, with the paper's accounting (fp16 mixed-precision Adam).
#
# *Accepted:* a number of **bytes** (`int` or `float`) within one part in a million of the paper's figure, so
# exact division, `//` and rounding partitions up (as DeepSpeed pads them) all count.
# Hidden tests compare it with `memory.estimate` for many sizes, stages and GPU counts.

# %% nbgrader={"grade": false, "grade_id": "ex2_per_gpu_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def per_gpu_bytes(params, stage, gpus):
    """Model-state bytes per GPU with ZeRO `stage` on `gpus` GPUs (paper accounting, fp16 Adam)."""
    ### BEGIN SOLUTION
    fp16_params, fp16_grads, optimizer = 2 * params, 2 * params, 12 * params
    if stage >= 1:
        optimizer /= gpus
    if stage >= 2:
        fp16_grads /= gpus
    if stage >= 3:
        fp16_params /= gpus
    return fp16_params + fp16_grads + optimizer
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex2_per_gpu_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.checks import close_to, number

number(per_gpu_bytes(1000, 0, 8), "per_gpu_bytes(1000, 0, 8)", "bytes")
assert per_gpu_bytes(1000, 0, 8) == per_gpu_bytes(1000, 0, 1), "DDP copies everything: the GPU count does not matter"
for _stage in (1, 2, 3):
    assert math.isclose(per_gpu_bytes(1000, _stage, 1), per_gpu_bytes(1000, 0, 1)), \
        f"on one GPU there is nothing to partition: stage {_stage} should equal DDP"
    assert per_gpu_bytes(1000, _stage, 8) < per_gpu_bytes(1000, _stage - 1, 8), \
        f"stage {_stage} partitions more than stage {_stage - 1}, so it should need less per GPU"
assert math.isclose(per_gpu_bytes(1000, 3, 8), per_gpu_bytes(1000, 0, 8) / 8), "ZeRO-3 splits everything over the GPUs"
assert not math.isclose(per_gpu_bytes(P13B, 2, 8), 2 * P13B + 78 * GB / 8), \
    "that is the popular 26 GB + 78 GB / 8: ZeRO-2 partitions the fp16 gradients and all K = 12 optimizer bytes"
close_to(per_gpu_bytes(P13B, 2, 8), memory.estimate(P13B, 2, gpus_per_node=8).gpu_bytes, "per_gpu_bytes(13B, 2, 8)",
         1e-6, "bytes", hint="13B, ZeRO-2, 8 GPUs should match the paper figure above: fp16 parameters whole, "
                             "gradients and optimizer split")
### BEGIN HIDDEN TESTS
from zerolab import memory as _memory
from zerolab.checks import close_to as _close_to, plain as _plain

for _params in (7_500_000_000, 1_000_000_001, 350_000_000):
    for _stage in (0, 1, 2, 3):
        for _gpus in (1, 3, 64, 1024):
            _name = f"per_gpu_bytes({_params}, {_stage}, {_gpus})"
            _got = _plain(per_gpu_bytes(_params, _stage, _gpus), _name)
            _want = _memory.estimate(_params, _stage, gpus_per_node=_gpus).gpu_bytes
            _close_to(_got, _want, _name, 1e-6, "bytes",
                      hint=f"which of the 2 + 2 + 12 bytes does stage {_stage} divide by the GPU count?")
### END HIDDEN TESTS

# %% [markdown]
# ## 3. What fraction of DDP does each stage keep?
#
# ### A common claim: "ZeRO-1 keeps 75%, ZeRO-2 40%, ZeRO-3 15% of the memory"
#
# There is no fixed fraction: it depends on the number of GPUs. ZeRO-1 and ZeRO-2 still copy the fp16 parameters
# (and ZeRO-1 the gradients) on every GPU, so their fraction approaches a floor as N grows; ZeRO-3 keeps 1/N.
# The "75%" is ZeRO-1's *saving* in the limit, not what it keeps:

# %%
for gpus in (8, 64, 1024):
    base = memory.estimate(P13B, 0, gpus_per_node=gpus).gpu_bytes
    kept = [memory.estimate(P13B, s, gpus_per_node=gpus).gpu_bytes / base for s in (1, 2, 3)]
    print(f"{gpus:5d} GPUs: ZeRO-1 {kept[0]:6.1%}   ZeRO-2 {kept[1]:6.1%}   ZeRO-3 {kept[2]:6.2%}")

# %% [markdown]
# ### Exercise 3: the fraction kept
#
# Write `fraction_kept(stage, gpus)`: per-GPU model-state memory with ZeRO `stage` divided by DDP's, as a float
# between 0 and 1 (paper accounting; the model size cancels out).
#
# *Accepted:* an `int` or `float` fraction (not a percentage) within one part in a million.
# Hidden tests check it against `memory.estimate`.

# %% nbgrader={"grade": false, "grade_id": "ex3_fraction_kept", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fraction_kept(stage, gpus):
    """Per-GPU model states with ZeRO `stage` on `gpus` GPUs, as a fraction of DDP's."""
    ### BEGIN SOLUTION
    params, grads, optimizer = 2, 2, 12  # bytes per parameter: fp16 parameters, fp16 gradients, K
    kept = (params / gpus if stage >= 3 else params) + (grads / gpus if stage >= 2 else grads) \
        + (optimizer / gpus if stage >= 1 else optimizer)
    return kept / (params + grads + optimizer)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex3_fraction_kept", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}

from zerolab.checks import close_to

close_to(fraction_kept(3, 8), 1 / 8, "fraction_kept(3, 8)", 1e-6, hint="ZeRO-3 on 8 GPUs keeps one eighth",
         slips={100: "wrong unit: that is a percentage; return a fraction between 0 and 1",
                7: "that is the fraction saved, not the fraction kept"})
assert math.isclose(fraction_kept(0, 8), 1.0), "DDP keeps all of its own memory: fraction_kept(0, gpus) is 1"
assert fraction_kept(1, 1024) > fraction_kept(2, 1024) > fraction_kept(3, 1024), "each stage keeps less than the one before"
assert not math.isclose(fraction_kept(1, 8), 0.75), \
    "0.75 is the popular figure, but it is ZeRO-1's saving in the limit of many GPUs, not the fraction it keeps"
assert fraction_kept(1, 64) > 0.25, "ZeRO-1 still copies the fp16 parameters and gradients: it cannot go below a quarter"
### BEGIN HIDDEN TESTS
from zerolab import memory as _memory
from zerolab.checks import close_to as _close_to, plain as _plain

for _stage in (0, 1, 2, 3):
    for _gpus in (1, 2, 5, 16, 4096):
        _name = f"fraction_kept({_stage}, {_gpus})"
        _got = _plain(fraction_kept(_stage, _gpus), _name)
        _want = (_memory.estimate(10**12, _stage, gpus_per_node=_gpus).gpu_bytes
                 / _memory.estimate(10**12, 0, gpus_per_node=_gpus).gpu_bytes)
        _close_to(_got, _want, _name, 1e-6, hint=f"which states does stage {_stage} divide by the GPU count?",
                  slips={100: "wrong unit: that is a percentage; return a fraction between 0 and 1",
                         1 - _want and (1 - _want) / _want: "that is the fraction saved, not the fraction kept"})
### END HIDDEN TESTS

# %% [markdown]
# ## 4. DeepSpeed's estimator counts differently
#
# DeepSpeed ships its own estimators (`estimate_zero2_model_states_mem_needs_all_cold` in
# `deepspeed/runtime/zero/stage_1_and_2.py`, and a ZeRO-3 one in `stage3.py`). They differ from the paper in
# three ways worth knowing in an interview:
#
# - they count an **fp32 copy of the gradients** in the partitioned part (their comment: "18 = 2_grads_16bit +
#   4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit"), so 2 + 18 bytes instead of 2 + 2 + 12;
# - they print "GB" but divide by 2**30: their GB is a GiB;
# - ZeRO-3 adds the largest layer, gathered whole on each GPU, and the host figure counts the load-time peak of
#   every process building the model in fp32.

# %%
for gpus in (1, 8, 64):
    paper_bytes = memory.estimate(P13B, 2, gpus_per_node=gpus).gpu_bytes
    ds_bytes = memory.estimate(P13B, 2, gpus_per_node=gpus, accounting="deepspeed").gpu_bytes
    print(f"ZeRO-2, 13B, {gpus:3d} GPUs: paper {units.format_bytes(paper_bytes)}  "
          f"DeepSpeed {units.format_bytes(ds_bytes, 'GiB')} (= {units.format_bytes(ds_bytes)})")

# %% [markdown]
# ### Exercise 4: DeepSpeed's ZeRO-2 figure
#
# Write `deepspeed_zero2_gib(params, gpus)`: the per-GPU figure DeepSpeed's ZeRO-2 estimator prints (no offload,
# one node with `gpus` GPUs), in **GiB** (2**30 bytes), as a float.
#
# *Accepted:* an `int` or `float` within 1 % of DeepSpeed's figure; keep full precision (rounding to two decimals is
# more than 1 % off for small models). Hidden tests call DeepSpeed's own `estimate_zero2_model_states_mem_needs` and
# compare.

# %% nbgrader={"grade": false, "grade_id": "ex4_deepspeed_zero2_gib", "locked": false, "schema_version": 3, "solution": true, "task": false}
def deepspeed_zero2_gib(params, gpus):
    """Per-GPU model states of ZeRO-2 (no offload) as DeepSpeed's estimator counts them, in GiB."""
    ### BEGIN SOLUTION
    return (2 * params + int(18 * params / gpus)) / GiB
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex4_deepspeed_zero2_gib", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.checks import close_to, number

number(deepspeed_zero2_gib(P13B, 8), "deepspeed_zero2_gib(13B, 8)", "GiB")
assert deepspeed_zero2_gib(P13B, 8) > memory.estimate(P13B, 2, gpus_per_node=8).gpu_bytes / GiB, \
    "DeepSpeed counts more bytes than the paper (the fp32 gradient partition)"
close_to(deepspeed_zero2_gib(P13B, 8), memory.estimate(P13B, 2, gpus_per_node=8, accounting="deepspeed").gpu_bytes / GiB,
         "deepspeed_zero2_gib(13B, 8)", 0.01, "GiB",
         hint="13B on 8 GPUs should match the DeepSpeed figure printed above: 2 bytes whole, 18 partitioned",
         slips={(2 + 14 / 8) / (2 + 18 / 8): "that is the paper's accounting; DeepSpeed partitions 18 bytes, not 14"})
### BEGIN HIDDEN TESTS
import os as _os

_os.environ.setdefault("DS_ACCELERATOR", "cpu")
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as _ds_zero2

from zerolab.checks import close_to as _close_to, plain as _plain

for _params in (125_000_000, 6_700_000_001, 70_000_000_000):
    for _gpus in (1, 4, 16):
        _cpu, _gpu = _ds_zero2(_params, num_gpus_per_node=_gpus, num_nodes=1, cpu_offload=False)
        _name = f"deepspeed_zero2_gib({_params}, {_gpus})"
        _close_to(_plain(deepspeed_zero2_gib(_params, _gpus), _name), _gpu / 2**30, _name, 0.01, "GiB",
                  hint="2 bytes per parameter stay whole, 18 are divided by the GPU count")
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
#
# - Mixed-precision Adam keeps 2 + 2 + K bytes per parameter, K = 12 (fp32 master weights, momentum, variance):
#   16 bytes, of which the 16-bit parameters are only an eighth.
# - ZeRO-1 partitions the optimizer states, ZeRO-2 also the gradients, ZeRO-3 also the parameters. Per-GPU memory
#   falls with the GPU count towards a floor for ZeRO-1 and ZeRO-2 (the copies they keep), towards zero for ZeRO-3.
# - "Fraction kept" is not a constant: compute it for the GPU count you have.
# - DeepSpeed's estimator counts an extra fp32 gradient partition and reports GiB; the paper reports GB.
# - Model states are not everything: activations, communication buckets and fragmentation come on top.
#
# ## Interview questions
#
# **Q: Why does a model in fp16 need far more memory to train than its fp16 weights?**
# A: Training keeps fp16 gradients and the optimizer's states: with Adam an fp32 master copy, momentum and variance.
# The paper's accounting is 2 + 2 + 12 bytes per parameter, eight times the fp16 weights alone.
#
# **Q: Adam's states for a 13B model are 52 GB, right?**
# A: No. 52 GB is one fp32 tensor of 13B values. Momentum and variance are two, and the fp32 master weights a third;
# compute it with `memory.estimate` (section 1).
#
# **Q: What does each ZeRO stage partition, and which stage would you pick when memory is tight but the network is
# slow?**
# A: Stage 1 the optimizer states, stage 2 also the gradients, stage 3 also the parameters. ZeRO-1 and ZeRO-2 move
# the same volume per step as DDP; ZeRO-3 moves about 1.5 times as much (lesson 03), so prefer ZeRO-2 when it fits.
#
# **Q: Does ZeRO-1 cut memory by 75%?**
# A: Only in the limit of many GPUs, and only the model states. On 8 GPUs it keeps much more than a quarter,
# because the fp16 parameters and gradients are still copied on every GPU (section 3).
#
# **Q: Why does DeepSpeed's estimate differ from the paper's?**
# A: It counts an fp32 gradient partition (18 partitioned bytes instead of 14), the largest layer for ZeRO-3, and the
# fp32 load peak on the host; and it prints GiB labelled "GB".

# %% [markdown]
# ## 5. Will it fit? Activations and the whole budget
#
# Model states are what ZeRO partitions. Training also keeps **activations**: what the forward pass stores so
# that the backward pass can compute the gradients. ZeRO does not partition them: every GPU keeps the
# activations of its own micro-batch, and they grow with the sequence length and the micro-batch.
#
# Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", section 4) count
# them for one GPT layer, in 16-bit, as sbh(34 + 5as/h) bytes: s tokens per sequence, b sequences per
# micro-batch, hidden size h, a attention heads. The 5as/h part is the s x s attention scores; a fused
# ("flash") attention kernel keeps none of them. Two ways to keep less, paid for with compute:
#
# - **selective recomputation**: recompute the attention core during backward (drops the s x s part);
# - **full recomputation** (activation checkpointing): keep only each layer's input, and run the layer's
#   forward again during its backward.
#
# `zerolab.activations` counts them term by term for a decoder's shape; `zerolab.models` has published shapes:

# %%
from zerolab import activations, budget, models

llama = models.preset("llama2-7b")
print(f"{llama.name}: {units.format_count(llama.params())} parameters, {llama.layers} layers, hidden {llama.hidden}")
for recompute in activations.RECOMPUTE:
    act = activations.activation_memory(llama, 4096, 1, "bf16", "flash", recompute)
    print(f"recompute {recompute:9s}: {units.format_bytes(act.total_bytes):>9} of activations per sequence of 4096 tokens")

# %% [markdown]
# With flash attention there are no scores left to drop, so selective recomputation saves almost nothing here;
# full recomputation saves most of it. Compare these with the model states of section 2.
#
# ### Measured, not only modelled
#
# These figures are checked against real torch blocks: a hook (`torch.autograd.graph.saved_tensors_hooks`)
# sees every tensor autograd keeps for backward. Here is the tiny GPT block that lesson 06 trains, next to
# zerolab's accounting of that block (`real_block`: the paper's terms plus what torch really keeps on a CPU,
# listed in `zerolab.activations`' docstring):

# %%
import torch

from zerolab.run.blocks import saved_bytes
from zerolab.run.model import Block, ModelSpec

spec = ModelSpec()
block = Block(spec)
x = torch.randn(4, spec.seq_len, spec.width, requires_grad=True)
causal = torch.triu(torch.ones(spec.seq_len, spec.seq_len, dtype=torch.bool), diagonal=1)
measured, _ = saved_bytes(block, block, x, causal)
tiny = models.Decoder("tiny", 1, spec.width, spec.heads, 4 * spec.width, spec.vocab, dropout=False)
counted = activations.activation_memory(tiny, spec.seq_len, 4, "fp32", "torch_mha", accounting="real_block")
print(f"measured: {measured:,} bytes   zerolab real_block: {counted.blocks_bytes:,} bytes")

# %% [markdown]
# ### The whole budget of one GPU
#
# Will it fit is a question about the sum: model states, activations, the gradient buckets that communication
# fills (lesson 03), the CUDA context and the allocator's fragmentation (the last two are stated allowances,
# see `zerolab.budget`). `budget.budget` gives each as a line:

# %%
plan = budget.budget(llama, 2, 4096, 1, gpus_per_node=8, recompute="full")
for line, nbytes in plan.gpu.items():
    print(f"{line:22s} {units.format_bytes(nbytes):>9}")
print(f"{'total per GPU':22s} {units.format_bytes(plan.gpu_bytes):>9}")

# %% [markdown]
# The memory explorer again, now with the whole budget: change the sequence length, the micro-batch and the
# recomputation. Where widgets cannot render you see recompute none, selective and full side by side.

# %%
from zerolab import widgets

widgets.memory_explorer(params="llama2-7b", gpus=8, seq_len=4096, micro_batch=1)

# %% [markdown]
# ### Exercise 5: will it fit?
#
# Write `largest_micro_batch(model, seq_len, gpu_bytes, gpus, stage, recompute)`: the largest micro-batch for
# which the whole per-GPU budget, `budget.budget(model, stage, seq_len, micro_batch, gpus_per_node=gpus,
# recompute=recompute).gpu_bytes`, is at most `gpu_bytes` (no offload, the defaults for everything else).
# Return an `int`, and 0 when not even one sequence fits. The cell after it checks your function against
# `zerolab fit`; hidden tests check other models, GPUs and stages.

# %% nbgrader={"grade": false, "grade_id": "ex5_largest_micro_batch", "locked": false, "schema_version": 3, "solution": true, "task": false}
def largest_micro_batch(model, seq_len, gpu_bytes, gpus, stage, recompute):
    """The largest micro-batch whose whole per-GPU budget fits in gpu_bytes (0 if none does)."""
    ### BEGIN SOLUTION
    micro = 0
    while budget.budget(model, stage, seq_len, micro + 1, gpus_per_node=gpus,
                        recompute=recompute).gpu_bytes <= gpu_bytes:
        micro += 1
    return micro
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex5_largest_micro_batch", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.fit import fit

from zerolab.checks import whole

answer = whole(largest_micro_batch(llama, 4096, 80 * GB, 8, 2, "full"), "largest_micro_batch(...)",
               "a number of sequences")
assert answer >= 1, "not right: ZeRO-2 with full recomputation fits at least one sequence of Llama 2 7B on 80 GB GPUs"
assert budget.budget(llama, 2, 4096, answer, gpus_per_node=8, recompute="full").gpu_bytes <= 80 * GB, \
    "does not fit: the budget of your micro-batch is more than gpu_bytes"
assert budget.budget(llama, 2, 4096, answer + 1, gpus_per_node=8, recompute="full").gpu_bytes > 80 * GB, \
    "not the largest: one more sequence still fits"
assert largest_micro_batch(llama, 4096, 80 * GB, 8, 0, "full") == 0, \
    "does not fit: at stage 0 not even one sequence fits on these GPUs; return 0 then"
_row = next(o for o in fit(llama, 4096, 80 * GB, 8).rows
            if (o.stage, o.offload_optimizer, o.recompute) == (2, "none", "full"))
assert answer == _row.micro_batch, "zerolab fit finds another micro-batch for ZeRO-2 with full recomputation"
### BEGIN HIDDEN TESTS
from zerolab import budget as _budget
from zerolab import models as _models
from zerolab.activations import activation_memory as _activation_memory
from zerolab.checks import whole as _whole
from zerolab.checks import plain as _plain

for _name, _seq, _gpu, _gpus, _stage, _recompute in (
        ("llama3-8b", 8192, 141 * 10**9, 8, 3, "full"), ("gpt3-1.3b", 2048, 24 * 10**9, 4, 2, "none"),
        ("llama2-13b", 4096, 80 * 2**30, 16, 3, "selective"), ("gpt3-6.7b", 1024, 40 * 10**9, 8, 3, "full"),
        ("llama2-70b", 4096, 80 * 10**9, 8, 2, "full")):
    _model = _models.preset(_name)
    _want = _budget.largest_micro_batch(_gpu, _budget.model_states(_model, _stage, _gpus),
                                        _activation_memory(_model, _seq, 1, "bf16", "flash", _recompute),
                                        _budget.bucket_bytes(_stage))
    _got = _whole(_plain(largest_micro_batch(_model, _seq, _gpu, _gpus, _stage, _recompute),
                         "largest_micro_batch(...)"), "largest_micro_batch(...)")
    assert _got == _want, f"largest_micro_batch is wrong for {_name}, sequence {_seq}, stage {_stage}, {_recompute}"
### END HIDDEN TESTS

# %% [markdown]
# The command line answers the same question for every stage, offload and recomputation at once, ranked
# (least traffic first), with the reason each rejected setup does not fit; find the ZeRO-2 row with full
# recomputation and compare its micro-batch with yours. `--emit-config N` prints a ds_config for row N that
# `zerolab check` accepts.

# %%
from zerolab.cli import main as zerolab_cli

status = zerolab_cli(["fit", "--model", "llama2-7b", "--seq-len", "4096", "--gpu-memory", "80GB", "--gpus-per-node", "8"])

# %% [markdown]
# - Activations are per GPU and per micro-batch: ZeRO does not partition them. They grow with the sequence
#   length (and with its square, unless the attention kernel keeps no scores).
# - Full recomputation keeps only each layer's input, for one more forward pass of compute.
# - "Will it fit" is the sum of model states, activations, buckets and allowances; `zerolab fit` adds them up
#   for every setup and finds the largest micro-batch of each.

# %% [markdown]
# ## References
#
# - Rajbhandari, Rasley, Ruwase, He: *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC'20,
#   arXiv:1910.02054 (section 3.1 for 2 + 2 + K bytes, section 5 and Figure 1 for the per-GPU figures, section 7 for
#   communication volume).
# - DeepSpeed 0.19.8's estimators: `estimate_zero2_model_states_mem_needs` in `deepspeed/runtime/zero/stage_1_and_2.py`
#   and `estimate_zero3_model_states_mem_needs` in `deepspeed/runtime/zero/stage3.py`.
