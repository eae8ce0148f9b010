# %% [markdown]
# # Lesson 03: Communication and overlap_comm

# %% [markdown] lang="zh" en="8e6200353d66"
# # 第 03 课：通信与 overlap_comm

# %% [markdown]
# ## Learning goals
#
# After this lesson you can:
#
# - compute the communication volume per step of DDP and ZeRO-1/2/3, with and without gradient accumulation;
# - turn a volume into bytes each GPU sends with ring collectives, and into seconds on a link;
# - explain buckets (`reduce_bucket_size`, `allgather_bucket_size`, `stage3_prefetch_bucket_size`) and count calls;
# - say what `overlap_comm` hides, what it cannot hide, and what it costs in memory.
#
# All numbers come from `zerolab.engine.comm`, which follows the ZeRO paper (section 7) and DeepSpeed 0.19.8's engine.

# %% [markdown] lang="zh" en="1495e59e04d1"
# ## 学习目标
#
# 学完本课，你将能够：
#
# - 计算 DDP 和 ZeRO-1/2/3 每步的通信量，分别考虑使用和不使用梯度累积的情况；
# - 把通信量换算成环形（ring）集合通信下每张 GPU 发送的字节数，再换算成某条链路上的秒数；
# - 讲清楚桶（`reduce_bucket_size`、`allgather_bucket_size`、`stage3_prefetch_bucket_size`），并数出调用次数；
# - 说明 `overlap_comm` 能隐藏什么、隐藏不了什么，以及它要多占多少显存。
#
# 所有数字都来自 `zerolab.engine.comm`，它遵循 ZeRO 论文（第 7 节）和 DeepSpeed 0.19.8 引擎的实现。

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math

from zerolab.engine import comm, units
from zerolab.base.i18n import tr
from zerolab.engine.units import GB

P13B = units.parse_count("13B")

# %% [markdown]
# ## 1. Volume per step, in units of the parameter count Ψ
#
# The paper counts elements moved per step. An all-reduce is a reduce-scatter plus an all-gather, each moving Ψ.
#
# - DDP all-reduces the gradients: 2Ψ.
# - ZeRO-1 and ZeRO-2 reduce-scatter the gradients to their owners (Ψ) and all-gather the updated parameters (Ψ):
#   also 2Ψ, "exactly the same as the baseline DP".
# - ZeRO-3 gathers the parameters for forward and again for backward, and reduce-scatters the gradients: 3Ψ.
#
# Gradient accumulation changes this differently per stage. DDP and ZeRO-1 reduce only at the accumulation
# boundary (DeepSpeed's stages 0 and 1 do so by themselves; PyTorch's `DistributedDataParallel` all-reduces in every
# backward unless the micro-steps before the boundary run inside its `no_sync()`). ZeRO-2 and ZeRO-3 reduce on
# **every micro-step** (DeepSpeed's engine: "ZeRO stage >= 2 communicates during non gradient accumulation
# boundaries as well"), and ZeRO-3 also gathers parameters on every micro-step. <!-- claim: stage0-1-reduce-at-the-boundary-torch-ddp-needs-no-sync --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero3-communicates-every-micro-step -->

# %% [markdown] lang="zh" en="3a64f1296306"
# ## 1. 每步通信量：以参数量 Ψ 为单位
#
# 论文统计的是每步搬运的元素个数。一次 all-reduce 相当于一次 reduce-scatter 加一次 all-gather，各搬运 Ψ。
#
# - DDP 对梯度做 all-reduce：2Ψ。
# - ZeRO-1 和 ZeRO-2 把梯度 reduce-scatter 到各自的持有者（Ψ），再 all-gather 更新后的参数（Ψ）：同样是 2Ψ，用论文的原话说，与基线数据并行“完全相同”（“exactly the same as the baseline DP”）。
# - ZeRO-3 在前向时 gather 一遍参数，反向时再 gather 一遍，并对梯度做 reduce-scatter：3Ψ。
#
# 梯度累积对各个 stage 的影响各不相同。DDP 和 ZeRO-1 只在累积边界处归约梯度（DeepSpeed 的 stage 0 和 stage 1 自己就是这样做的；PyTorch 的 `DistributedDataParallel` 则在每次反向传播中都做 all-reduce，除非把边界之前的那些微步放在它的 `no_sync()` 里运行）。ZeRO-2 和 ZeRO-3 在**每个微步（micro-step）** 都要归约（DeepSpeed 引擎源码中的注释：“ZeRO stage >= 2 communicates during non gradient accumulation boundaries as well”），ZeRO-3 还会在每个微步都 gather 参数。 <!-- claim: stage0-1-reduce-at-the-boundary-torch-ddp-needs-no-sync --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero3-communicates-every-micro-step -->

