# %% [markdown]
# # Lesson 08: ZeRO from scratch

# %% [markdown] lang="zh" en="a69ece742141"
# # 第 08 课：从零实现 ZeRO

# %% [markdown]
# ## Learning goals
#
# So far you configured ZeRO and predicted what it does. Here you build it, in plain `torch.distributed`:
#
# - split the flattened parameters into equal, padded shares, the way DeepSpeed's ZeRO-1/2 do;
# - write ZeRO-1: an AdamW whose moments live only on the rank that owns each element, for every parameter group;
# - write ZeRO-2's first step: gradients averaged into their owner's shard, the rest freed;
# - configure DeepSpeed stage 1 to train exactly like your optimizer, and compare what each rank holds;
# - read a ZeRO-3 sketch and count its traffic against lesson 03's 3Ψ.
#
# The tests run **your cells on real processes**: 2 or 3 ranks on this CPU, joined by gloo, each training the same
# small model on its own rows of the batch. They compare the result with one process running
# `torch.optim.AdamW` on the full batch. Each test has hidden parts (other world sizes and hyper-parameters). While
# nbgrader grades, the demonstration cells that no test needs (the side-by-side with DeepSpeed, the ZeRO-3 sketch's
# run) skip themselves with one line.

# %% [markdown] lang="zh" en="a25f57711ae8"
# ## 学习目标
#
# 到目前为止，你配置过 ZeRO，也预测过它的行为。这一课你要亲手实现它，只用普通的 `torch.distributed`：
#
# - 像 DeepSpeed 的 ZeRO-1/2 那样，把展平后的参数切成大小相等、带填充（padding）的分片；
# - 实现 ZeRO-1：一个 AdamW，每个元素的矩只保存在拥有该元素的 rank 上，并照顾到每一个参数组；
# - 实现 ZeRO-2 的第一步：梯度平均到其所有者的分片里，其余部分释放掉；
# - 配置 DeepSpeed stage 1，让它的训练结果与你的优化器完全一致，并比较每个 rank 持有什么；
# - 读懂一个 ZeRO-3 的示意实现，并对照第 03 课的 3Ψ 统计它的通信量。
#
# 测试会**在真实的进程上运行你的单元格**：在这台 CPU 上起 2 或 3 个 rank，通过 gloo 连接，每个 rank 用 batch 中属于自己的那些行训练同一个小模型。测试把结果与单个进程在完整 batch 上运行 `torch.optim.AdamW` 的结果相比较。每个测试都有隐藏部分（其他总进程数和超参数）。nbgrader 评分时，没有测试依赖的演示单元格（与 DeepSpeed 的并排对比、ZeRO-3 示意实现的运行）会自动跳过，只打印一行说明。

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math
import os

import torch
import torch.distributed as dist

from zerolab import comm
from zerolab.handmade import grade, verdict
from zerolab.handmade import model as fixed
from zerolab.i18n import tr

# %% [markdown]
# ## 1. Who owns what
#
# DeepSpeed's ZeRO-1 and ZeRO-2 flatten each parameter group into one long buffer, pad it to a multiple of **2N** (N
# the world size: DeepSpeed 0.19.8's `nccl_start_alignment_factor = 2` in `stage_1_and_2.py` keeps every share's
# start on a 4-byte boundary of 16-bit values) and give rank r the r-th equal share. A share can start or end in the
# middle of a parameter, so what a rank owns is a list of ranges of parameters' flattened elements. The padding sits
# at the end of the buffer and belongs to no parameter: the last share is short, and when the padding is longer than
# a share (a small group, such as 7 elements on 3 ranks) the last ranks own no element at all. The course's own tests
# check this rule against the partitions DeepSpeed's stage-1 and stage-2 optimizers build on 2 and 3 ranks.
#
# The model every test trains has these parameters (element counts, in `model.parameters()` order):

# %% [markdown] lang="zh" en="3750a7d1fc38"
# ## 1. 谁拥有什么
#
# DeepSpeed 的 ZeRO-1 和 ZeRO-2 把每个参数组展平成一个长缓冲区，填充到 **2N** 的整数倍（N 是总进程数 world size：DeepSpeed 0.19.8 在 `stage_1_and_2.py` 中设 `nccl_start_alignment_factor = 2`，让每个分片的起点落在 16 位数值的 4 字节边界上），然后把第 r 个等长的分片交给 rank r。一个分片可以从某个参数的中间开始或结束，所以一个 rank 拥有的是一组区间，每个区间是某个参数展平后元素的一段。填充部分位于缓冲区的末尾，不属于任何参数：最后一个分片较短；当填充比一个分片还长时（参数组很小，例如 3 个 rank 上只有 7 个元素），最后几个 rank 一个元素也不拥有。课程自己的测试会把这条规则与 DeepSpeed 的 stage-1 和 stage-2 优化器在 2 个和 3 个 rank 上实际构建的切分相比较。
#
# 每个测试训练的模型有下面这些参数（元素个数，按 `model.parameters()` 的顺序）：

# %%
numels = fixed.numels(fixed.build())
print(tr(f"{sum(numels)} elements in {len(numels)} parameters {numels}"))

