# %% [markdown]
# ## 5. ZeRO-3: shard the parameters too
#
# ZeRO-3 keeps, between steps, only this rank's shard of **every parameter**. DeepSpeed 0.19.8 pads each parameter
# on its own to a multiple of the world size N and gives rank r the r-th of N equal pieces
# (`deepspeed/runtime/zero/partition_parameters.py`, `_padding_size` and `partition_size = tensor_size // N`):
# unlike ZeRO-1/2, there is no flat buffer of the whole group. A layer's parameters are all-gathered just before
# its forward, freed after it, all-gathered **again** just before its backward, and freed once their gradients
# are reduce-scattered to their owners. The activations autograd saved in forward are kept: nothing is
# recomputed (that is activation checkpointing, a separate choice). DeepSpeed does all of this from module
# hooks (`deepspeed/runtime/zero/parameter_offload.py`: `_pre_forward_module_hook`, `_post_forward_module_hook`,
# and the pre-backward function it attaches to each module's outputs), and it prefetches the next modules'
# parameters while one computes.

# %% [markdown] lang="zh" en=""
# ## 5. ZeRO-3：把参数也切分
#
# ZeRO-3 在两步之间只保留**每个参数**中属于本 rank 的分片。DeepSpeed 0.19.8 把每个参数单独填充到总进程数 N 的倍数，再把 N 个等长片段中的第 r 个交给 rank r（`deepspeed/runtime/zero/partition_parameters.py` 中的 `_padding_size` 与 `partition_size = tensor_size // N`）：与 ZeRO-1/2 不同，这里没有把整个参数组展平成一个缓冲区。一层的参数在它的前向之前被 all-gather，前向之后释放；在它的反向之前**再次** all-gather，梯度 reduce-scatter 给各自的所有者之后再释放。前向时 autograd 保存的激活值会保留下来：不做任何重算（那是激活检查点，另一种独立的选择）。DeepSpeed 通过模块钩子完成这一切（`deepspeed/runtime/zero/parameter_offload.py`：`_pre_forward_module_hook`、`_post_forward_module_hook`，以及它挂在每个模块输出上的反向前函数），并在一层计算时预取下一批模块的参数。

# %% [markdown]
# ### Exercise 5: `Zero3(model)`
#
# Write a class that wraps a model and installs hooks; the test trains it with `torch.optim.AdamW` on the shards:
#
# ```python
# wrapped = Zero3(model)                          # shards every parameter, frees the whole ones, installs hooks
# optimizer = torch.optim.AdamW(wrapped.shards(), ...)
# loss = loss_fn(wrapped(inputs), targets)        # forward: each layer gathered just before it runs, then freed
# loss.backward()                                 # backward: gathered again; gradients reduce-scattered, averaged
# optimizer.step()                                # steps only this rank's shards
# ```
#
# - `shards()` returns one 1-D leaf tensor per parameter (`model.parameters()` order) that requires grad: rank r's
#   piece of the parameter padded with zeros to a multiple of N. After `backward()` its `.grad` holds the
#   gradient of those elements **averaged** over the ranks.
# - Between uses, a parameter's `.data` is an empty tensor (`torch.empty(0)`); set it back to the gathered values
#   (`p.data = full[:p_numel].view(shape)`) in a forward pre-hook (`register_forward_pre_hook`) and a backward
#   pre-hook (`register_full_backward_pre_hook`). `p.register_post_accumulate_grad_hook` runs once `p.grad` is
#   complete: reduce-scatter it there, then free the full gradient and the gathered parameter.
# - Optional, in the solution: start the next layer's gather early (`async_op=True`, depth 1) and `wait()` on it
#   in that layer's hook.
#
# The tests run your cell on 2 ranks (hidden: 3 ranks, other hyper-parameters) on a six-layer model and measure,
# inside each rank: the parameters after 3 steps against `torch.optim.AdamW` on the full batch; the bytes of
# every tensor alive in the rank at each collective and each layer (at most the rank's shards plus two layers
# gathered); the elements each collective moves (two all-gathers and one reduce-scatter of the parameters per
# step, no all-reduce); and how many Linear forwards run per step (one per layer: nothing recomputed).
# `deepspeed`, `torch.distributed.fsdp` and `zerolab.handmade` are off limits in this cell.