# %%
for grad_accum in (1, 4):
    row = [comm.traffic(P13B, stage, 8, grad_accum=grad_accum).volume_in_params for stage in range(4)]
    print(f"grad_accum={grad_accum}: " + "   ".join(f"stage {s}: {v:g} Ψ" for s, v in enumerate(row)))

# %% [markdown]
# ### Exercise 1: volume in units of Ψ
#
# Write `volume_in_params(stage, grad_accum)`: the elements moved per optimizer step divided by the parameter
# count, for ZeRO `stage` (0 = DDP) and `grad_accum` micro-steps per optimizer step. Hidden tests compare it with
# `comm.traffic(...).volume_in_params`, so `comm.traffic` is off limits in your cell (the test gives 0 if it is used): work it out yourself.

# %% [markdown] lang="zh" en="75e6148dcd5b"
# ### 练习 1：以 Ψ 为单位的通信量
#
# 编写 `volume_in_params(stage, grad_accum)`：返回每个优化器步搬运的元素数除以参数量，其中 `stage` 是 ZeRO 的 stage（0 表示 DDP），`grad_accum` 是每个优化器步包含的微步数。隐藏测试会把它与 `comm.traffic(...).volume_in_params` 比较，所以你的单元格里不能使用 `comm.traffic`（用了，测试给 0 分）：请自己推算。

# %% nbgrader={"grade": false, "grade_id": "ex1_volume_in_params", "locked": false, "schema_version": 3, "solution": true, "task": false}
def volume_in_params(stage, grad_accum):
    """Communication volume per optimizer step, as a multiple of the parameter count."""
    ### BEGIN SOLUTION
    if stage in (0, 1):
        return 2
    if stage == 2:
        return grad_accum + 1
    return 3 * grad_accum
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex1_volume_in_params", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("volume_in_params", ["zerolab.engine.comm.traffic", "zerolab.engine.deepspeed_traffic"], exercise="exercise 1",
           instead="count the collectives of each stage yourself")
assert volume_in_params(0, 1) == volume_in_params(1, 1) == volume_in_params(2, 1), \
    "without accumulation DDP, ZeRO-1 and ZeRO-2 move the same volume"
assert volume_in_params(3, 1) == 1.5 * volume_in_params(0, 1), "ZeRO-3 moves 1.5x DDP's volume"
assert volume_in_params(1, 8) == volume_in_params(1, 1), "ZeRO-1 reduces only at the accumulation boundary"
assert volume_in_params(2, 8) > volume_in_params(2, 1), "ZeRO-2 reduces gradients on every micro-step"
### BEGIN HIDDEN TESTS
from zerolab.engine import comm as _comm
from zerolab.lesson.checks import close_to as _close_to, plain as _plain

for _stage in (0, 1, 2, 3):
    for _gas in (1, 2, 7, 32):
        _name = f"volume_in_params({_stage}, {_gas})"
        _want = _comm.traffic(10**9, _stage, 8, grad_accum=_gas).volume_in_params
        _close_to(_plain(volume_in_params(_stage, _gas), _name), _want, _name, 1e-9,
                  hint=f"which collectives does stage {_stage} run, and how many of them once per micro-step?",
                  slips={2: "counts each collective twice: an all-reduce is one reduce-scatter plus one all-gather, "
                            "Ψ each, not 2Ψ each"})
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Bytes on the wire and seconds
#
# With ring collectives (the model behind the "bus bandwidth" factors in NCCL's performance notes), a
# reduce-scatter or an all-gather of n elements makes each of the N GPUs send (N-1)/N · n elements. Multiply by the element size (2 bytes in fp16/bf16) for bytes, and
# divide by the link bandwidth for seconds.

# %% [markdown] lang="zh" en="f37ec0c45eb4"
# ## 2. 线上字节数与耗时
#
# 采用环形集合通信时（NCCL 性能说明中“总线带宽”（bus bandwidth）系数背后的模型），对 n 个元素做一次 reduce-scatter 或 all-gather，N 张 GPU 中的每一张都要发送 (N-1)/N · n 个元素。乘以元素大小（fp16/bf16 为 2 字节）得到字节数，再除以链路带宽得到秒数。

# %%
for stage in range(4):
    t = comm.traffic(P13B, stage, 8)
    print(tr(f"stage {stage}: {units.format_bytes(t.wire_bytes)} sent per GPU per step, "
             f"{comm.transfer_time(t.wire_bytes, 'ib-hdr'):.2f} s at InfiniBand HDR, "
             f"{comm.transfer_time(t.wire_bytes, 'nvlink3'):.3f} s at NVLink 3"))

