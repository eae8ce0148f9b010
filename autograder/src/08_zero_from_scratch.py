# %% [markdown]
# # Lesson 08: ZeRO from scratch

# %% [markdown] lang="zh" en="a69ece742141"
# # 第 08 课：从零实现 ZeRO

# %% [markdown]
# ## Learning goals
#
# So far you configured ZeRO and predicted what it does. Here you build it, in plain `torch.distributed`:
#
# - split the flattened parameters into equal, padded shares, the way DeepSpeed does;
# - write ZeRO-1: an AdamW whose moments live only on the rank that owns each element;
# - write ZeRO-2: gradients averaged straight into their owner's shard, the rest freed;
# - configure DeepSpeed stage 1 to train exactly like your optimizer, and compare what each rank holds;
# - read a ZeRO-3 sketch and count its traffic against lesson 03's 3Ψ.
#
# The tests run **your cells on real processes**: 2 or 3 ranks on this CPU, joined by gloo, each training the same
# small model on its own rows of the batch. They compare the result with one process running
# `torch.optim.AdamW` on the full batch. Each test has hidden parts (other world sizes and hyper-parameters).

# %% [markdown] lang="zh" en="5291611d64c6"
# ## 学习目标
#
# 到目前为止，你配置过 ZeRO，也预测过它的行为。这一课你要亲手实现它，只用普通的 `torch.distributed`：
#
# - 像 DeepSpeed 那样，把展平后的参数切成大小相等、带填充（padding）的分片；
# - 实现 ZeRO-1：一个 AdamW，每个元素的矩只保存在拥有该元素的 rank 上；
# - 实现 ZeRO-2：梯度直接平均到其所有者的分片里，其余部分释放掉；
# - 配置 DeepSpeed stage 1，让它的训练结果与你的优化器完全一致，并比较每个 rank 持有什么；
# - 读懂一个 ZeRO-3 的示意实现，并对照第 03 课的 3Ψ 统计它的通信量。
#
# 测试会**在真实的进程上运行你的单元格**：在这台 CPU 上起 2 或 3 个 rank，通过 gloo 连接，每个 rank 用 batch 中属于自己的那些行训练同一个小模型。测试把结果与单个进程在完整 batch 上运行 `torch.optim.AdamW` 的结果相比较。每个测试都有隐藏部分（其他总进程数和超参数）。

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math

import torch
import torch.distributed as dist

from zerolab import comm
from zerolab.handmade import grade, verdict
from zerolab.handmade import model as fixed
from zerolab.handmade.partition import share_size
from zerolab.i18n import tr

# %% [markdown]
# ## 1. Who owns what
#
# DeepSpeed flattens the parameters into one long buffer, pads it to a multiple of the world size N and gives rank
# r the r-th equal share. A share can start or end in the middle of a parameter, so what a rank owns is a list of
# ranges of parameters' flattened elements. The padding belongs to the last rank and to nobody's parameters.
#
# The model every test trains has these parameters (element counts, in `model.parameters()` order):

# %% [markdown] lang="zh" en="c472b95a660d"
# ## 1. 谁拥有什么
#
# DeepSpeed 把参数展平成一个长缓冲区，填充到总进程数（world size）N 的整数倍，然后把第 r 个等长的分片交给 rank r。一个分片可以从某个参数的中间开始或结束，所以一个 rank 拥有的是一组区间，每个区间是某个参数展平后元素的一段。填充部分属于最后一个 rank，不属于任何参数。
#
# 每个测试训练的模型有下面这些参数（元素个数，按 `model.parameters()` 的顺序）：

# %%
numels = fixed.numels(fixed.build())
for world_size in (2, 3):
    size = share_size(sum(numels), world_size)
    print(tr(f"{sum(numels)} elements in {len(numels)} parameters {numels}; N={world_size}: shares of {size}, "
             f"{size * world_size - sum(numels)} padding"))

# %% [markdown]
# ### Exercise 1: `partition(numels, world_size)`
#
# Return one list per rank of the ranges it owns, `[(param_index, start, end), ...]` with `end` exclusive, as
# plain ints. Rank r owns flat elements `[r*s, (r+1)*s)` where s is the padded length divided by N, cut at the
# parameters' boundaries. The tests check properties on many inputs: every element owned exactly once, each rank's
# ranges one contiguous piece in rank order, equal shares (only the last may be short), and the same answer every
# time.

