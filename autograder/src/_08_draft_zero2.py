# %% nbgrader={"grade": false, "grade_id": "imports_zero2", "locked": true, "schema_version": 3, "solution": false, "task": false}
from zerolab import comm
from zerolab.config.defaults import default_of
from zerolab.handmade import mixed, traffic, zero2, zero2_model
from zerolab.handmade import model as fixed
from zerolab.i18n import tr

# %% [markdown]
# ## 3. ZeRO-2: reduce the gradients while backward runs
#
# Your ZeRO-1 keeps every full gradient until `step()`: at the end of backward a rank holds all of them, however
# the step then shards them. Sharding them after backward only shrinks memory *between* steps; the peak stays.
# DeepSpeed 0.19.8's stage 2 lowers the peak by reducing gradients *during* backward
# (`deepspeed/runtime/zero/stage_1_and_2.py`):
#
# - `create_gradient_handling_hooks` puts a hook on every parameter (`register_post_accumulate_grad_hook`, through
#   `deepspeed.utils.torch.register_grad_hook`): it runs as soon as that parameter's gradient is complete;
# - the hook (`reduce_independent_p_g_buckets_and_remove_grads`) copies the gradient into a flat bucket of
#   `reduce_bucket_size` elements; when the next gradient would not fit, `reduce_ipg_grads` reduces the bucket
#   first, and then sets `.grad = None` on every parameter of the bucket that lies outside this rank's partition.
#   A gradient larger than the bucket is reduced on its own;
# - so at any moment a rank holds about its own averaged share, one bucket (two with `overlap_comm`) and the gradient
#   that just arrived.
#
# Which collective reduces a bucket is a setting. DeepSpeed's defaults, read from its own config classes:

# %% [markdown] lang="zh" en="14ebd897afb3"
# ## 3. ZeRO-2：在反向传播进行时规约梯度
#
# 你的 ZeRO-1 会一直保留每个完整梯度，直到 `step()`：反向传播结束时，一个 rank 持有全部梯度，不管之后的优化器步怎样切分它们。在反向传播之后再切分梯度，只能减少两步*之间*的内存，峰值不变。DeepSpeed 0.19.8 的 stage 2 在反向传播*期间*规约梯度，从而降低峰值（`deepspeed/runtime/zero/stage_1_and_2.py`）：
#
# - `create_gradient_handling_hooks` 给每个参数挂一个钩子（hook）（`register_post_accumulate_grad_hook`，经由 `deepspeed.utils.torch.register_grad_hook`）：该参数的梯度一算完，钩子就运行；
# - 钩子（`reduce_independent_p_g_buckets_and_remove_grads`）把梯度复制进一个有 `reduce_bucket_size` 个元素的扁平桶（bucket）；当下一个梯度放不下时，`reduce_ipg_grads` 先规约这个桶，再把桶中位于本 rank 分区之外的每个参数的 `.grad` 设为 None。比桶还大的梯度单独规约；
# - 因此在任一时刻，一个 rank 大约持有自己那份平均后的分片、一个桶（开启 `overlap_comm` 时是两个），以及刚刚到达的那个梯度。
#
# 用哪种集合通信来规约一个桶，是一个配置项。下面是 DeepSpeed 的默认值，从它自己的配置类中读出：

# %%
for key in ("reduce_bucket_size", "reduce_scatter", "use_multi_rank_bucket_allreduce", "contiguous_gradients"):
    print(f"zero_optimization.{key:32s} {default_of('zero_optimization.' + key)}")

# %% [markdown]
# `reduce_scatter` is true by default, yet `average_tensor` then checks `use_multi_rank_bucket_allreduce`, also true
# by default: each bucket is **all-reduced** (`allreduce_and_scatter`) and every rank keeps only its partition of the
# result. Only with `use_multi_rank_bucket_allreduce: false` does each rank's slice of the bucket go to its owner
# alone (`dist.reduce`, in `allreduce_no_retain`); with `reduce_scatter: false` the whole bucket is all-reduced too.
# Lesson 03's accounting (`comm.traffic`) of one step for the model of the exercise below, on 2 ranks:

# %% [markdown] lang="zh" en="aa1412c6ef81"
# `reduce_scatter` 默认为 true，但 `average_tensor` 接着检查 `use_multi_rank_bucket_allreduce`，它默认也是 true：每个桶都被 **all-reduce**（`allreduce_and_scatter`），每个 rank 只保留结果中属于自己分区的那部分。只有设置 `use_multi_rank_bucket_allreduce: false` 时，桶中每个 rank 的那一段才只发给它的所有者（`dist.reduce`，在 `allreduce_no_retain` 中）；设置 `reduce_scatter: false` 时，整个桶同样被 all-reduce。下面是第 03 课的统计口径（`comm.traffic`）下，下文练习所用模型在 2 个 rank 上一步的通信量：

# %%
psi = sum(fixed.numels(zero2_model.build()))
for label, bucket_allreduce in (("reduced to the owners (the paper)", False),
                                ("DeepSpeed's default (bucket all-reduce)", True)):
    step = comm.traffic(psi, 2, 2, precision="fp32", bucket_allreduce=bucket_allreduce)
    parts = ", ".join(f"{c.op} {c.volume / psi:g} Ψ" for c in step.collectives)
    print(f"{tr(label):40s} " + tr(f"{step.volume_in_params:g} Ψ per step: {parts}"))

# %% [markdown]
# ### Exercise 3: `Zero2Gradients(model, bucket_elements)`
#
# Write a class whose constructor installs the hooks on `model`'s parameters and keeps this rank's ranges in
# `self.owned` (as `partition` gives them for this rank). From then on, during every `loss.backward()`:
#
# - each gradient, as it arrives, waits in a bucket of at most `bucket_elements` elements (a gradient larger than
#   the bucket is sent on its own); when the bucket is full, it is reduced **to the ranks that own its elements**
#   (each rank receives only what it owns) and averaged;
# - the owner keeps `p.grad_shard`: a 1-D tensor, the averaged gradient of exactly the elements of `p` it owns (as in
#   exercise 2); every `p.grad` is set to None once its bucket has been sent;
# - when `loss.backward()` returns, every shard is ready: nobody calls you after backward, so the last gradient's
#   hook sends the last bucket (count the hooks), and the count starts again for the next backward.
#
# How it is tested: each rank runs this cell (with `torch`, `dist`, `math` and a correct `partition`) and trains the
# deeper model below with the course's own ZeRO-1 optimizer reading your shards, so this exercise does not depend
# on exercise 2. The grader checks: the shards against the full batch's gradient; the parameters after a few steps
# against `torch.optim.AdamW` (tolerance `verdict.ATOL`); the **peak** of gradient memory during the first backward,
# sampled from every tensor alive in the rank at every hook and before every collective, against the rank's share
# plus one bucket plus the largest parameter; and what the rank sends during backward, counted at the
# collectives, in the ZeRO paper's volume (an all-reduce counts twice). Hidden tests use 3 ranks, a bucket smaller
# than the largest parameter and other hyper-parameters. Calling DeepSpeed, torch's FSDP or the course's
# `zerolab.handmade` scores 0.