# %% [markdown]
# ### Exercise 2: bytes each GPU sends
#
# Write `wire_bytes(params, stage, gpus, grad_accum)`: the bytes one GPU sends per optimizer step with ring
# collectives, fp16 training. Hidden tests compare with `comm.traffic(...).wire_bytes`, so `comm.traffic` is off limits in your cell (the test gives 0 if it is used): work it out yourself.
# Rounding to whole elements or bytes (`//`) counts too.
# You may call your `volume_in_params`; if it is wrong, this exercise is graded with the course's in its place, so a
# mistake costs points once.

# %% [markdown] lang="zh" en="ae16383aa8f8"
# ### 练习 2：每张 GPU 发送的字节数
#
# 编写 `wire_bytes(params, stage, gpus, grad_accum)`：在 fp16 训练、环形集合通信的条件下，一张 GPU 每个优化器步发送的字节数。隐藏测试会把它与 `comm.traffic(...).wire_bytes` 比较，所以你的单元格里不能使用 `comm.traffic`（用了，测试给 0 分）：请自己推算。取整到整数个元素或整字节（`//`）也算对。你可以调用自己的 `volume_in_params`；如果它有错，本练习会换用课程自带的版本来评分，所以同一个错误只扣一次分。

# %% nbgrader={"grade": false, "grade_id": "ex2_wire_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def wire_bytes(params, stage, gpus, grad_accum):
    """Bytes one GPU sends per optimizer step (ring collectives, 2-byte elements)."""
    ### BEGIN SOLUTION
    volume = {0: 2, 1: 2, 2: grad_accum + 1, 3: 3 * grad_accum}[stage]  # multiples of the parameter count
    return volume * params * (gpus - 1) / gpus * 2
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex2_wire_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks import close_to
from zerolab.lesson.checks_cascade import with_reference
from zerolab.lesson.checks_source import off_limits

off_limits("wire_bytes", ["zerolab.engine.comm.traffic", "zerolab.engine.deepspeed_traffic"], exercise="exercise 2",
           earlier=["volume_in_params"], instead="multiply the volume by what a ring sends per element yourself")
_earlier = with_reference("volume_in_params", lambda stage, grad_accum: comm.traffic(
    10**9, stage, 8, grad_accum=grad_accum).volume_in_params, "exercise 1", "exercise 2", abs_tol=0)
close_to(wire_bytes(P13B, 2, 8, 1), comm.traffic(P13B, 2, 8).wire_bytes, "wire_bytes(13B, 2, 8, 1)", 1e-7, "bytes",
         bits=True, hint="13B, ZeRO-2, 8 GPUs should match the figure printed above",
         slips={8 / 7: "leaves out the ring's (N-1)/N: each GPU sends N-1 of the N chunks of every collective",
                0.5: "counted elements, not bytes: an fp16 value takes 2 bytes",
                2: "counts the collectives twice: an all-reduce is one reduce-scatter plus one all-gather, and the "
                   "volume in Ψ already holds both"})
assert wire_bytes(1000, 2, 1, 1) == 0, "one GPU has nobody to talk to"
assert wire_bytes(1000, 3, 8, 1) > wire_bytes(1000, 2, 8, 1), "ZeRO-3 sends more than ZeRO-2"
_earlier.note()
### BEGIN HIDDEN TESTS
from zerolab.engine import comm as _comm
from zerolab.lesson.checks import close_to as _close_to, plain as _plain

for _params in (125_000_001, 70_000_000_000):
    for _stage in (0, 1, 2, 3):
        for _gpus, _gas in ((16, 4), (1000, 3), (2, 1)):
            _name = f"wire_bytes({_params}, {_stage}, {_gpus}, {_gas})"
            _want = _comm.traffic(_params, _stage, _gpus, grad_accum=_gas).wire_bytes
            _close_to(_plain(wire_bytes(_params, _stage, _gpus, _gas), _name), _want, _name, 1e-7, "bytes",
                      bits=True, hint="the volume in Ψ, times what a ring sends of each element, times its bytes",
                      slips={_gpus / (_gpus - 1): "leaves out the ring's (N-1)/N: each GPU sends N-1 of the N "
                                                  "chunks of every collective",
                             0.5: "counted elements, not bytes: an fp16 value takes 2 bytes",
                             2: "counts the collectives twice: an all-reduce is one reduce-scatter plus one "
                                "all-gather, and the volume in Ψ already holds both"})