# %% [markdown]
# ### Exercise 1: `partition(numels, world_size)`
#
# Return one list per rank of the ranges it owns, `[(param_index, start, end), ...]` with `end` exclusive, as
# plain ints. Rank r owns flat elements `[r*s, (r+1)*s)` where s is the length padded up to a multiple of 2N, divided
# by N, cut at the parameters' boundaries. The tests check properties on many inputs: every element owned exactly
# once, each rank's ranges one contiguous piece in rank order, DeepSpeed's share sizes (only the last shares short or
# empty), and the same answer every time. Off limits: the course's own partition (`zerolab.handmade`: `flat_partition`,
# `share_size`) and the grading modules (`grade`, `verdict`); a cell that uses them scores 0.

# %% [markdown] lang="zh" en="7cde54197912"
# ### 练习 1：`partition(numels, world_size)`
#
# 为每个 rank 返回一个列表，列出它拥有的区间 `[(param_index, start, end), ...]`，`end` 不包含在内，全部用普通 int。rank r 拥有展平后的元素 `[r*s, (r+1)*s)`，其中 s 是把总长度向上填充到 2N 的整数倍后再除以 N，再按参数的边界切开。测试在许多输入上检查以下性质：每个元素恰好被拥有一次；每个 rank 的区间连成一整段，且按 rank 顺序排列；分片大小与 DeepSpeed 的一致（只有最后几个分片较短或为空）；每次调用得到相同的结果。禁止使用：课程自己的切分实现（`zerolab.handmade` 中的 `flat_partition`、`share_size`）和评分模块（`grade`、`verdict`）；用了它们的单元格得 0 分。

