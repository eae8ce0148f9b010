# %% [markdown]
# ## 5. ZeRO-3: shard the parameters too
#
# ZeRO-3 keeps, between steps, only this rank's shard of **every parameter**. DeepSpeed 0.19.8 pads each parameter
# on its own to a multiple of the world size N and gives rank r the r-th of N equal pieces
# (`deepspeed/runtime/zero/partition_parameters.py`: `_padding_size`, and
# `partition_size = tensor_size // self._partition_world_size(param)`):
# unlike ZeRO-1/2, there is no flat buffer of the whole group. A layer's parameters are all-gathered just before
# its forward, freed after it, all-gathered **again** just before its backward, and freed once their gradients
# are reduce-scattered to their owners. The activations autograd saved in forward are kept: nothing is
# recomputed (that is activation checkpointing, a separate choice). DeepSpeed does all of this from module
# hooks (`deepspeed/runtime/zero/parameter_offload.py`: `_pre_forward_module_hook`, `_post_forward_module_hook`,
# and `_pre_backward_module_hook`, which attaches `PreBackwardFunctionForModule` to each module's outputs), and
# it prefetches the next modules' parameters while one computes.

# %% [markdown] lang="zh" en="e90368b7355e"
# ## 5. ZeRO-3：把参数也切分
#
# ZeRO-3 在两步之间只保留**每个参数**中属于本 rank 的分片。DeepSpeed 0.19.8 把每个参数单独填充到总进程数 N 的倍数，再把 N 个等长片段中的第 r 个交给 rank r（`deepspeed/runtime/zero/partition_parameters.py`：`_padding_size`，以及 `partition_size = tensor_size // self._partition_world_size(param)`）：与 ZeRO-1/2 不同，这里没有把整个参数组展平成一个缓冲区。一层的参数在它的前向之前被 all-gather，前向之后释放；在它的反向之前**再次** all-gather，梯度 reduce-scatter 给各自的所有者之后再释放。前向时 autograd 保存的激活值会保留下来：不做任何重算（那是激活检查点，另一种独立的选择）。DeepSpeed 通过模块钩子完成这一切（`deepspeed/runtime/zero/parameter_offload.py`：`_pre_forward_module_hook`、`_post_forward_module_hook`，以及把 `PreBackwardFunctionForModule` 挂到每个模块输出上的 `_pre_backward_module_hook`），并在一层计算时预取下一批模块的参数。

# %% nbgrader={"grade": false, "grade_id": "imports_zero3", "locked": true, "schema_version": 3, "solution": false, "task": false}
import os

from zerolab import plots
from zerolab.handmade import compare, zero3_grade, zero3_verdict
from zerolab.i18n import tr

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

# %% [markdown] lang="zh" en="3d55b5627493"
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

# %% [markdown]
# Your `Zero3` trains like AdamW. Below is what the grader measured inside rank 0 during the visible test: the
# elements each collective moved in one step, in units of Ψ (the model's parameter count), and the most parameter
# bytes alive at once, against the rank's shards and the whole model. The limit the test used is the shards plus
# two layers gathered (the one computing and the one prefetched) plus a small slack for autograd's gradients of
# the activations.

# %% [markdown] lang="zh" en="3c2058490a80"
# 你的 `Zero3` 的训练结果与 AdamW 一致。下面是评分程序在可见测试中于 rank 0 内部测得的数据：一步中每种集合通信传输的元素数，以 Ψ（模型参数个数）为单位；以及同一时刻存活的参数字节数的最大值，并与该 rank 的分片和整个模型对比。测试所用的上限是：分片，加上两层 gather 得到的参数（正在计算的一层和预取的一层），再加上一点余量，留给 autograd 为激活值计算的梯度。

# %%
if "zero3_ranks" not in globals():
    print(tr("answer exercise 5 first: this cell shows what its test measured"))