_earlier.note()
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Buckets: how many calls
#
# DeepSpeed does not reduce all gradients in one call. As backward produces gradients it fills a bucket of
# `reduce_bucket_size` elements and reduces it, then the next one. After the optimizer step ZeRO-1/2 gather the
# updated parameters with one `all_gather_into_tensor` per parameter group: `allgather_bucket_size` only matters on
# the legacy path for a torch without that call (`all_gather_dp_groups` in DeepSpeed's `runtime/utils.py`). ZeRO-3
# gathers parameters per submodule, coalescing prefetches up to `stage3_prefetch_bucket_size`. Bucket sizes are in
# **elements**, not bytes.
#
# ### A common claim: "ZeRO-2 does one reduce-scatter per step"
#
# It reduces once per bucket, and on every micro-step: <!-- claim: zero2-reduces-buckets-during-backward --> <!-- claim: zero12-one-all-gather-per-param-group --> <!-- claim: zero3-module-hooks-fetch-and-release --> <!-- claim: zero3-prefetches-along-the-recorded-trace --> <!-- claim: bucket-sizes-count-elements --> <!-- claim: zero2-reduces-gradients-every-micro-step -->

# %% [markdown] lang="zh" en="bb77c5779363"
# ## 3. 分桶：要调用多少次
#
# DeepSpeed 不会一次调用就归约全部梯度。反向传播边算边产生梯度，DeepSpeed 把它们填进一个容量为 `reduce_bucket_size` 个元素的桶，填满就归约，再填下一个。优化器步之后，ZeRO-1/2 对每个参数组调用一次 `all_gather_into_tensor`，收集更新后的参数：只有当 torch 没有这个调用、走旧代码路径时，`allgather_bucket_size` 才起作用（见 DeepSpeed `runtime/utils.py` 中的 `all_gather_dp_groups`）。ZeRO-3 按子模块 gather 参数，并把预取合并成不超过 `stage3_prefetch_bucket_size` 的批次。桶大小的单位是**元素个数**，不是字节。
#
# ### 常见说法：“ZeRO-2 每步只做一次 reduce-scatter”
#
# 实际上它每个桶归约一次，而且每个微步都要做： <!-- claim: zero2-reduces-buckets-during-backward --> <!-- claim: zero12-one-all-gather-per-param-group --> <!-- claim: zero3-module-hooks-fetch-and-release --> <!-- claim: zero3-prefetches-along-the-recorded-trace --> <!-- claim: bucket-sizes-count-elements --> <!-- claim: zero2-reduces-gradients-every-micro-step -->

# %%
for grad_accum in (1, 4):
    t = comm.traffic(P13B, 2, 8, grad_accum=grad_accum, reduce_bucket_size=comm.DEFAULT_BUCKET)
    for c in t.collectives:
        print(tr(f"grad_accum={grad_accum}: {c.op:14s} ({tr(c.purpose)}): {c.buckets} buckets x {c.times} = "
                 f"{c.buckets * c.times} calls per optimizer step"))

# %% [markdown]
# zerolab, like the paper, counts each bucket's reduction as a reduce-scatter. DeepSpeed 0.19.8 does not call
# `reduce_scatter` literally: with its default `use_multi_rank_bucket_allreduce: true` it **all-reduces** each bucket
# (`average_tensor` in `stage_1_and_2.py`), and with `false` it `reduce`s each slice to the rank that owns it. An
# all-reduce is a reduce-scatter plus an all-gather (section 1), so on the wire DeepSpeed's default moves more for the
# gradients than the paper's figure. The bucket count is the same either way. `comm.traffic(...,
# bucket_allreduce=True)` counts what DeepSpeed's default does (the course's tests check it against the collectives
# a real two-rank run calls): <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: zero12-owner-reduce-without-bucket-allreduce -->

# %% [markdown] lang="zh" en="4f5ca82e21ce"
# zerolab 和论文一样，把每个桶的归约记作一次 reduce-scatter。DeepSpeed 0.19.8 并不是真的调用 `reduce_scatter`：在默认的 `use_multi_rank_bucket_allreduce: true` 下，它对每个桶做 **all-reduce**（`stage_1_and_2.py` 中的 `average_tensor`）；设为 `false` 时，它把每个切片 `reduce` 到持有该分片的 rank 上。一次 all-reduce 相当于一次 reduce-scatter 加一次 all-gather（见第 1 节），所以就线上传输而言，DeepSpeed 默认设置下梯度部分的通信量比论文的数字多。两种方式下桶的个数都一样。`comm.traffic(..., bucket_allreduce=True)` 统计的是 DeepSpeed 默认设置的实际做法（课程的测试会拿它与一次真实的两 rank 运行所调用的集合通信核对）： <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: zero12-owner-reduce-without-bucket-allreduce -->