# %% [markdown] lang="zh" en="51f37d524ce1"
# ### 练习 3：`Zero2Gradients(model, bucket_elements)`
#
# 编写一个类：构造函数在 `model` 的参数上挂好钩子，并把本 rank 的区间保存在 `self.owned` 中（即 `partition` 为本 rank 给出的那个列表）。此后在每次 `loss.backward()` 期间：
#
# - 每个梯度一到达，就在一个最多 `bucket_elements` 个元素的桶里等待（比桶还大的梯度单独发送）；桶满时，把它规约**到拥有其中元素的那些 rank**（每个 rank 只收到自己拥有的部分），并求平均；
# - 所有者保存 `p.grad_shard`：一个一维张量，恰好是它拥有的 `p` 中那些元素平均后的梯度（与练习 2 相同）；每个 `p.grad` 在它所在的桶发出后都设为 None；
# - `loss.backward()` 返回时，每个分片都已就绪：反向传播之后没有人会再调用你，所以由最后一个梯度的钩子发出最后一个桶（数一数钩子被调用的次数），下一次反向传播时重新计数。
#
# 测试方式：每个 rank 都运行这个单元格（已提供 `torch`、`dist`、`math` 和一个正确的 `partition`），然后用课程自带的 ZeRO-1 优化器读取你的分片，训练下面这个更深的模型，所以本练习不依赖练习 2。评分程序检查：分片与完整 batch 的梯度是否一致；几步之后的参数与 `torch.optim.AdamW` 是否一致（容差 `verdict.ATOL`）；第一次反向传播期间梯度内存的**峰值**（在每个钩子处、每次集合通信之前，从该 rank 中存活的每个张量采样），不得超过本 rank 的分片加一个桶再加最大的那个参数；以及该 rank 在反向传播期间发送的数据量，在集合通信处统计，按 ZeRO 论文的口径（一次 all-reduce 计两次）。隐藏测试使用 3 个 rank、比最大参数还小的桶，以及其他超参数。调用 DeepSpeed、torch 的 FSDP 或课程自带的 `zerolab.handmade` 得 0 分。

# %%
numels = fixed.numels(zero2_model.build())
print(tr(f"the deeper model: {sum(numels)} elements in {len(numels)} parameters {numels}; the largest has "
         f"{max(numels)}; the visible test's bucket holds {zero2.BUCKET_ELEMENTS} elements"))

# %% nbgrader={"grade": false, "grade_id": "ex3_zero2_gradients", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Zero2Gradients:
    """ZeRO-2: reduce the gradients during backward, a bucket at a time, to the ranks that own them."""

    def __init__(self, model, bucket_elements):
        ### BEGIN SOLUTION
        self.params = list(model.parameters())
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.shares = partition([p.numel() for p in self.params], self.world_size)
        self.owned = self.shares[self.rank]
        self.bucket = torch.empty(bucket_elements)  # gradients wait here, copied, until the bucket is full
        self.waiting = []  # (param_index, its flat gradient: a piece of the bucket, or a gradient too big for it)
        self.used = self.arrived = 0
        for index, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, index=index: self._arrived(index, p))
        ### END SOLUTION

    ### BEGIN SOLUTION
    def _arrived(self, index, p):
        grad, p.grad = p.grad.reshape(-1), None
        fits = grad.numel() <= self.bucket.numel()
        if not fits or self.used + grad.numel() > self.bucket.numel():
            self._reduce()  # the bucket is full (or this gradient goes alone): send what waits
        if fits:
            grad = self.bucket[self.used:self.used + grad.numel()].copy_(grad)
            self.used += grad.numel()
        self.waiting.append((index, grad))
        self.arrived += 1
        if not fits or self.arrived == len(self.params):
            self._reduce()
        if self.arrived == len(self.params):  # the last gradient of this backward: ready for the next one
            self.arrived = 0

    def _reduce(self):
        for index, grad in self.waiting:
            for owner, ranges in enumerate(self.shares):
                for i, start, end in ranges:
                    if i == index:
                        dist.reduce(grad[start:end], dst=owner)
            for i, start, end in self.owned:
                if i == index:
                    self.params[index].grad_shard = grad[start:end] / self.world_size
        self.waiting, self.used = [], 0
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex3_zero2_gradients", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
zero2_ranks = zero2.zero2_hooks(ranks=2)
### BEGIN HIDDEN TESTS
from zerolab.handmade import zero2 as _zero2