else:
    _sizes = zero3_verdict.layout(len(zero3_ranks))
    _first = zero3_ranks[0]
    for _op, _entry in _first["steps"][-1]["collectives"].items():
        print(tr(f"{_op:16s} {_entry['calls']:3d} calls {_entry['elements']:7d} elements = {_entry['elements'] / _sizes['psi']:.3f} Ψ"))
    _peak = max(s["peak_param_bytes"] for s in _first["steps"] if s["peak_param_bytes"] is not None)
    print(tr(f"most parameter bytes alive at once: {_peak - _first['baseline_bytes']} (at a {_first['steps'][0]['peak_at']}); "
             f"this rank's shards: {_sizes['shard_bytes']}; largest layer gathered: {_sizes['layer_bytes']}; "
             f"whole model: {_sizes['all_bytes']}; limit used by the test: {zero3_verdict.memory_limit(len(zero3_ranks))}"))

# %% [markdown]
# Each parameter was gathered twice and its gradient reduce-scattered once: 3Ψ, a little more because every
# parameter is padded on its own. **Prefetch.** Your `Zero3` starts the next layer's all-gather with
# `async_op=True` before the current layer computes, and waits for it only in that layer's hook. The cell below
# trains it twice on 2 ranks, with and without prefetch, and prints the most parameter bytes alive at once and
# the time of an unsampled step. On these CPU ranks the gathers are tiny, so the time barely changes; the memory
# cost of prefetching (one more layer gathered) is what you can see. On GPUs the all-gathers of big layers take
# milliseconds, and hiding them behind compute is the point. It runs your cell (the course's when yours is not
# answered yet) and is skipped while the notebook is graded.

# %% [markdown] lang="zh" en="76bdd12b3d3c"
# 每个参数被 gather 了两次，梯度被 reduce-scatter 了一次：3Ψ，略多一点，因为每个参数都单独做了填充。**预取。** 你的 `Zero3` 在当前层计算之前就用 `async_op=True` 启动下一层的 all-gather，直到那一层的钩子里才等待它完成。下面的单元格在 2 个 rank 上分别开启和关闭预取各训练一次，打印同一时刻存活的参数字节数的最大值，以及一个未采样步骤的耗时。在这些 CPU rank 上 gather 的数据量很小，所以耗时几乎不变；能看到的是预取的内存代价（多 gather 一层）。在 GPU 上，大层的 all-gather 需要数毫秒，把它们藏在计算后面才是预取的意义。它运行你的单元格（你还没作答时运行课程的答案），并在评分时跳过。

# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("skipped while grading"))
else:
    _answered = "zero3_ranks" in globals()
    for _prefetch in (False, True):
        try:
            _runs = zero3_grade.run(2, steps=5, prefetch=_prefetch, reference=not _answered)
        except AssertionError as _error:  # your Zero3 changed since its test passed: say so, go on
            print(_error)
            break
        _peak = max(s["peak_param_bytes"] for s in _runs[0]["steps"] if s["peak_param_bytes"] is not None)
        print(tr(f"prefetch {_prefetch!s:5s}: most parameter bytes alive at once {_peak - _runs[0]['baseline_bytes']}, "
                 f"unsampled step {1000 * min(_runs[0]['seconds'][2:]):.1f} ms ({tr('yours') if _answered else tr('the course')})"))

# %% [markdown]
# ## 6. Side by side: yours, DeepSpeed's and PyTorch's
#
# The same six-layer model, data, AdamW hyper-parameters and 2 ranks, trained by your ZeRO-1, ZeRO-2 and ZeRO-3
# (the course's answer stands in for an exercise you have not answered: the column "whose" says which), by
# DeepSpeed 0.19.8 at stages 1, 2 and 3 (fp32, torch's AdamW), and by PyTorch's FSDP2 (`fully_shard` on each
# layer and the model). Everything is measured inside rank 0 by `zerolab.handmade.compare`: bytes from each
# system's own tensors, each memory range once; the peaks sampled at every collective and every gradient hook;
# the elements each collective moved in the last step, counted at `torch.distributed`. DeepSpeed's reduce and
# all-gather buckets are set to the bucket size of your ZeRO-2, and its stage 3 keeps no parameter whole
# (`stage3_param_persistence_threshold` 0: its default, printed below, exceeds every parameter of this model).
# It starts DeepSpeed four times, so it takes a while; it is skipped while the notebook is graded.