# %% [markdown] lang="zh" en=""
# ### 练习 5：`Zero3(model)`
#
# 写一个类，包装模型并安装钩子；测试会用 `torch.optim.AdamW` 在各分片上训练它：
#
# ```python
# wrapped = Zero3(model)                          # 切分每个参数，释放完整参数，安装钩子
# optimizer = torch.optim.AdamW(wrapped.shards(), ...)
# loss = loss_fn(wrapped(inputs), targets)        # 前向：每层在运行前才 gather，用完释放
# loss.backward()                                 # 反向：再次 gather；梯度 reduce-scatter 并求平均
# optimizer.step()                                # 只更新本 rank 的分片
# ```
#
# - `shards()` 按 `model.parameters()` 的顺序为每个参数返回一个需要梯度的一维叶子张量：参数用零填充到 N 的倍数后，rank r 的那一段。`backward()` 之后，它的 `.grad` 保存这些元素在各 rank 上**平均**后的梯度。
# - 在两次使用之间，参数的 `.data` 是一个空张量（`torch.empty(0)`）；在前向预钩子（`register_forward_pre_hook`）和反向预钩子（`register_full_backward_pre_hook`）中把它设回 gather 得到的值（`p.data = full[:p_numel].view(shape)`）。`p.register_post_accumulate_grad_hook` 在 `p.grad` 完整之后运行：在那里做 reduce-scatter，然后释放完整梯度和 gather 得到的参数。
# - 可选（参考答案里有）：提前启动下一层的 gather（`async_op=True`，深度 1），并在那一层的钩子里对它 `wait()`。
#
# 测试在 2 个 rank 上运行你的单元格（隐藏测试：3 个 rank、其他超参数），模型有六层，并在每个 rank 内部测量：3 步之后的参数与在完整 batch 上运行 `torch.optim.AdamW` 的结果对比；每次集合通信和每一层时 rank 中所有存活张量的字节数（至多为本 rank 的分片加上两层 gather 的参数）；每次集合通信传输的元素数（每步对参数做两次 all-gather、一次 reduce-scatter，不允许 all-reduce）；以及每步运行了多少次 Linear 前向（每层一次：不做重算）。本单元格不得使用 `deepspeed`、`torch.distributed.fsdp` 和 `zerolab.handmade`。

# %% nbgrader={"grade": false, "grade_id": "ex5_zero3", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Zero3:
    """Shard every parameter of `model` over the ranks; gather each layer only while it computes (ZeRO-3)."""

    def __init__(self, model, prefetch=True):
        self.model, self.prefetch = model, prefetch
        ### BEGIN SOLUTION
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.layers = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
        self.shard_of, self.shape_of, self.in_flight = {}, {}, {}
        for p in model.parameters():
            size = -(-p.numel() // self.world_size)
            padded = torch.zeros(size * self.world_size)
            padded[:p.numel()] = p.detach().reshape(-1)
            self.shard_of[p] = torch.nn.Parameter(padded[self.rank * size:(self.rank + 1) * size].clone())
            self.shape_of[p] = p.shape
            p.data = torch.empty(0)
            p.register_post_accumulate_grad_hook(self._reduce_scatter)
        for index, layer in enumerate(self.layers):
            layer.register_forward_pre_hook(lambda module, args, i=index: self._gather(i, +1))
            layer.register_forward_hook(lambda module, args, output: self._free(module))
            layer.register_full_backward_pre_hook(lambda module, grad_output, i=index: self._gather(i, -1))
        ### END SOLUTION

    def __call__(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def shards(self):
        """This rank's shard of every parameter, in model.parameters() order."""
        ### BEGIN SOLUTION
        return [self.shard_of[p] for p in self.model.parameters()]
        ### END SOLUTION

    ### BEGIN SOLUTION
    def _start_gather(self, layer):
        pending = []
        for p in layer.parameters(recurse=False):
            shard = self.shard_of[p].detach()
            full = torch.empty(shard.numel() * self.world_size)
            pending.append((p, full, dist.all_gather_single(full, shard, async_op=True)))
        self.in_flight[layer] = pending

    def _gather(self, index, direction):
        layer = self.layers[index]
        if layer not in self.in_flight:
            self._start_gather(layer)
        for p, full, work in self.in_flight.pop(layer):
            work.wait()
            p.data = full[:self.shape_of[p].numel()].view(self.shape_of[p])
        following = index + direction  # prefetch depth 1: the next layer in this pass
        if self.prefetch and 0 <= following < len(self.layers):
            self._start_gather(self.layers[following])

    def _free(self, layer):
        for p in layer.parameters(recurse=False):
            p.data = torch.empty(0)

    def _reduce_scatter(self, p):
        shard = self.shard_of[p]
        flat = torch.zeros(shard.numel() * self.world_size)
        flat[:p.numel()] = p.grad.reshape(-1)
        p.grad = None
        p.data = torch.empty(0)
        mine = torch.empty_like(shard)
        dist.reduce_scatter_single(mine, flat)
        mine /= self.world_size
        shard.grad = mine if shard.grad is None else shard.grad + mine
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_ex5_zero3", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
zero3_ranks = zero3_grade.zero3(ranks=2)
### BEGIN HIDDEN TESTS
from zerolab.handmade import zero3_grade as _zero3_grade

_zero3_grade.zero3(ranks=3, steps=4, hyper={"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1})
### END HIDDEN TESTS