_zero2.zero2_hooks(ranks=3, steps=4, bucket_elements=700,
                   hyper={"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1})
### END HIDDEN TESTS

# %% [markdown]
# It trains like AdamW. What each rank held and sent, measured by the grader on the ranks of the visible test:

# %% [markdown] lang="zh" en="fd498a13e0d4"
# 它的训练结果和 AdamW 一样。下面是每个 rank 持有和发送的量，由评分程序在可见测试的各个 rank 上实测：

# %%
from zerolab.handmade import zero2_verdict

all_gradients = 4 * sum(numels)
for rank, result in enumerate(zero2_ranks):
    rows = result["traffic"][0]
    calls = ", ".join(f"{row['calls']} x {row['op']}" for row in rows)
    allowed = zero2_verdict.memory_budget(numels, len(zero2_ranks), rank, zero2.BUCKET_ELEMENTS)
    print(tr(f"rank {rank}: peak {result['memory_peak']} bytes of gradients during backward "
             f"({result['memory_where']}); allowed {allowed}; all the gradients take {all_gradients} bytes"))
    print(tr(f"rank {rank}: sent {traffic.volume(rows) / sum(numels):.2f} Ψ during backward ({calls}), "
             f"{sum(row['wire_bytes'] for row in rows)} bytes on the wire with ring collectives"))

# %% [markdown]
# The peak is the rank's share, one bucket and one gradient, not the whole model: that is what ZeRO-2 saves, and
# it only exists because the reduction runs inside backward (on this small model a bucket and one layer are a
# large part of it; with a real model and more ranks they are a sliver). The traffic is Ψ for the gradients, the paper's
# reduce-scatter, where DeepSpeed's default all-reduce moves 2Ψ. DeepSpeed also overlaps the reduction with the
# rest of backward (`overlap_comm`, lesson 03) and keeps a second bucket for it; yours waits for each reduce.

# %% [markdown] lang="zh" en="f98d849e0d9f"
# 峰值是本 rank 的分片、一个桶和一个梯度，而不是整个模型：这正是 ZeRO-2 省下的内存，而且只有在反向传播内部做规约才能做到（在这个小模型上，一个桶加一层占了其中很大一部分；换成真实的模型和更多的 rank，它们只占很小一部分）。梯度的通信量是 Ψ，即论文中的 reduce-scatter，而 DeepSpeed 默认的 all-reduce 要传 2Ψ。DeepSpeed 还让规约与反向传播的其余部分重叠（`overlap_comm`，第 03 课），并为此多留一个桶；你的实现则会等每次 reduce 完成。

# %% [markdown]
# ## Mixed precision: bf16 compute, fp32 master shards, clipping by the global norm
#
# Real ZeRO runs compute in bf16. The parameters and gradients the model uses are bf16 (2 bytes), but the
# optimizer updates an **fp32 master copy** of its share: an AdamW update is often smaller than bf16's precision
# near a weight's value, so a master kept in bf16 silently drops it. After the step, the bf16 parameters are
# refreshed from the fp32 master. DeepSpeed's stage 1/2 optimizer does the same (`single_partition_of_fp32_groups`
# is the fp32 share; its all-gather sends the updated 16-bit parameters).
#
# Clipping by the global norm needs the norm of the **whole** averaged gradient, while each rank holds only its
# share: every rank sums the squares of its share, one all-reduce adds them up, and every rank scales its share by
# the same factor. That is what `torch.nn.utils.clip_grad_norm_` computes on one process:
# `min(1, max_norm / (norm + 1e-6))`. Clipping each share by its own norm is a different (and wrong) update.

# %% [markdown] lang="zh" en="7d9b9636a233"
# ## 混合精度：bf16 计算、fp32 主权重分片、按全局范数裁剪
#
# 真实的 ZeRO 训练用 bf16 计算。模型使用的参数和梯度是 bf16（2 字节），但优化器更新的是其分片的一份 **fp32 主权重副本**：AdamW 的一次更新常常小于 bf16 在该权重数值附近的精度，所以保存在 bf16 中的主权重会悄无声息地丢掉这次更新。优化器步之后，再用 fp32 主权重刷新 bf16 参数。DeepSpeed 的 stage 1/2 优化器也是这样做的（`single_partition_of_fp32_groups` 是 fp32 分片；它的 all-gather 发送更新后的 16 位参数）。
#
# 按全局范数裁剪，需要的是**整个**平均后梯度的范数，而每个 rank 只持有自己的分片：每个 rank 求出自己分片的平方和，一次 all-reduce 把它们加起来，每个 rank 再用同一个系数缩放自己的分片。这正是 `torch.nn.utils.clip_grad_norm_` 在单个进程中计算的：`min(1, max_norm / (norm + 1e-6))`。每个分片按它自己的范数裁剪，得到的是另一种（错误的）更新。

# %% [markdown]
# ### Exercise 6: `MixedShardedAdamW`
#
# Your ZeRO-1 again, in mixed precision. The model's parameters are bf16. Keep `self.owned` as in exercise 2, and
# `self.master`: a list of fp32 1-D tensors, the master copy of each range of `self.owned`, in that order. `step()`
# averages the gradients in fp32, computes the global norm of the averaged gradient with **one** all-reduce of the
# squared norms of the shares, scales the gradient as `clip_grad_norm_` would, updates the fp32 master with AdamW,
# refreshes the bf16 parameters of every rank from the masters, and returns the norm before clipping (a float).
#
# How it is tested: each rank trains the fixed model cast to bf16 for a few steps. The grader compares the first
# step's norm with `torch.nn.utils.clip_grad_norm_` on the unsharded averaged gradient, the fp32 masters after the
# last step with one process that runs `clip_grad_norm_` and `torch.optim.AdamW` on an fp32 master copy of the same
# bf16 model (tolerance `mixed_verdict.MASTER_ATOL`), and each rank's bf16 parameters with the masters rounded to
# bf16. A bf16 master and clipping per shard fail with a message that names them. Hidden tests: 3 ranks, another
# `max_grad_norm` and hyper-parameters.

# %% [markdown] lang="zh" en="d8413a475e96"
# ### 练习 6：`MixedShardedAdamW`
#
# 还是你的 ZeRO-1，这次用混合精度。模型的参数是 bf16。像练习 2 那样保存 `self.owned`，另外保存 `self.master`：一个由 fp32 一维张量组成的列表，依次是 `self.owned` 中每个区间的主权重副本。`step()` 在 fp32 中平均梯度，用**一次**对各分片平方范数的 all-reduce 算出平均后梯度的全局范数，像 `clip_grad_norm_` 那样缩放梯度，用 AdamW 更新 fp32 主权重，用各 rank 的主权重刷新每个 rank 的 bf16 参数，并返回裁剪之前的范数（一个 float）。
#
# 测试方式：每个 rank 把转成 bf16 的固定模型训练几步。评分程序把第一步的范数与 `torch.nn.utils.clip_grad_norm_` 在未切分的平均梯度上的结果比较；把最后一步之后的 fp32 主权重与单个进程的结果比较，该进程在同一个 bf16 模型的 fp32 主权重副本上运行 `clip_grad_norm_` 和 `torch.optim.AdamW`（容差 `mixed_verdict.MASTER_ATOL`）；并检查每个 rank 的 bf16 参数是否等于主权重舍入到 bf16 的结果。bf16 主权重和按分片裁剪都会失败，并得到点明错误的消息。隐藏测试使用 3 个 rank、另一个 `max_grad_norm` 和其他超参数。

# %% nbgrader={"grade": false, "grade_id": "ex6_mixed_precision", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MixedShardedAdamW(torch.optim.Optimizer):
    """ZeRO-1 in mixed precision: bf16 parameters, an fp32 master copy of this rank's share, clipping by global norm."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, max_grad_norm=1.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.max_grad_norm = max_grad_norm
        ### BEGIN SOLUTION
        self.all_params = [p for group in self.param_groups for p in group["params"]]
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.shares = partition([p.numel() for p in self.all_params], self.world_size)
        self.owned = self.shares[self.rank]
        self.share = max(sum(end - start for _, start, end in ranges) for ranges in self.shares)
        self.master = [self.all_params[i].detach().view(-1)[s:e].float() for i, s, e in self.owned]
        self.m = [torch.zeros_like(x) for x in self.master]
        self.v = [torch.zeros_like(x) for x in self.master]
        self.t = 0
        ### END SOLUTION

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW step on the fp32 master shard; returns the global gradient norm before clipping."""
        ### BEGIN SOLUTION
        group = self.param_groups[0]
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        grads = []
        for p in self.all_params:  # averaged in fp32
            grad = p.grad.float()
            dist.all_reduce(grad)
            grads.append(grad / self.world_size)
        mine = [grads[i].view(-1)[s:e] for i, s, e in self.owned]
        squares = torch.zeros(1)
        for g in mine:
            squares += (g * g).sum()
        dist.all_reduce(squares)  # the squared norms of every rank's share: the whole gradient's
        norm = squares.sqrt().item()
        scale = min(1.0, self.max_grad_norm / (norm + 1e-6))
        self.t += 1
        for master, m, v, g in zip(self.master, self.m, self.v, mine):
            g = g * scale
            master.mul_(1 - lr * decay)
            m.mul_(beta1).add_(g, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / math.sqrt(1 - beta2 ** self.t)).add_(eps)
            master.addcdiv_(m, denom, value=-lr / (1 - beta1 ** self.t))
        # The bf16 copy is refreshed from the fp32 master: every rank sends its share rounded to bf16.
        outgoing = torch.zeros(self.share, dtype=torch.bfloat16)
        if self.master:
            flat = torch.cat(self.master)
            outgoing[:flat.numel()] = flat
        incoming = [torch.empty_like(outgoing) for _ in range(self.world_size)]
        dist.all_gather(incoming, outgoing)
        for rank, ranges in enumerate(self.shares):
            offset = 0
            for index, start, end in ranges:
                self.all_params[index].view(-1)[start:end] = incoming[rank][offset:offset + end - start]
                offset += end - start
        return norm
        ### END SOLUTION

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None


# %% nbgrader={"grade": true, "grade_id": "test_ex6_mixed_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
mixed_ranks = mixed.mixed_precision(ranks=2)
### BEGIN HIDDEN TESTS
from zerolab.handmade import mixed as _mixed

_mixed.mixed_precision(ranks=3, steps=5, max_grad_norm=0.05,
                       hyper={"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1})
### END HIDDEN TESTS

# %% [markdown]
# What the ranks of the visible test measured; then why the master must be fp32, measured on the model's own
# weights: how many of them keep their value when a step of the test's learning rate, and of a learning rate
# typical of large models, is applied in bf16 and in fp32.

# %% [markdown] lang="zh" en="6c01f74d4c1e"
# 下面是可见测试的各个 rank 实测的结果；然后在模型自己的权重上实测主权重必须是 fp32 的原因：分别以测试所用的学习率和大模型常用的学习率走一步，在 bf16 和 fp32 中各有多少权重保持原值不变。

# %%
from zerolab.handmade import grade, mixed_verdict

print(tr(f"global gradient norm per step (rank 0): {[round(n, 4) for n in mixed_ranks[0]['norms']]}; "
         f"max_grad_norm {mixed.MAX_GRAD_NORM}; the fp32 masters matched the reference to {mixed_verdict.MASTER_ATOL:g}"))
for rank, result in enumerate(mixed_ranks):
    rows = result["traffic"][-1]
    print(tr(f"rank {rank}, last step: " + ", ".join(f"{row['calls']} x {row['op']} ({row['dtype']}, "
                                                     f"{row['elements']} elements)" for row in rows)))
weights = torch.cat([p.detach().reshape(-1) for p in fixed.build().parameters()])
for lr in (grade.DEFAULT_HYPER["lr"], 1e-4):
    step = lr * weights.sign()  # Adam's first step moves every weight by about the learning rate
    in_bf16 = weights.to(torch.bfloat16)
    lost_bf16 = ((in_bf16 - step).to(torch.bfloat16) == in_bf16).float().mean().item()
    lost_fp32 = ((weights - step) == weights).float().mean().item()
    print(tr(f"a step of {lr:g} on every weight of the model: lost for {lost_bf16:.0%} of them in a bf16 master, "
             f"for {lost_fp32:.0%} in an fp32 master"))