# %% [markdown] lang="zh" en="32463d31c833"
# ## 6. 并排对比：你的、DeepSpeed 的和 PyTorch 的
#
# 同一个六层模型、同样的数据、同样的 AdamW 超参数、同样 2 个 rank，分别由你的 ZeRO-1、ZeRO-2 和 ZeRO-3 训练（你还没作答的练习由课程的答案代替："whose" 一列标明是谁的）、由 DeepSpeed 0.19.8 的 stage 1、2、3 训练（fp32，torch 的 AdamW），以及由 PyTorch 的 FSDP2 训练（对每一层和整个模型调用 `fully_shard`）。所有数据都由 `zerolab.handmade.compare` 在 rank 0 内部测得：字节数来自各系统自己的张量，每段内存只计一次；峰值在每次集合通信和每个梯度钩子处采样；每种集合通信在最后一步中传输的元素数，在 `torch.distributed` 处计数。DeepSpeed 的 reduce 与 all-gather 桶大小设为你的 ZeRO-2 的桶大小，它的 stage 3 不让任何参数保持完整（`stage3_param_persistence_threshold` 设为 0：它的默认值打印在下面，比这个模型的每个参数都大）。它要启动四次 DeepSpeed，所以需要一些时间；评分时跳过。

# %%
if os.environ.get("NBGRADER_EXECUTION"):
    print(tr("skipped while grading"))
else:
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    _defaults = DeepSpeedZeroConfig()
    print(tr(f"DeepSpeed's stage-3 defaults: stage3_param_persistence_threshold {_defaults.param_persistence_threshold:g}, "
             f"stage3_max_live_parameters {_defaults.max_live_parameters:g}, "
             f"stage3_max_reuse_distance {_defaults.max_reuse_distance:g}, "
             f"stage3_prefetch_bucket_size {_defaults.prefetch_bucket_size:g} elements; largest parameter here: "
             f"{max(p.numel() for p in compare.deep.build().parameters())}"))
    try:
        side_by_side = compare.side_by_side(ranks=2)
    except AssertionError as _error:  # the ranks failed (one of your cells on one rank only?): say so, go on
        print(_error)
    else:
        print(compare.table_text(side_by_side))
        plots.show(plots.side_by_side(compare.rows(side_by_side)))

# %% [markdown]
# Reading the table, from DeepSpeed 0.19.8's code:
#
# - **Same numbers.** Every row reaches the same loss: all of them are AdamW on the full batch, sharded.
# - **Traffic.** "moved per step" counts the elements of each collective (an all-reduce of Ψ elements counts Ψ);
#   "volume" is the ZeRO paper's accounting of lesson 03, where an all-reduce counts twice (a reduce-scatter plus
#   an all-gather). Your ZeRO-1 all-reduces full gradients in `step()`; DeepSpeed's stages 1 and 2 both
#   all-reduce gradient *buckets* (`average_tensor` in `stage_1_and_2.py`: `use_multi_rank_bucket_allreduce` is
#   true by default). Then all three all-gather the updated parameters: 3Ψ of volume, 1.5 times DDP's all-reduce;
#   the paper's 2Ψ for ZeRO-1/2 needs a reduce-scatter (or your ZeRO-2's reduce to each owner). ZeRO-3 gathers
#   twice and reduce-scatters once: 3Ψ.
# - **Gradients during backward.** Your ZeRO-1 keeps every full gradient until `step()`. DeepSpeed's stages 1
#   and 2 both end backward holding only their gradient partition (the "gradients" column), but stage 1 peaks
#   higher during backward: stage 2 (`partition_gradients`) frees what it does not own as each bucket is
#   reduced. Your ZeRO-2's peak is its share plus its bucket.
# - **Alignment.** DeepSpeed's stages 1 and 2 all-reduce a flat buffer padded to a multiple of 2N
#   (`nccl_start_alignment_factor = 2`): a few elements more than Ψ. ZeRO-3 (yours and DeepSpeed's) pads each
#   parameter to a multiple of N; FSDP2 pads dim 0 of each parameter to a multiple of N rows (`torch.chunk`),
#   more padding for wide rows.
# - **fp32 master copy.** DeepSpeed keeps an fp32 master partition beside the parameters even when training in
#   fp32, at every stage (the "fp32 master" column); yours and FSDP2 step the parameters' own shards.
# - **Stage 3 and reuse.** With its defaults DeepSpeed's stage 3 does not free a parameter that will be used
#   again within `stage3_max_reuse_distance` elements, or that the prefetcher already fetched for a later use
#   (`partitioned_param_coordinator.py`, `__params_to_release`), and gathers ahead as long as fewer than
#   `stage3_max_live_parameters` elements are gathered. On a model this small that means every parameter stays
#   gathered from forward to backward: one all-gather of Ψ per step, and the whole model at the peak. With both
#   set to 0 it gathers twice, as yours does, and its peak matches yours.
# - **Prefetch.** DeepSpeed prefetches along the order of modules it recorded in the first step, up to
#   `stage3_prefetch_bucket_size` elements; yours prefetches one layer; FSDP2 prefetches the next layer in
#   backward by default (`set_modules_to_backward_prefetch` changes it) and in forward when told
#   (`set_modules_to_forward_prefetch`).