# %% [markdown] lang="zh" en="f5ff4355509d"
# ### 练习 1：`partition(numels, world_size)`
#
# 为每个 rank 返回一个列表，列出它拥有的区间 `[(param_index, start, end), ...]`，`end` 不包含在内，全部用普通 int。rank r 拥有展平后的元素 `[r*s, (r+1)*s)`，其中 s 是填充后的总长度除以 N，再按参数的边界切开。测试在许多输入上检查以下性质：每个元素恰好被拥有一次；每个 rank 的区间连成一整段，且按 rank 顺序排列；各分片等长（只有最后一个可以短一些）；每次调用得到相同的结果。

# %% nbgrader={"grade": false, "grade_id": "ex1_partition", "locked": false, "schema_version": 3, "solution": true, "task": false}
def partition(numels, world_size):
    """For each rank, the [(param_index, start, end), ...] of the flattened parameters it owns."""
    ### BEGIN SOLUTION
    total = sum(numels)
    share = -(-total // world_size)
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
assert len(partition([4, 4], 2)) == 2, "return one list of ranges per rank"
assert sum(e - s for r in partition([5, 3], 2) for _, s, e in r) == 8, "every element is owned once"
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
# Write the class below for the default process group (`dist.get_rank()`, `dist.get_world_size()`). Keep this rank's
# ranges in `self.owned` (as `partition` returns them for this rank): the tests read it. `zero_grad()` sets the
# gradients to None. For exercise 3: when a parameter has no `.grad` but a `.grad_shard` (a 1-D tensor: the already
# averaged gradient of this rank's range of it), use that instead.
#
# How it is tested: each rank runs this cell (after `import math, torch` and `import torch.distributed as dist`, with
# a correct `partition` provided, so this exercise does not depend on exercise 1); keep everything the class needs in
# the cell. Each rank then trains the model a few steps with `zero_grad()`, `backward()`, `step()`. The tests check
# that ranks agree on who owns what, that each rank's optimizer state is at most 1/N of AdamW's (plus padding), that
# all ranks end with the same parameters, and that these match `torch.optim.AdamW` on the full batch in one process.
# Calling DeepSpeed or `ZeroRedundancyOptimizer` scores 0.

# %% [markdown] lang="zh" en="519bd327ded8"
# ### 练习 2：`ShardedAdamW`
#
# 为默认进程组（`dist.get_rank()`、`dist.get_world_size()`）编写下面这个类。把本 rank 的区间保存在 `self.owned` 中（即 `partition` 为本 rank 返回的那个列表）：测试会读取它。`zero_grad()` 把梯度设为 None。为练习 3 做准备：如果某个参数没有 `.grad`，但有 `.grad_shard`（一个一维张量：该参数中属于本 rank 的区间、已经平均过的梯度），就改用它。
#
# 测试方式：每个 rank 都运行这个单元格（在此之前已执行 `import math, torch` 和 `import torch.distributed as dist`，并提供一个正确的 `partition`，所以本练习不依赖练习 1）；类需要的一切都要写在这个单元格里。然后每个 rank 用 `zero_grad()`、`backward()`、`step()` 把模型训练几步。测试检查：各 rank 对谁拥有什么的看法一致；每个 rank 的优化器状态不超过 AdamW 的 1/N（加上填充）；所有 rank 最终的参数相同；并且这些参数与单进程在完整 batch 上运行 `torch.optim.AdamW` 的结果一致。调用 DeepSpeed 或 `ZeroRedundancyOptimizer` 得 0 分。

# %% nbgrader={"grade": false, "grade_id": "ex2_sharded_adamw", "locked": false, "schema_version": 3, "solution": true, "task": false}
class ShardedAdamW(torch.optim.Optimizer):
    """AdamW with its moments sharded over the ranks of the default process group (ZeRO-1)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        ### BEGIN SOLUTION
        self.all_params = [p for group in self.param_groups for p in group["params"]]
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.shares = partition([p.numel() for p in self.all_params], self.world_size)
        self.owned = self.shares[self.rank]
        self.share = -(-sum(p.numel() for p in self.all_params) // self.world_size)
        ### END SOLUTION

    @torch.no_grad()
    def step(self, closure=None):
        ### BEGIN SOLUTION
        group = self.param_groups[0]
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        for p in self.all_params:  # every rank holds every gradient: average them (ZeRO-2 leaves .grad None)
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= self.world_size
        for index, start, end in self.owned:
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
        # Share the updates: every rank sends its share (padded to equal length) and copies in the others'.
        outgoing = torch.zeros(self.share)
        pieces = [self.all_params[i].view(-1)[s:e] for i, s, e in self.owned]
        if pieces:
            flat = torch.cat(pieces)
            outgoing[:flat.numel()] = flat
        incoming = [torch.empty(self.share) for _ in range(self.world_size)]
        dist.all_gather(incoming, outgoing)
        for rank, ranges in enumerate(self.shares):
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

_grade.zero1(ranks=3, steps=5, hyper={"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1})
### END HIDDEN TESTS

# %% [markdown]
# It trains like AdamW. What each rank held, measured on the ranks of the visible test (the tolerance is the one the
# test used):

# %% [markdown] lang="zh" en="251a6366505d"
# 它的训练结果和 AdamW 一样。下面是每个 rank 持有的量，在可见测试的各个 rank 上实测（容差就是测试所用的容差）：

# %%
print(tr(f"AdamW on one process: {fixed.adam_state_bytes()} bytes of optimizer state; parameters agree to "
         f"{verdict.ATOL:g}"))
for rank, result in enumerate(zero1_ranks):
    print(tr(f"rank {rank}: {result['state_bytes']} bytes of optimizer state, owns {result['owned']}"))

# %% [markdown]
# ## 3. ZeRO-2: shard the gradients too
#
# In ZeRO-1 every rank holds every gradient until the step. ZeRO-2 reduces each gradient straight to the rank that
# owns it (a reduce-scatter, or one `dist.reduce` per owner) and frees the rest, so a rank keeps 1/N of the gradient
# memory as well.
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

# %% [markdown] lang="zh" en="effc7d5cb92f"
# ## 3. ZeRO-2：把梯度也切分
#
# 在 ZeRO-1 中，每个 rank 在优化器步之前都持有全部梯度。ZeRO-2 把每个梯度直接规约到拥有它的 rank 上（一次 reduce-scatter，或对每个所有者各做一次 `dist.reduce`），其余部分释放掉，于是一个 rank 的梯度内存也只剩 1/N。
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

_grade.zero2(ranks=3, steps=5, hyper={"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1})
### END HIDDEN TESTS

# %%
full_gradient_bytes = 4 * sum(numels)
for rank, result in enumerate(zero2_ranks):
    print(tr(f"rank {rank}: {result['grad_bytes']} bytes of gradients after shard_gradients "
             f"(all of them: {full_gradient_bytes} bytes)"))

# %% [markdown]
# ## 4. Your ZeRO-1 against DeepSpeed's
#
# DeepSpeed stage 1 does what your `ShardedAdamW` does. To compare the two, DeepSpeed must train with the same
# optimizer, hyper-parameters and batch: AdamW from torch (`"torch_adam": true` in the optimizer's params; without it
# DeepSpeed compiles and uses its own fused Adam), fp32, one micro-batch per step of `global_batch / world_size` rows
# per rank.
#
# ### Exercise 4: `stage1_config(hyper, global_batch, world_size)`
#
# Return the ds_config (a plain dict) for that run. `hyper` has the keys `lr`, `betas`, `eps`, `weight_decay`. The
# test trains DeepSpeed with it on 2 ranks and compares its parameters after a few steps with `torch.optim.AdamW` on
# the full batch; hidden tests use other hyper-parameters and world sizes.

# %% [markdown] lang="zh" en="4c05d8c83661"
# ## 4. 你的 ZeRO-1 对比 DeepSpeed 的
#
# DeepSpeed stage 1 做的事和你的 `ShardedAdamW` 一样。要比较两者，DeepSpeed 必须用相同的优化器、超参数和 batch 训练：torch 的 AdamW（在优化器的 params 中设 `"torch_adam": true`；不设的话，DeepSpeed 会编译并使用它自己的 fused Adam）、fp32、每步一个微批次（micro-batch），每个 rank 有 `global_batch / world_size` 行。
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
    _problem = _verdict.stage1_config_problem(_config)
    assert _problem is None, _problem
    _params = _config["optimizer"].get("params", {})
    for _key in ("lr", "eps", "weight_decay"):
        assert _math.isclose(_params.get(_key, -1), _hyper[_key]), f"optimizer.params.{_key} does not follow hyper"
    assert [float(b) for b in _params.get("betas", [])] == _hyper["betas"], "optimizer.params.betas does not follow hyper"
    assert _config.get("train_micro_batch_size_per_gpu") == 24 // _world, \
        f"with {_world} ranks the micro-batch per rank is not global_batch / world_size"
    assert _config.get("gradient_accumulation_steps", 1) == 1, "one micro-batch per step"
### END HIDDEN TESTS

# %% [markdown]
# DeepSpeed matched AdamW to within the tolerance below. Now both optimizers run **in the same two ranks**: your
# `ShardedAdamW` (exercise 2), then DeepSpeed stage 1 with your config. The bytes are measured on each rank: for
# yours, the storages your optimizer holds; for DeepSpeed, the engine's own tensors (`zerolab.run.measure`).

# %% [markdown] lang="zh" en="1ba6149468f1"
# DeepSpeed 与 AdamW 的差距在下面的容差之内。现在让两个优化器**在同样的两个 rank 上**运行：先是你的 `ShardedAdamW`（练习 2），再是用你的配置运行的 DeepSpeed stage 1。字节数在每个 rank 上实测：你的优化器统计它持有的存储；DeepSpeed 统计引擎自己的张量（`zerolab.run.measure`）。

# %%
print(tr(f"DeepSpeed against AdamW: tolerance {verdict.DEEPSPEED_ATOL:g}"))
both = grade.side_by_side(stage1_config, ranks=2)
rows = [("parameters", "param_bytes", "param_bytes"), ("gradients (after backward)", "grad_bytes", "grad_bytes"),
        ("fp32 master weights", None, "master_weight_bytes"), ("Adam moments", "optimizer_state_bytes",
                                                                "optimizer_state_bytes")]
print(f"{'bytes on each rank':28s}" + "".join(f"{'rank ' + str(r) + ' yours':>14s}{'DeepSpeed':>11s}"
                                             for r in range(len(both))))
for label, mine, theirs in rows:
    cells = "".join(f"{(r['handmade'][mine] if mine else 0):>14d}{r['deepspeed'][theirs]:>11d}" for r in both)
    print(f"{label:28s}{cells}")
gap = max(abs(a - b) for a, b in zip(both[0]["handmade"]["params"], both[0]["deepspeed"]["params"]))
print(tr(f"largest parameter difference between yours and DeepSpeed's after the same steps: {gap:.1e}"))

# %% [markdown]
# Read the table: both keep 1/N of Adam's moments. DeepSpeed also keeps an fp32 master copy of its share, even in
# fp32 training. Its gradient column is measured after `engine.backward`, which in DeepSpeed 0.19.8 has already
# reduced the gradients into this rank's averaged share and freed the full ones; during backward they were all
# resident, as yours are until your `step()`. Keeping only the share from the start is what ZeRO-2 (exercise 3) does.

# %% [markdown] lang="zh" en="051e48bd3ab7"
# 看这张表：两者都只保存 1/N 的 Adam 矩。DeepSpeed 还为自己的分片保留一份 fp32 主权重，即使是 fp32 训练也一样。它的梯度列是在 `engine.backward` 之后实测的，而在 DeepSpeed 0.19.8 中，此时梯度已经规约进本 rank 平均后的分片，完整的梯度已被释放；在反向传播期间它们是全部常驻的，就像你的梯度在你的 `step()` 之前一样。从一开始就只保留分片，正是 ZeRO-2（练习 3）所做的事。

# %% [markdown]
# ## 5. A ZeRO-3 sketch (not graded)
#
# ZeRO-3 also shards the parameters: between steps a rank keeps only its share of each layer. For the forward pass it
# all-gathers a layer's parameters, uses them and frees them; backward gathers them again, computes the layer's
# gradients and reduce-scatters them to their owners. The cell below does that for the course's model and checks its
# gradient against the full batch's. It counts traffic the way the ZeRO paper does (lesson 03): a collective over a
# tensor of n elements counts n. Read it, run it, change it.

# %% [markdown] lang="zh" en="ef27e32f9a55"
# ## 5. ZeRO-3 示意实现（不计分）
#
# ZeRO-3 还会切分参数：在两步之间，一个 rank 只保留每一层中属于自己的分片。前向传播时，它 all-gather 一层的参数，用完即释放；反向传播时再 gather 一次，计算这一层的梯度，并把梯度 reduce-scatter 给各自的所有者。下面的单元格为课程的模型做了这件事，并把它的梯度与完整 batch 的梯度对照。它按 ZeRO 论文的口径（第 03 课）统计通信量：对 n 个元素的张量做一次集合通信，计为 n。读一读，运行一下，再改一改。

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
sketch = grade.zero3_sketch(ranks=2)
moved, psi = sketch[0]["moved"], sketch[0]["params"]
for what, elements in moved.items():
    print(tr(f"{what:28s} {elements:6d} elements = {elements / psi:.3f} Ψ"))
print(tr(f"total {sum(moved.values()) / psi:.3f} Ψ; the ZeRO paper's accounting for ZeRO-3 (lesson 03, comm.traffic): "
         f"{comm.traffic(psi, 3, 2).volume_in_params:g} Ψ"))
print(tr(f"gradient of the sketch against the full batch's: largest difference {sketch[0]['gradient_gap']:.1e}"))

# %% [markdown]
# The sketch moves a little more than 3Ψ: each layer is padded to a multiple of N on its own, where DeepSpeed pads
# whole buckets. It also gathers every layer twice on every step; DeepSpeed prefetches the next layers while one
# computes, keeps small parameters resident (`stage3_param_persistence_threshold`) and gathers per submodule.
#
# ## Summary
#
# - A rank's share is a contiguous, equal piece of the flattened parameters, cut at parameter boundaries; the last
#   share is padded. Every rank must compute the same partition.
# - ZeRO-1: average the gradients, update only owned elements with their own Adam moments, all-gather the updates.
#   Weight decay belongs to the owner's update like the rest.
# - ZeRO-2: reduce each gradient to its owner and free the full gradient; a view into the full gradient frees nothing.
# - DeepSpeed stage 1, configured with the same AdamW and batch, trains to the same parameters; it also keeps an fp32
#   master copy of its share.
# - ZeRO-3 gathers each layer for forward and again for backward and reduce-scatters its gradients: about 3Ψ per step
#   in the paper's accounting.
#
# ## Interview questions
#
# **Q: Where does ZeRO-1 save memory, and what does it communicate?**
# A: Adam's moments (and master weights in mixed precision) are split over the ranks. It averages the gradients and
# all-gathers the updated parameters: the same volume as DDP's all-reduce.
#
# **Q: Why must every rank compute the same partition?**
# A: The collectives pair up by position: an element two ranks both think they own is updated twice, one nobody owns
# is never updated, and the all-gather puts each rank's share where the others expect it.
#
# **Q: Your sharded optimizer matches AdamW on one rank but not on two. What do you check first?**
# A: That gradients are averaged, not summed; that the updated parameters reach every rank; and that weight decay is
# applied only by the owner.

# %% [markdown] lang="zh" en="b7934d6453f8"
# 这个示意实现的通信量略多于 3Ψ：每一层各自被填充到 N 的整数倍，而 DeepSpeed 是对整个桶做填充。它还在每一步把每一层都 gather 两次；DeepSpeed 则在一层计算时预取后面的层，把小参数常驻（`stage3_param_persistence_threshold`），并按子模块做 gather。
#
# ## 小结
#
# - 一个 rank 的分片是展平后参数中连续、等长的一段，按参数边界切开；最后一个分片带填充。每个 rank 必须算出相同的切分。
# - ZeRO-1：平均梯度，用各自的 Adam 矩只更新自己拥有的元素，再 all-gather 更新结果。权重衰减和其余部分一样，属于所有者的更新。
# - ZeRO-2：把每个梯度规约到其所有者，并释放完整的梯度；完整梯度的视图（view）什么也释放不了。
# - DeepSpeed stage 1 配置成相同的 AdamW 和 batch 后，训练出相同的参数；它还为自己的分片保留一份 fp32 主权重。
# - ZeRO-3 在前向时 gather 每一层，反向时再 gather 一次，并对梯度做 reduce-scatter：按论文的口径，每步约 3Ψ。
#
# ## 面试问题
#
# **问：ZeRO-1 在哪里省显存？它通信什么？**
# 答：Adam 的矩（混合精度下还有主权重）被切分到各个 rank 上。它平均梯度，再 all-gather 更新后的参数：通信量与 DDP 的 all-reduce 相同。
#
# **问：为什么每个 rank 必须算出相同的切分？**
# 答：集合通信是按位置配对的：两个 rank 都认为自己拥有的元素会被更新两次，谁都不拥有的元素永远不会被更新，而 all-gather 会把每个 rank 的分片放到其他 rank 预期的位置上。
#
# **问：你的切分优化器在一个 rank 上与 AdamW 一致，在两个 rank 上却不一致。首先检查什么？**
# 答：检查梯度是求平均而不是求和；更新后的参数是否送到了每个 rank；以及权重衰减是否只由所有者执行。