# %%
for stage in (1, 2):
    for grad_accum in (1, 4):
        paper_volume = comm.traffic(P13B, stage, 8, grad_accum=grad_accum).volume_in_params
        deepspeed_volume = comm.traffic(P13B, stage, 8, grad_accum=grad_accum, bucket_allreduce=True).volume_in_params
        print(tr(f"ZeRO-{stage}, grad_accum={grad_accum}: paper {paper_volume:g} Ψ, DeepSpeed 0.19.8 default "
                 f"{deepspeed_volume:g} Ψ per optimizer step"))

# %% [markdown]
# ### A common claim: "ZeRO-3 needs 80 communications per step for a 40-layer model"
#
# The paper counts volume, not calls: 3Ψ per step. "Two gathers per layer" leaves out the gradient
# reduce-scatters, and the real call count depends on the implementation: DeepSpeed gathers per submodule,
# coalesces prefetches into `stage3_prefetch_bucket_size` buckets, keeps small parameters resident
# (`stage3_param_persistence_threshold`) and repeats all of it on every micro-step. zerolab's count assumes full
# prefetch buckets, so it is a rough figure, not a bound either way: the prefetch loop adds whole parameters to a
# fetch (`partitioned_param_coordinator.py`), and one parameter larger than the bucket is still one call: <!-- claim: zero3-module-hooks-fetch-and-release --> <!-- claim: zero3-prefetches-along-the-recorded-trace --> <!-- claim: stage3-small-parameters-stay-whole --> <!-- claim: zero3-communicates-every-micro-step --> <!-- claim: zero3-prefetch-adds-whole-parameters -->

# %% [markdown] lang="zh" en="684c6cee4ef9"
# ### 常见说法：“40 层的模型，ZeRO-3 每步要通信 80 次”
#
# 论文统计的是通信量，不是调用次数：每步 3Ψ。“每层 gather 两次”漏掉了梯度的 reduce-scatter，而且实际调用次数取决于实现：DeepSpeed 按子模块 gather 参数，把预取合并进 `stage3_prefetch_bucket_size` 大小的桶，让小参数常驻显存（`stage3_param_persistence_threshold`），并且在每个微步都把这些重复一遍。zerolab 的计数假设预取桶都是满的，所以它只是一个粗略的数字，既不是上界也不是下界：预取循环以整个参数为单位加入一次获取（`partitioned_param_coordinator.py`），而一个比桶还大的参数也仍然只是一次调用： <!-- claim: zero3-module-hooks-fetch-and-release --> <!-- claim: zero3-prefetches-along-the-recorded-trace --> <!-- claim: stage3-small-parameters-stay-whole --> <!-- claim: zero3-communicates-every-micro-step --> <!-- claim: zero3-prefetch-adds-whole-parameters -->

# %%
t3 = comm.traffic(P13B, 3, 8)
print(tr(f"ZeRO-3, 13B: volume {t3.volume_in_params:g} Ψ (paper's accounting), about {t3.calls} calls per step"))
for c in t3.collectives:
    print(tr(f"  {c.op:14s} {tr(c.purpose):28s} {c.buckets} calls x {c.times}"))

# %% [markdown]
# ### Exercise 3: gradient reduction calls
#
# Write `reduce_calls(params, grad_accum, reduce_bucket_size)`: how many gradient reduction calls ZeRO-2 makes per
# optimizer step, as an `int` (a partly filled last bucket is still a call), for gradients that fill the buckets
# exactly. Real layers do not: DeepSpeed flushes a bucket when the next parameter would overflow it
# (`reduce_independent_p_g_buckets_and_remove_grads` in `stage_1_and_2.py`), so this count is a lower bound for a
# real model. Hidden tests compare with `comm.traffic`, so `comm.traffic` is off limits in your cell (the test gives 0 if it is used): work it out yourself. <!-- claim: zero2-reduces-buckets-during-backward -->

# %% [markdown] lang="zh" en="b88b6e18a4c1"
# ### 练习 3：梯度归约的调用次数
#
# 编写 `reduce_calls(params, grad_accum, reduce_bucket_size)`：假设梯度恰好把桶填满，求 ZeRO-2 每个优化器步调用多少次梯度归约，返回 `int`（最后一个没填满的桶也算一次调用）。真实的层做不到恰好填满：当下一个参数放进去会让桶溢出时，DeepSpeed 就先把当前的桶归约掉（`stage_1_and_2.py` 中的 `reduce_independent_p_g_buckets_and_remove_grads`），所以对真实模型而言，这个次数是一个下界。隐藏测试会把它与 `comm.traffic` 比较，所以你的单元格里不能使用 `comm.traffic`（用了，测试给 0 分）：请自己推算。 <!-- claim: zero2-reduces-buckets-during-backward -->