# %% [markdown] lang="zh" en="fb8b0ab1b05a"
# 对照 DeepSpeed 0.19.8 的代码来读这张表：
#
# - **数值相同。** 每一行都得到相同的损失：它们都是在完整 batch 上做 AdamW，只是做了切分。
# - **通信量。** "moved per step" 统计每种集合通信的元素数（对 Ψ 个元素做一次 all-reduce 计为 Ψ）；"volume" 是第 03 课中 ZeRO 论文的口径，其中 all-reduce 计两次（一次 reduce-scatter 加一次 all-gather）。你的 ZeRO-1 在 `step()` 中 all-reduce 完整梯度；DeepSpeed 的 stage 1 和 stage 2 都对梯度*桶*做 all-reduce（`stage_1_and_2.py` 中的 `average_tensor`：`use_multi_rank_bucket_allreduce` 默认为 true）。之后三者都 all-gather 更新后的参数：通信量为 3Ψ，是 DDP 的 all-reduce 的 1.5 倍；论文中 ZeRO-1/2 的 2Ψ 需要 reduce-scatter（或者像你的 ZeRO-2 那样 reduce 到各个所有者）。ZeRO-3 gather 两次、reduce-scatter 一次：3Ψ。
# - **反向传播期间的梯度。** 你的 ZeRO-1 在 `step()` 之前一直保留全部完整梯度。DeepSpeed 的 stage 1 和 stage 2 在反向结束时都只持有自己那部分梯度（"gradients" 一列），但 stage 1 在反向期间的峰值更高：stage 2（`partition_gradients`）在每个桶规约之后就释放不属于自己的梯度。你的 ZeRO-2 的峰值是它的分片加上它的桶。
# - **对齐。** DeepSpeed 的 stage 1 和 stage 2 all-reduce 的是一个填充到 2N 倍数的展平缓冲区（`nccl_start_alignment_factor = 2`）：比 Ψ 多几个元素。ZeRO-3（你的和 DeepSpeed 的）把每个参数填充到 N 的倍数；FSDP2 把每个参数的第 0 维填充到 N 行的倍数（`torch.chunk`），行越宽，填充越多。
# - **fp32 主权重。** 即使用 fp32 训练，DeepSpeed 在每个 stage 都会在参数之外再保留一份 fp32 主权重分片（"fp32 master" 一列）；你的实现和 FSDP2 直接更新参数自己的分片。
# - **Stage 3 与复用。** 在默认设置下，DeepSpeed 的 stage 3 不会释放在 `stage3_max_reuse_distance` 个元素之内还会再用到的参数，也不会释放预取器已经为后面的使用取来的参数（`partitioned_param_coordinator.py` 中的 `__params_to_release`），并且只要已 gather 的元素少于 `stage3_max_live_parameters` 就继续提前 gather。对这么小的模型来说，这意味着每个参数从前向到反向一直保持 gather 状态：每步只 all-gather 一次 Ψ，峰值时整个模型都在内存里。把这两项都设为 0，它就像你的实现一样 gather 两次，峰值也与你的一致。
# - **预取。** DeepSpeed 沿着第一步记录下来的模块顺序预取，最多 `stage3_prefetch_bucket_size` 个元素；你的实现预取一层；FSDP2 在反向中默认预取下一层（可用 `set_modules_to_backward_prefetch` 修改），在前向中只有被告知时才预取（`set_modules_to_forward_prefetch`）。