# %% nbgrader={"grade": false, "grade_id": "ex1_partition", "locked": false, "schema_version": 3, "solution": true, "task": false}
def partition(numels, world_size):
    """For each rank, the [(param_index, start, end), ...] of the flattened parameters it owns."""
    ### BEGIN SOLUTION
    total = sum(numels)
    alignment = 2 * world_size  # DeepSpeed's ZeRO-1/2: nccl_start_alignment_factor (2) times N
    share = -(-total // alignment) * alignment // world_size
    owned = []
    for rank in range(world_size):
        low, high = rank * share, min(total, (rank + 1) * share)
        ranges, first = [], 0
        for index, numel in enumerate(numels):
            start, end = max(low, first), min(high, first + numel)
            if start < end:
                ranges.append((index, start - first, end - first))
            first += numel
        owned.append(ranges)
    return owned
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex1_partition", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
grade.check_partition(partition, [([4, 4], 2), ([5, 3], 3), (fixed.numels(fixed.build()), 2)])
### BEGIN HIDDEN TESTS
from zerolab.handmade import grade as _grade
from zerolab.handmade import model as _fixed

_grade.check_partition(partition, [(_fixed.numels(_fixed.build()), 3), ([7], 3), ([1, 1, 1], 5), ([10, 1, 9, 2], 4),
                                   ([3, 100, 2], 7), ([100003], 8), ([2] * 9, 2)])
### END HIDDEN TESTS

# %% [markdown]
# ## 2. ZeRO-1: shard the optimizer state
#
# Every rank still computes the full gradient of its own rows and keeps all parameters. What changes is the step:
#
# 1. average the gradients over the ranks (each rank trained on different rows; the mean of their gradients is the
#    full batch's gradient);
# 2. each rank updates **only the elements it owns** with AdamW, keeping Adam's two moments for those elements
#    only: that is the 1/N of optimizer memory ZeRO-1 saves;
# 3. the updated elements reach every rank (an all-gather), so all ranks start the next step identical.
#
# AdamW per owned element, at step t: shrink the parameter by `lr * weight_decay` (decoupled decay), update the
# moments `m = β1·m + (1-β1)·g` and `v = β2·v + (1-β2)·g²`, then subtract `lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)`.

# %% [markdown] lang="zh" en="ec249239eb56"
# ## 2. ZeRO-1：切分优化器状态
#
# 每个 rank 仍然为自己的那些行计算完整的梯度，并保留全部参数。变化的是优化器步：
#
# 1. 在各 rank 之间平均梯度（每个 rank 训练的是不同的行；它们梯度的平均值就是完整 batch 的梯度）；
# 2. 每个 rank 用 AdamW **只更新自己拥有的元素**，Adam 的两个矩也只为这些元素保存：这就是 ZeRO-1 省下的那部分，优化器内存只剩 1/N；
# 3. 更新后的元素发送到每个 rank（一次 all-gather），这样所有 rank 以完全相同的状态开始下一步。
#
# 对每个拥有的元素，第 t 步的 AdamW：先把参数乘以 `1 - lr * weight_decay` 缩小（解耦的权重衰减），再更新两个矩 `m = β1·m + (1-β1)·g` 和 `v = β2·v + (1-β2)·g²`，然后减去 `lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)`。

# %% [markdown]
# ### Exercise 2: `ShardedAdamW`
#
# Write the class below for the default process group (`dist.get_rank()`, `dist.get_world_size()`). Honour every
# parameter group: `self.param_groups` may hold several (the usual pair: weights with weight decay, biases without),
# each with its own `lr`, `betas`, `eps` and `weight_decay`. Partition each group on its own, as DeepSpeed does
# (flatten it, pad it, share it out). Keep this rank's ranges of all groups in `self.owned`, `param_index` counting
# the parameters of all groups in order: the tests read it. `zero_grad()` sets the gradients to None. For exercise 3:
# when a parameter has no `.grad` but a `.grad_shard` (a 1-D tensor: the already averaged gradient of this rank's
# range of it), use that instead.
#
# How it is tested: each rank runs this cell (after `import math, torch` and `import torch.distributed as dist`, with
# a correct `partition` provided, so this exercise does not depend on exercise 1); keep everything the class needs in
# the cell. Each rank then trains the model a few steps with `zero_grad()`, `backward()`, `step()`. The tests check
# that ranks agree on who owns what; that all ranks end with the same parameters and that these match
# `torch.optim.AdamW` on the full batch in one process (hidden: with two parameter groups); and what each rank keeps
# in memory: every tensor alive in the rank after a step is counted, wherever it is kept, each storage once. Apart
# from the parameters, their gradients and the buffers you pass to collectives (reported on their own line), a rank
# may keep 1/N of AdamW's optimizer state (plus padding and step counters). Calling DeepSpeed,
# `ZeroRedundancyOptimizer` or the course's own optimizer (`zerolab.handmade`) scores 0.

# %% [markdown] lang="zh" en="b75ec774d6f9"
# ### 练习 2：`ShardedAdamW`
#
# 为默认进程组（`dist.get_rank()`、`dist.get_world_size()`）编写下面这个类。要照顾到每一个参数组：`self.param_groups` 可能有好几个组（常见的一对：带权重衰减的权重、不带权重衰减的偏置），每个组有自己的 `lr`、`betas`、`eps` 和 `weight_decay`。像 DeepSpeed 那样，每个组单独切分（展平、填充、分片）。把本 rank 在所有组中的区间保存在 `self.owned` 中，其中 `param_index` 按顺序对所有组的参数统一编号：测试会读取它。`zero_grad()` 把梯度设为 None。为练习 3 做准备：如果某个参数没有 `.grad`，但有 `.grad_shard`（一个一维张量：该参数中属于本 rank 的区间、已经平均过的梯度），就改用它。
#
# 测试方式：每个 rank 都运行这个单元格（在此之前已执行 `import math, torch` 和 `import torch.distributed as dist`，并提供一个正确的 `partition`，所以本练习不依赖练习 1）；类需要的一切都要写在这个单元格里。然后每个 rank 用 `zero_grad()`、`backward()`、`step()` 把模型训练几步。测试检查：各 rank 对谁拥有什么的看法一致；所有 rank 最终的参数相同，并且与单进程在完整 batch 上运行 `torch.optim.AdamW` 的结果一致（隐藏测试：使用两个参数组）；以及每个 rank 在内存里保留了什么：一步之后 rank 中所有存活的张量都会被统计，不管保存在哪里，每块存储只算一次。除了参数、参数的梯度和你传给集合通信的缓冲区（单独列为一行），一个 rank 最多只能保留 AdamW 优化器状态的 1/N（加上填充和步数计数器）。调用 DeepSpeed、`ZeroRedundancyOptimizer` 或课程自己的优化器（`zerolab.handmade`）得 0 分。

# %% nbgrader={"grade": false, "grade_id": "ex2_sharded_adamw", "locked": false, "schema_version": 3, "solution": true, "task": false}
class ShardedAdamW(torch.optim.Optimizer):
    """AdamW with its moments sharded over the ranks of the default process group (ZeRO-1)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        ### BEGIN SOLUTION
        self.all_params = [p for group in self.param_groups for p in group["params"]]
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.groups, self.owned, first = [], [], 0  # each group partitioned on its own, as DeepSpeed does
        for group in self.param_groups:
            shares = partition([p.numel() for p in group["params"]], self.world_size)
            shares = [[(first + i, s, e) for i, s, e in ranges] for ranges in shares]  # index over all groups
            self.groups.append((group, shares))
            self.owned += shares[self.rank]
            first += len(group["params"])
        ### END SOLUTION

    @torch.no_grad()
    def step(self, closure=None):
        ### BEGIN SOLUTION
        for p in self.all_params:  # every rank holds every gradient: average them (ZeRO-2 leaves .grad None)
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= self.world_size
        for group, shares in self.groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for index, start, end in shares[self.rank]:
                p = self.all_params[index]
                grad = p.grad.view(-1)[start:end] if p.grad is not None else p.grad_shard
                state = self.state[p]
                if not state:
                    state["t"], state["m"], state["v"] = 0, torch.zeros_like(grad), torch.zeros_like(grad)
                state["t"] += 1
                t, m, v = state["t"], state["m"], state["v"]
                mine = p.view(-1)[start:end]
                mine.mul_(1 - lr * decay)
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(eps)
                mine.addcdiv_(m, denom, value=-lr / (1 - beta1 ** t))
            # Share the updates: every rank sends its share of the group (padded to equal length), copies the others'.
            size = max(sum(e - s for _, s, e in ranges) for ranges in shares)
            outgoing = torch.zeros(size)
            pieces = [self.all_params[i].view(-1)[s:e] for i, s, e in shares[self.rank]]
            if pieces:
                flat = torch.cat(pieces)
                outgoing[:flat.numel()] = flat
            incoming = [torch.empty(size) for _ in range(self.world_size)]
            dist.all_gather(incoming, outgoing)
            for rank, ranges in enumerate(shares):
                offset = 0
                for index, start, end in ranges:
                    self.all_params[index].view(-1)[start:end] = incoming[rank][offset:offset + end - start]
                    offset += end - start
        ### END SOLUTION

    def zero_grad(self, set_to_none=True):
        ### BEGIN SOLUTION
        for p in self.all_params:
            p.grad = None
            p.grad_shard = None
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex2_sharded_adamw", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
zero1_ranks = grade.zero1(ranks=2)
### BEGIN HIDDEN TESTS
from zerolab.handmade import grade as _grade
from zerolab.handmade import model as _fixed

_ranks = _grade.zero1(ranks=3, steps=5, hyper={"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1},
                      groups=_fixed.NO_DECAY_ON_BIASES)
### END HIDDEN TESTS

# %% [markdown]
# It trains like AdamW. What each rank kept alive after a step, measured on the ranks of the visible test by the
# garbage collector (every tensor, each storage once; `zerolab.handmade.live`), and the tolerance the test used:

# %% [markdown] lang="zh" en="b830252f36aa"
# 它的训练结果和 AdamW 一样。下面是一步之后每个 rank 保留的存活张量，由垃圾回收器在可见测试的各个 rank 上实测（统计每个张量，每块存储只算一次；`zerolab.handmade.live`），以及测试所用的容差：

# %%
zero1_ranks = globals().get("zero1_ranks")
if zero1_ranks is None:
    print(tr("this cell shows exercise 2's ranks: answer exercise 2 first (its test must pass)"))
else:
    print(tr(f"AdamW on one process: {fixed.adam_state_bytes()} bytes of optimizer state; parameters agree to "
             f"{verdict.ATOL:g}"))
    for rank, result in enumerate(zero1_ranks):
        memory = result["memory"]
        print(tr(f"rank {rank}: parameters {memory['parameters']} B, gradients {memory['gradients']} B, "
                 f"communication buffers kept {memory['communication buffers']} B, everything else (optimizer "
                 f"state) {memory['other']} B; owns {result['owned']}"))

# %% [markdown]
# ## 3. ZeRO-2: shard the gradients too
#
# In ZeRO-1 every rank holds every gradient until the step. ZeRO-2 reduces each gradient to the rank that owns it (a
# reduce-scatter, or one `dist.reduce` per owner) and frees the rest, so a rank keeps 1/N of the gradient memory as
# well. This exercise does it once, after `backward()`: every full gradient is still resident at the end of backward,
# so the peak does not drop yet. DeepSpeed's ZeRO-2 reduces a bucket of gradients at a time from gradient hooks
# during backward and frees what the rank does not own as it goes (`stage_1_and_2.py`,
# `reduce_independent_p_g_buckets_and_remove_grads`).
#
# ### Exercise 3: `shard_gradients(model)`
#
# Called after `backward()`. Afterwards, on every rank: every parameter's `.grad` is None; a parameter this rank
# owns part of carries `.grad_shard`, a 1-D tensor holding the **averaged** gradient of exactly the elements it owns
# (in order); parameters it owns none of have `grad_shard` None. Gradient memory still alive on a rank must be at most
# 1/N of the full gradients (plus padding): a shard that is a view into the full gradient keeps all of it alive.
#
# The tests run this cell on the ranks (with `torch`, `dist`, `math` and a correct `partition`), check the shards
# against the full batch's gradient, measure the bytes, and train with the course's own ZeRO-1 optimizer reading your
# shards (so this exercise does not depend on exercise 2): it must still match AdamW.

# %% [markdown] lang="zh" en="b09daabf7ed5"
# ## 3. ZeRO-2：把梯度也切分
#
# 在 ZeRO-1 中，每个 rank 在优化器步之前都持有全部梯度。ZeRO-2 把每个梯度规约到拥有它的 rank 上（一次 reduce-scatter，或对每个所有者各做一次 `dist.reduce`），其余部分释放掉，于是一个 rank 的梯度内存也只剩 1/N。本练习在 `backward()` 之后一次性完成这件事：反向传播结束时所有完整梯度仍然常驻，所以峰值还没有下降。DeepSpeed 的 ZeRO-2 在反向传播期间从梯度钩子（hook）里一次规约一个桶（bucket）的梯度，并随即释放本 rank 不拥有的部分（`stage_1_and_2.py`，`reduce_independent_p_g_buckets_and_remove_grads`）。
#
# ### 练习 3：`shard_gradients(model)`
#
# 在 `backward()` 之后调用。调用之后，在每个 rank 上：每个参数的 `.grad` 都是 None；本 rank 拥有其中一部分的参数带有 `.grad_shard`，这是一个一维张量，按顺序恰好存放本 rank 所拥有元素的**平均后**梯度；本 rank 一个元素都不拥有的参数，其 `grad_shard` 为 None。一个 rank 上仍然存活的梯度内存最多只能是完整梯度的 1/N（加上填充）：如果分片是完整梯度的一个视图（view），整份梯度都会一直存活。
#
# 测试在各个 rank 上运行这个单元格（已提供 `torch`、`dist`、`math` 和一个正确的 `partition`），把分片与完整 batch 的梯度对照，实测字节数，并用课程自带的 ZeRO-1 优化器读取你的分片进行训练（所以本练习不依赖练习 2）：结果必须仍与 AdamW 一致。

# %% nbgrader={"grade": false, "grade_id": "ex3_shard_gradients", "locked": false, "schema_version": 3, "solution": true, "task": false}
def shard_gradients(model):
    """Average each gradient into the rank that owns it (as .grad_shard) and free the full gradients."""
    ### BEGIN SOLUTION
    world_size, me = dist.get_world_size(), dist.get_rank()
    params = list(model.parameters())
    shares = partition([p.numel() for p in params], world_size)
    for p in params:
        p.grad_shard = None
    for owner, ranges in enumerate(shares):
        for index, start, end in ranges:
            p = params[index]
            piece = p.grad.view(-1)[start:end].clone()
            dist.reduce(piece, dst=owner)
            if owner == me:
                p.grad_shard = piece / world_size
    for p in params:
        p.grad = None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex3_shard_gradients", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
zero2_ranks = grade.zero2(ranks=2)
### BEGIN HIDDEN TESTS
from zerolab.handmade import grade as _grade

_ranks = _grade.zero2(ranks=3, steps=5, hyper={"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1})
### END HIDDEN TESTS

# %%
zero2_ranks = globals().get("zero2_ranks")
if zero2_ranks is None:
    print(tr("this cell shows exercise 3's ranks: answer exercise 3 first (its test must pass)"))
else:
    full_gradient_bytes = 4 * sum(numels)
    for rank, result in enumerate(zero2_ranks):
        print(tr(f"rank {rank}: {result['grad_bytes']} bytes of gradients after shard_gradients "
                 f"(all of them: {full_gradient_bytes} bytes)"))

# %% [markdown]
# ## 4. Your ZeRO-1 against DeepSpeed's
#
# DeepSpeed stage 1 does what your `ShardedAdamW` does. To compare the two, DeepSpeed must train with the same
# optimizer, hyper-parameters and batch: AdamW from torch (`"torch_adam": true` in the optimizer's params; without it
# DeepSpeed compiles and uses its own fused Adam), fp32, and each optimizer step trained on the whole global batch.
# DeepSpeed derives whichever of `train_batch_size`, `train_micro_batch_size_per_gpu` and
# `gradient_accumulation_steps` you leave out; any split into equal micro-batches trains the same, and the test asks
# DeepSpeed's own config resolution what your config means.
#
# ### Exercise 4: `stage1_config(hyper, global_batch, world_size)`
#
# Return the ds_config (a plain dict) for that run. `hyper` has the keys `lr`, `betas`, `eps`, `weight_decay`. The
# test trains DeepSpeed with it on 2 ranks and compares its parameters after a few steps with `torch.optim.AdamW` on
# the full batch; hidden tests use other hyper-parameters and world sizes.

# %% [markdown] lang="zh" en="3de073fb8840"
# ## 4. 你的 ZeRO-1 对比 DeepSpeed 的
#
# DeepSpeed stage 1 做的事和你的 `ShardedAdamW` 一样。要比较两者，DeepSpeed 必须用相同的优化器、超参数和 batch 训练：torch 的 AdamW（在优化器的 params 中设 `"torch_adam": true`；不设的话，DeepSpeed 会编译并使用它自己的 fused Adam）、fp32，并且每个优化器步都在整个全局 batch 上训练。`train_batch_size`、`train_micro_batch_size_per_gpu` 和 `gradient_accumulation_steps` 中你没有给出的，DeepSpeed 会自己推导；切成任意等大的微批次（micro-batch）训练结果都相同，测试会用 DeepSpeed 自己的配置解析来确定你的配置是什么意思。
#
# ### 练习 4：`stage1_config(hyper, global_batch, world_size)`
#
# 返回这次运行的 ds_config（一个普通的 dict）。`hyper` 含有键 `lr`、`betas`、`eps`、`weight_decay`。测试用它在 2 个 rank 上训练 DeepSpeed，几步之后把它的参数与 `torch.optim.AdamW` 在完整 batch 上的结果比较；隐藏测试会用其他超参数和总进程数。

# %% nbgrader={"grade": false, "grade_id": "ex4_stage1_config", "locked": false, "schema_version": 3, "solution": true, "task": false}
def stage1_config(hyper, global_batch, world_size):
    """A ds_config that makes DeepSpeed ZeRO-1 train like ShardedAdamW with these hyper-parameters."""
    ### BEGIN SOLUTION
    return {
        "train_micro_batch_size_per_gpu": global_batch // world_size,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": hyper["lr"], "betas": list(hyper["betas"]), "eps": hyper["eps"],
                                                  "weight_decay": hyper["weight_decay"], "torch_adam": True}},
        "zero_optimization": {"stage": 1},
    }
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex4_stage1_config", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
deepspeed_ranks = grade.deepspeed_stage1(stage1_config, ranks=2)
### BEGIN HIDDEN TESTS
import math as _math

from zerolab.checks import plain as _plain
from zerolab.handmade import verdict as _verdict

for _hyper, _world in (({"lr": 3e-4, "betas": [0.85, 0.95], "eps": 1e-6, "weight_decay": 0.05}, 4),
                       ({"lr": 0.1, "betas": [0.5, 0.9], "eps": 0.01, "weight_decay": 0.0}, 3)):
    _config = _plain(stage1_config(dict(_hyper), 24, _world), "stage1_config(...)")
    _problem = _verdict.stage1_config_problem(_config) or _verdict.batch_problem(_config, 24, _world)
    assert _problem is None, _problem
    _params = _config["optimizer"].get("params", {})
    for _key in ("lr", "eps", "weight_decay"):
        assert _math.isclose(_params.get(_key, -1), _hyper[_key]), f"optimizer.params.{_key} does not follow hyper"
    assert [float(b) for b in _params.get("betas", [])] == _hyper["betas"], "optimizer.params.betas does not follow hyper"
### END HIDDEN TESTS

# %% [markdown]
# DeepSpeed matched AdamW to within the tolerance below. Now both optimizers run **in the same two ranks**: your
# `ShardedAdamW` (exercise 2), then DeepSpeed stage 1 with your config. The bytes are measured on each rank: for
# yours, every tensor alive in the rank (`zerolab.handmade.live`; what is not a parameter, a gradient or a kept
# communication buffer is counted as optimizer state); for DeepSpeed, the engine's own tensors (`zerolab.run.measure`).
# This cell is a demonstration that no test needs: it skips itself while nbgrader grades.

# %% [markdown] lang="zh" en="953980313bd4"
# DeepSpeed 与 AdamW 的差距在下面的容差之内。现在让两个优化器**在同样的两个 rank 上**运行：先是你的 `ShardedAdamW`（练习 2），再是用你的配置运行的 DeepSpeed stage 1。字节数在每个 rank 上实测：你的实现统计 rank 中所有存活的张量（`zerolab.handmade.live`；不是参数、梯度或保留下来的通信缓冲区的部分都算作优化器状态）；DeepSpeed 统计引擎自己的张量（`zerolab.run.measure`）。这个单元格是演示，没有测试依赖它：nbgrader 评分时会自动跳过。

# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("The side-by-side run is skipped while grading."))
elif "zero1_ranks" not in globals() or "deepspeed_ranks" not in globals():
    print(tr("this cell runs exercises 2 and 4 side by side: answer both first (their tests must pass)"))
else:
    print(tr(f"DeepSpeed against AdamW: tolerance {verdict.DEEPSPEED_ATOL:g}"))
    both = grade.side_by_side(stage1_config, ranks=2)
    rows = [("parameters", "param_bytes", "param_bytes"), ("gradients (after backward)", "grad_bytes", "grad_bytes"),
            ("fp32 master weights", None, "master_weight_bytes"),
            ("Adam moments", "optimizer_state_bytes", "optimizer_state_bytes"),
            ("communication buffers kept", "communication_bytes", None)]
    print(f"{'bytes on each rank':28s}" + "".join(f"{'rank ' + str(r) + ' yours':>14s}{'DeepSpeed':>11s}"
                                                 for r in range(len(both))))
    for label, mine, theirs in rows:
        cells = "".join(f"{(r['handmade'][mine] if mine else '-'):>14}{(r['deepspeed'][theirs] if theirs else '-'):>11}"
                        for r in both)
        print(f"{tr(label):28s}{cells}")
    gap = max(abs(a - b) for a, b in zip(both[0]["handmade"]["params"], both[0]["deepspeed"]["params"]))
    print(tr(f"largest parameter difference between yours and DeepSpeed's after the same steps: {gap:.1e}"))

# %% [markdown]
# Read the table: both keep 1/N of Adam's moments. DeepSpeed also keeps an fp32 master copy of its share, even in
# fp32 training. Its gradient column is measured after `engine.backward`, which in DeepSpeed 0.19.8 has already
# reduced the gradients into this rank's averaged share and freed the full ones; during backward they were all
# resident, as yours are until your `step()`. DeepSpeed's ZeRO-2 is what keeps the peak down during backward: it
# reduces a bucket of gradients at a time from gradient hooks and frees what the rank does not own as it goes.
# Exercise 3's `shard_gradients` runs after backward, so at the end of backward it still holds every gradient.

# %% [markdown] lang="zh" en="b1b1ae3c8743"
# 看这张表：两者都只保存 1/N 的 Adam 矩。DeepSpeed 还为自己的分片保留一份 fp32 主权重，即使是 fp32 训练也一样。它的梯度列是在 `engine.backward` 之后实测的，而在 DeepSpeed 0.19.8 中，此时梯度已经规约进本 rank 平均后的分片，完整的梯度已被释放；在反向传播期间它们是全部常驻的，就像你的梯度在你的 `step()` 之前一样。让反向传播期间的峰值降下来的是 DeepSpeed 的 ZeRO-2：它从梯度钩子里一次规约一个桶的梯度，并随即释放本 rank 不拥有的部分。练习 3 的 `shard_gradients` 在反向传播之后才运行，所以反向传播结束时它仍然持有全部梯度。

# %% [markdown]
# ## 5. A ZeRO-3 sketch (not graded)
#
# ZeRO-3 also shards the parameters: between steps a rank keeps only its share of each layer. For the forward pass it
# all-gathers a layer's parameters, uses them and frees them; backward gathers them again, computes the layer's
# gradients and reduce-scatters them to their owners. The cell below does that for the course's model and checks its
# gradient against the full batch's. It counts traffic the way the ZeRO paper does (lesson 03): a collective over a
# tensor of n elements counts n. Read it, run it, change it. (Its run skips itself while nbgrader grades.)

# %% [markdown] lang="zh" en="0685c5414707"
# ## 5. ZeRO-3 示意实现（不计分）
#
# ZeRO-3 还会切分参数：在两步之间，一个 rank 只保留每一层中属于自己的分片。前向传播时，它 all-gather 一层的参数，用完即释放；反向传播时再 gather 一次，计算这一层的梯度，并把梯度 reduce-scatter 给各自的所有者。下面的单元格为课程的模型做了这件事，并把它的梯度与完整 batch 的梯度对照。它按 ZeRO 论文的口径（第 03 课）统计通信量：对 n 个元素的张量做一次集合通信，计为 n。读一读，运行一下，再改一改。（nbgrader 评分时，它的运行会自动跳过。）

# %%
def zero3_step(model, inputs, targets):
    """One forward and backward with each Linear gathered only while it is used. Returns (moved, grad shards)."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    moved = {"all-gather (forward)": 0, "all-gather (backward)": 0, "reduce-scatter (gradients)": 0}

    def flat(layer):
        return torch.cat([layer.weight.detach().reshape(-1), layer.bias.detach().reshape(-1)])

    def gather(layer, shard, purpose):
        pieces = [torch.empty_like(shard) for _ in range(world_size)]
        dist.all_gather(pieces, shard)
        moved[purpose] += shard.numel() * world_size
        full = torch.cat(pieces)[:layer.weight.numel() + layer.bias.numel()]
        return full[:layer.weight.numel()].view_as(layer.weight), full[layer.weight.numel():]

    shards = {}
    for layer in (m for m in model if isinstance(m, torch.nn.Linear)):  # keep my share, drop the rest
        whole = flat(layer)
        size = -(-whole.numel() // world_size)
        padded = torch.cat([whole, whole.new_zeros(size * world_size - whole.numel())])
        shards[layer] = padded[rank * size:(rank + 1) * size].clone()

    inputs_of, x = [], inputs
    for module in model:  # forward: gather, use, free
        inputs_of.append(x)
        with torch.no_grad():
            if module in shards:
                weight, bias = gather(module, shards[module], "all-gather (forward)")
                x = torch.nn.functional.linear(x, weight, bias)
                del weight, bias
            else:
                x = module(x)
    out = x.requires_grad_()
    torch.nn.functional.mse_loss(out, targets).div(world_size).backward()
    grad, grad_shards = out.grad, []
    for module, x in reversed(list(zip(model, inputs_of))):  # backward: gather again, recompute, reduce-scatter
        x = x.detach().requires_grad_()
        if module in shards:
            weight, bias = gather(module, shards[module], "all-gather (backward)")
            weight.requires_grad_(), bias.requires_grad_()
            torch.nn.functional.linear(x, weight, bias).backward(grad)
            local = torch.cat([weight.grad.reshape(-1), bias.grad.reshape(-1)])
            size = shards[module].numel()
            local = torch.cat([local, local.new_zeros(size * world_size - local.numel())])
            mine = torch.empty(size)
            dist.reduce_scatter(mine, list(local.split(size)))
            moved["reduce-scatter (gradients)"] += local.numel()
            grad_shards.insert(0, mine)
        else:
            module(x).backward(grad)
        grad = x.grad
    return moved, grad_shards


# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("The ZeRO-3 sketch's run is skipped while grading."))
else:
    sketch = grade.zero3_sketch(ranks=2)
    moved, psi = sketch[0]["moved"], sketch[0]["params"]
    for what, elements in moved.items():
        print(tr(f"{what:28s} {elements:6d} elements = {elements / psi:.3f} Ψ"))
    print(tr(f"total {sum(moved.values()) / psi:.3f} Ψ; the ZeRO paper's accounting for ZeRO-3 (lesson 03, "
             f"comm.traffic): {comm.traffic(psi, 3, 2).volume_in_params:g} Ψ"))
    print(tr(f"gradient of the sketch against the full batch's: largest difference {sketch[0]['gradient_gap']:.1e}"))

# %% [markdown]
# The sketch moves a little more than 3Ψ: each layer is padded to a multiple of N on its own. DeepSpeed's ZeRO-3 pads
# too, every parameter to a multiple of N (`partition_parameters.py`). Both gather each layer's weights for forward
# and again for backward. Unlike real ZeRO-3, the sketch runs its forward without autograd and computes each layer's
# forward again in backward; DeepSpeed keeps the activations autograd saved and, from module hooks, gathers only the
# weights again. DeepSpeed also prefetches the next layers while one computes, keeps small parameters resident
# (`stage3_param_persistence_threshold`) and gathers per submodule.
#
# ## What ZeRO-1 communicates
#
# Your `ShardedAdamW`, like DeepSpeed's default ZeRO-1 (`use_multi_rank_bucket_allreduce`), all-reduces the whole
# gradient and then all-gathers the updated parameters. The ZeRO paper's ZeRO-1 reduce-scatters the gradients
# instead. The volumes per step, in the paper's accounting, from lesson 03's `comm.traffic`:

# %% [markdown] lang="zh" en="8da5335d80f6"
# 这个示意实现的通信量略多于 3Ψ：每一层各自被填充到 N 的整数倍。DeepSpeed 的 ZeRO-3 也做填充，它把每个参数填充到 N 的整数倍（`partition_parameters.py`）。两者都在前向时 gather 每一层的权重，反向时再 gather 一次。与真正的 ZeRO-3 不同，这个示意实现在前向时不用 autograd，到反向时再把每一层的前向算一遍；DeepSpeed 保留 autograd 保存下来的激活，只从模块钩子里再次 gather 权重。DeepSpeed 还会在一层计算时预取后面的层，把小参数常驻（`stage3_param_persistence_threshold`），并按子模块做 gather。
#
# ## ZeRO-1 通信什么
#
# 你的 `ShardedAdamW` 和 DeepSpeed 默认的 ZeRO-1（`use_multi_rank_bucket_allreduce`）一样，先对整个梯度做 all-reduce，再 all-gather 更新后的参数。ZeRO 论文中的 ZeRO-1 则对梯度做 reduce-scatter。按论文的口径，每步的通信量如下，取自第 03 课的 `comm.traffic`：

# %%
psi = sum(numels)
for label, stage, bucket_allreduce in (("DDP (all-reduce)", 0, False),
                                       ("your ZeRO-1 and DeepSpeed's default (all-reduce, then all-gather)", 1, True),
                                       ("the paper's ZeRO-1 (reduce-scatter, then all-gather)", 1, False)):
    volume = comm.traffic(psi, stage, 2, precision="fp32", bucket_allreduce=bucket_allreduce).volume_in_params
    print(tr(f"{tr(label)}: {volume:g} Ψ per step"))

# %% [markdown]
# ## Summary
#
# - A rank's share is a contiguous, equal piece of a parameter group's flattened buffer padded to a multiple of 2N
#   (DeepSpeed's ZeRO-1/2), cut at parameter boundaries; the padding is at the end. Every rank must compute the same
#   partition.
# - ZeRO-1: average the gradients, update only owned elements with their own Adam moments and their group's
#   hyper-parameters, all-gather the updates. Weight decay belongs to the owner's update like the rest, decoupled.
# - ZeRO-2: reduce each gradient to its owner and free the full gradient; a view into the full gradient frees nothing;
#   reducing from hooks during backward is what lowers the peak.
# - DeepSpeed stage 1, configured with the same AdamW and batch, trains to the same parameters; it also keeps an fp32
#   master copy of its share.
# - ZeRO-3 gathers each layer for forward and again for backward and reduce-scatters its gradients: about 3Ψ per step
#   in the paper's accounting.
#
# ## Interview questions
#
# **Q: Where does ZeRO-1 save memory, and what does it communicate?**
# A: Adam's moments (and master weights in mixed precision) are split over the ranks. Written like this lesson's, and
# like DeepSpeed's default, it all-reduces the gradients and then all-gathers the updated parameters: half as much
# again as DDP's all-reduce (the figures above). Reduce-scattering the gradients instead brings it down to DDP's volume,
# the paper's figure.
#
# **Q: Why must every rank compute the same partition?**
# A: The collectives pair up by position: an element two ranks both think they own is updated twice, one nobody owns
# is never updated, and the all-gather puts each rank's share where the others expect it.
#
# **Q: Your sharded optimizer matches AdamW on one rank but not on two. What do you check first?**
# A: That gradients are averaged, not summed; that the updated parameters reach every rank; and that weight decay is
# applied only by the owner.

# %% [markdown] lang="zh" en="7940624d138d"
# ## 小结
#
# - 一个 rank 的分片是参数组展平后、填充到 2N 整数倍（DeepSpeed 的 ZeRO-1/2）的缓冲区中连续、等长的一段，按参数边界切开；填充在末尾。每个 rank 必须算出相同的切分。
# - ZeRO-1：平均梯度，用各自的 Adam 矩和所在参数组的超参数只更新自己拥有的元素，再 all-gather 更新结果。权重衰减和其余部分一样，属于所有者的更新，而且是解耦的。
# - ZeRO-2：把每个梯度规约到其所有者，并释放完整的梯度；完整梯度的视图（view）什么也释放不了；在反向传播期间从钩子里规约，才能降低峰值。
# - DeepSpeed stage 1 配置成相同的 AdamW 和 batch 后，训练出相同的参数；它还为自己的分片保留一份 fp32 主权重。
# - ZeRO-3 在前向时 gather 每一层，反向时再 gather 一次，并对梯度做 reduce-scatter：按论文的口径，每步约 3Ψ。
#
# ## 面试问题
#
# **问：ZeRO-1 在哪里省显存？它通信什么？**
# 答：Adam 的矩（混合精度下还有主权重）被切分到各个 rank 上。像本课这样写、也像 DeepSpeed 默认的那样，它先对梯度做 all-reduce，再 all-gather 更新后的参数：比 DDP 的 all-reduce 多一半（见上面的数字）。改为对梯度做 reduce-scatter，才能降到 DDP 的通信量，也就是论文给出的数字。
#
# **问：为什么每个 rank 必须算出相同的切分？**
# 答：集合通信是按位置配对的：两个 rank 都认为自己拥有的元素会被更新两次，谁都不拥有的元素永远不会被更新，而 all-gather 会把每个 rank 的分片放到其他 rank 预期的位置上。
#
# **问：你的切分优化器在一个 rank 上与 AdamW 一致，在两个 rank 上却不一致。首先检查什么？**
# 答：检查梯度是求平均而不是求和；更新后的参数是否送到了每个 rank；以及权重衰减是否只由所有者执行。