# %% nbgrader={"grade": false, "grade_id": "ex3_reduce_calls", "locked": false, "schema_version": 3, "solution": true, "task": false}
def reduce_calls(params, grad_accum, reduce_bucket_size):
    """Gradient reduction calls per optimizer step with ZeRO-2."""
    ### BEGIN SOLUTION
    return math.ceil(params / reduce_bucket_size) * grad_accum
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex3_reduce_calls", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from zerolab.lesson.checks_source import off_limits

off_limits("reduce_calls", ["zerolab.engine.comm.traffic", "zerolab.engine.deepspeed_traffic"], exercise="exercise 3",
           instead="count the buckets per micro-step yourself")
assert reduce_calls(100, 1, 100) == 1, "exactly one full bucket is one call"
assert reduce_calls(101, 1, 100) == 2, "a partly filled last bucket is still a call"
assert reduce_calls(100, 4, 100) == 4, "ZeRO-2 reduces on every micro-step"
### BEGIN HIDDEN TESTS
from zerolab.engine import comm as _comm
from zerolab.lesson.checks import exact_type as _exact_type

for _params, _bucket in ((13_000_000_000, 500_000_000), (1_300_000_001, 200_000_000), (7_000_000, 10**9)):
    for _gas in (1, 3, 16):
        _t = _comm.traffic(_params, 2, 8, grad_accum=_gas, reduce_bucket_size=_bucket)
        _want = sum(c.buckets * c.times for c in _t.collectives if c.op == "reduce-scatter")
        _got = _exact_type(reduce_calls(_params, _gas, _bucket), int, "reduce_calls(...)")
        assert int(_got) == _want, (f"reduce_calls({_params}, {_gas}, {_bucket}) is not right: count the buckets "
                                    "the gradients fill, the last one partly filled included, once per micro-step")
### END HIDDEN TESTS

# %% [markdown]
# ## 4. overlap_comm: what it hides
#
# `overlap_comm: true` reduces each gradient bucket while backward is still computing the next ones, so that
# communication hides behind compute. It cannot hide:
#
# - the last bucket, which is only full when backward ends;
# - the all-gather of updated parameters after the optimizer step (ZeRO-1/2): there is no compute left to hide it;
# - communication longer than the compute it runs beside.
#
# In ZeRO-1/2 it costs memory: a second bucket buffer of `reduce_bucket_size` elements, so one bucket can be reduced
# while the next fills. In ZeRO-3 it does something else: it moves the gradient reduce-scatter and the parameter
# all-gathers to side streams (`stage3.py`, `zero/parameter_offload.py`). The default is false for stages 1-2 and
# true for stage 3 (DeepSpeed's docs table still says false).
# <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: overlap-comm-default-by-stage --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: zero3-overlap-comm-uses-side-streams -->

# %% [markdown] lang="zh" en="f06f94147df4"
# ## 4. overlap_comm：它隐藏了什么
#
# `overlap_comm: true` 让反向传播还在计算后面的梯度时，就开始归约已经填满的梯度桶，把通信藏在计算后面。它隐藏不了：
#
# - 最后一个桶，它要到反向传播结束才填满；
# - 优化器步之后对更新参数的 all-gather（ZeRO-1/2）：此时已经没有计算可以掩盖它；
# - 比同时进行的计算还长的那部分通信。
#
# 在 ZeRO-1/2 中它要占用显存：多一个 `reduce_bucket_size` 个元素的桶缓冲区，这样一个桶在归约的同时，下一个桶可以继续填充。在 ZeRO-3 中它做的是另一件事：把梯度的 reduce-scatter 和参数的 all-gather 放到单独的 CUDA 流（side stream）上（`stage3.py`、`zero/parameter_offload.py`）。默认值：stage 1-2 为 false，stage 3 为 true（DeepSpeed 文档的表格里仍写着 false）。<!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: overlap-comm-default-by-stage --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: zero3-overlap-comm-uses-side-streams -->

# %% [markdown]
# ### A common claim: "overlap_comm uses 4.5x the bucket sizes, 9GB at the defaults"
#
# It comes from the Hugging Face DeepSpeed guide, and from a multiplier that DeepSpeed deleted in 2021 (commit
# cfa63f5). What ZeRO-1/2 allocates in 0.19.8 for gradient buckets at the default size, in fp16: <!-- claim: zero12-bucket-buffers-no-4-5x -->

# %% [markdown] lang="zh" en="6bf2b2f8ad9a"
# ### 常见说法：“overlap_comm 占用桶大小的 4.5 倍，默认设置下是 9GB”
#
# 这个说法来自 Hugging Face 的 DeepSpeed 指南，依据的是 DeepSpeed 在 2021 年就已删除的一个系数（commit cfa63f5）。下面是 0.19.8 中 ZeRO-1/2 在默认桶大小、fp16 下为梯度桶实际分配的大小： <!-- claim: zero12-bucket-buffers-no-4-5x -->

# %%
for overlap in (False, True):
    print(tr(f"overlap_comm={overlap}: {units.format_bytes(comm.bucket_buffer_bytes(comm.DEFAULT_BUCKET, 'fp16', overlap))}"
             f" of gradient buckets per GPU (reduce_bucket_size = {comm.DEFAULT_BUCKET:.0e} elements)"))

# %% [markdown]
# The timeline below shows one step without and with overlap; change compute time, GPUs and link to see when it
# matters. Where widgets cannot render you see the static figure.

# %% [markdown] lang="zh" en="5eb2fe83fc77"
# 下面的时间线展示了一步训练在不开启和开启重叠时的情况；改变计算时间、GPU 数量和链路，看看它在什么情况下起作用。在无法渲染交互控件（widget）的环境里，你看到的是静态图。

# %%
from zerolab.lesson import widgets

widgets.overlap_explorer(params="13B", stage=2, world_size=8, compute_s=1.0, link="ib-hdr")

# %% [markdown]
# ### A common claim: "overlap_comm gives 10-30% throughput"
#
# No DeepSpeed or Hugging Face source gives a number; the gain depends on how much communication there is to hide
# and how much compute there is to hide it behind. With the same model and network:

# %% [markdown] lang="zh" en="46652c7b51cd"
# ### 常见说法：“overlap_comm 能提升 10-30% 的吞吐量”
#
# DeepSpeed 和 Hugging Face 的资料都没有给出过这样的数字；收益取决于有多少通信需要隐藏，以及有多少计算可以用来掩盖它。模型和网络不变时：

# %%
t = comm.traffic(P13B, 2, 8)
for compute_s in (0.25, 1.0, 4.0, 16.0):
    off = comm.step_time(t, compute_s, link="ib-hdr", overlap_comm=False)
    on = comm.step_time(t, compute_s, link="ib-hdr", overlap_comm=True)
    print(tr(f"compute {compute_s:5.2f} s: step {off.total_s:6.2f} s -> {on.total_s:6.2f} s with overlap_comm "
             f"({1 - on.total_s / off.total_s:6.1%} shorter)"))

# %% [markdown]
# ## Summary
#
# - Per step, in the paper's accounting, DDP, ZeRO-1 and ZeRO-2 move 2Ψ elements and ZeRO-3 3Ψ (DeepSpeed 0.19.8's
#   default all-reduces ZeRO-1/2's gradient buckets, which moves more); with gradient accumulation ZeRO-2 and ZeRO-3
#   communicate on every micro-step, DDP and ZeRO-1 only at the boundary.
# - Each GPU sends (N-1)/N of each collective's elements with ring collectives; divide by the link for seconds.
# - Collectives run in buckets: many calls per step, not one; ZeRO-3's call count depends on the implementation.
# - `overlap_comm` hides gradient reduction behind backward, except the last bucket and what runs after the
#   optimizer step; in ZeRO-1/2 it costs a second bucket buffer. Its gain is not a constant.
#
# ## Interview questions
#
# **Q: Does ZeRO-2 communicate more than DDP?**
# A: In the paper's accounting, not without accumulation: a reduce-scatter plus an all-gather is the same volume as
# an all-reduce (paper section 7). With gradient accumulation it does: ZeRO-2 reduces on every micro-step, DDP only
# at the boundary. DeepSpeed 0.19.8 by default all-reduces each gradient bucket, so its ZeRO-2 moves more than the
# paper's figure even without accumulation (section 3).
#
# **Q: Why is ZeRO-3's volume 1.5x DDP's (the paper's accounting)?**
# A: Parameters are partitioned, so they are gathered for forward and again for backward, plus the gradient
# reduce-scatter: three passes of Ψ instead of two.
#
# **Q: How many reduce-scatters does ZeRO-2 do per step?**
# A: One reduction per `reduce_bucket_size` bucket of gradients, on every micro-step (Exercise 3), not one per step.
# And in DeepSpeed 0.19.8 each is by default an all-reduce of the bucket (`use_multi_rank_bucket_allreduce`), not a
# literal reduce-scatter.
#
# **Q: What does overlap_comm cost, and when does it not help?**
# A: In ZeRO-1/2, a second bucket buffer on the GPU (in ZeRO-3 it moves reduce-scatter and gathers to side
# streams instead). It does not help when compute is much shorter than communication (nothing to
# hide behind) or much longer (nothing worth hiding), and it never hides the last bucket or the parameter
# all-gather after the optimizer step.
#
# **Q: How would you reduce exposed communication on a slow network?**
# A: Enable `overlap_comm`, use larger micro-batches (more compute per step), prefer ZeRO-2 over ZeRO-3 when memory
# allows, tune bucket sizes, or, if you run ZeRO-3, look at ZeRO++'s quantized and hierarchical collectives (qwZ,
# hpZ, qgZ apply to ZeRO-3 only: the stage 1/2 optimizer never reads those keys). <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero3-communicates-every-micro-step --> <!-- claim: stage0-1-reduce-at-the-boundary-torch-ddp-needs-no-sync --> <!-- claim: zero2-reduces-buckets-during-backward --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: zero3-overlap-comm-uses-side-streams --> <!-- claim: zeropp-keys-read-by-stage-3-only -->

# %% [markdown] lang="zh" en="63356493294d"
# ## 小结
#
# - 每步的通信量，按论文的口径，DDP、ZeRO-1 和 ZeRO-2 是 2Ψ 个元素，ZeRO-3 是 3Ψ（DeepSpeed 0.19.8 默认对 ZeRO-1/2 的梯度桶做 all-reduce，搬运得更多）；使用梯度累积时，ZeRO-2 和 ZeRO-3 在每个微步都通信，DDP 和 ZeRO-1 只在累积边界通信。
# - 采用环形集合通信时，每张 GPU 发送每次集合通信元素数的 (N-1)/N；再除以链路带宽得到秒数。
# - 集合通信按桶进行：每步调用多次，而不是一次；ZeRO-3 的调用次数取决于实现。
# - `overlap_comm` 把梯度归约藏在反向计算后面，但藏不住最后一个桶和优化器步之后的通信；在 ZeRO-1/2 中它要多占一个桶缓冲区。它的收益不是一个固定的比例。
#
# ## 面试题
#
# **问：ZeRO-2 的通信量比 DDP 多吗？**
# 答：按论文的口径，不使用梯度累积时不多：一次 reduce-scatter 加一次 all-gather，与一次 all-reduce 的通信量相同（论文第 7 节）。使用梯度累积时会多：ZeRO-2 每个微步都归约，DDP 只在累积边界归约。DeepSpeed 0.19.8 默认对每个梯度桶做 all-reduce，所以即使不做梯度累积，它的 ZeRO-2 搬运的数据也比论文的数字多（第 3 节）。
#
# **问：为什么 ZeRO-3 的通信量是 DDP 的 1.5 倍（论文的口径）？**
# 答：参数被切分了，所以前向时要 gather 一遍，反向时还要再 gather 一遍，再加上梯度的 reduce-scatter：一共三遍 Ψ，而不是两遍。
#
# **问：ZeRO-2 每步做多少次 reduce-scatter？**
# 答：每个 `reduce_bucket_size` 大小的梯度桶归约一次，而且每个微步都要做（练习 3），而不是每步一次。另外，在 DeepSpeed 0.19.8 中每次归约默认是对整个桶做 all-reduce（`use_multi_rank_bucket_allreduce`），并不是字面意义上的 reduce-scatter。
#
# **问：overlap_comm 的代价是什么？什么时候它帮不上忙？**
# 答：在 ZeRO-1/2 中，代价是 GPU 上多一个桶缓冲区（在 ZeRO-3 中，它的作用变成把 reduce-scatter 和 gather 放到单独的 CUDA 流上）。当计算远短于通信（没有计算可以用来掩盖）或远长于通信（没有值得隐藏的通信）时，它帮不上忙；而且它永远藏不住最后一个桶，也藏不住优化器步之后的参数 all-gather。
#
# **问：在慢速网络上，如何减少暴露在外的通信时间？**
# 答：开启 `overlap_comm`；用更大的微批次（micro-batch），让每步有更多计算；显存允许时优先选 ZeRO-2 而不是 ZeRO-3；调整桶大小；如果用的是 ZeRO-3，可以考虑 ZeRO++ 的量化和分层集合通信（qwZ、hpZ、qgZ 只作用于 ZeRO-3：stage 1/2 的优化器根本不读取这些配置项）。 <!-- claim: zero12-reduce-buckets-by-all-reduce --> <!-- claim: zero2-reduces-gradients-every-micro-step --> <!-- claim: zero3-communicates-every-micro-step --> <!-- claim: stage0-1-reduce-at-the-boundary-torch-ddp-needs-no-sync --> <!-- claim: zero2-reduces-buckets-during-backward --> <!-- claim: overlap-comm-reduces-on-a-side-stream-during-backward --> <!-- claim: overlap-comm-second-bucket-at-stages-1-2 --> <!-- claim: zero3-overlap-comm-uses-side-streams --> <!-- claim: zeropp-keys-read-by-stage-3-only -->
