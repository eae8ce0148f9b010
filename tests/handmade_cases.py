"""Lesson 08's solution cells, and the wrong implementations the graders must name.

Each wrong implementation is the lesson's own solution cell with one realistic mistake written into it (the text
it replaces must be there, so a change to the solution cannot silently turn a case into a correct one).
`expect` is a fragment of the message the test must fail with; every one of them scores 0 on its test cell.
"""
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
LESSON = "08_zero_from_scratch"


def solution_cell(grade_id):
    """The solution cell's code as a learner who solved it would have it (markers removed)."""
    nb = nbformat.read(str(ROOT / "autograder" / "source" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(line for line in cell.source.splitlines() if "### BEGIN SOLUTION" not in line
                     and "### END SOLUTION" not in line)


def mutate(grade_id, old, new):
    text = solution_cell(grade_id)
    assert old in text, f"the solution of {grade_id} changed: {old!r} is gone; update this case"
    return text.replace(old, new)


def mutate_all(grade_id, *pairs):
    text = solution_cell(grade_id)
    for old, new in pairs:
        assert old in text, f"the solution of {grade_id} changed: {old!r} is gone; update this case"
        text = text.replace(old, new)
    return text


PARTITION = "ex1_partition"
ZERO1 = "ex2_sharded_adamw"
ZERO2 = "ex3_zero2_gradients"
CONFIG = "ex4_stage1_config"
ZERO3 = "ex5_zero3"
MIXED = "ex6_mixed_precision"
HIDDEN = {"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1}  # what the hidden tests use

# name: (exercise, how to build the cell, fragment of the message it must get). ZeRO-1 cases run with two parameter
# groups (model.NO_DECAY_ON_BIASES), as the hidden test does; PARTITION cases run in this process, as ex1 does.
WRONG = {
    "partition_returns_none": (PARTITION, lambda: mutate(
        PARTITION, "    return owned", "    owned  # forgot to return it"),
        "returned None"),
    "partition_pads_to_a_multiple_of_n": (PARTITION, lambda: mutate(
        PARTITION, "alignment = 2 * world_size", "alignment = world_size"),
        "padded to a multiple of N"),
    "partition_imports_the_reference": (PARTITION, lambda: (
        "from zerolab.handmade.core.partition import flat_partition as split\n\n\n"
        "def partition(numels, world_size):\n    return split(numels, world_size)\n"),
        "uses the course's reference answer (flat_partition); this exercise scores 0"),
    "partition_reaches_the_reference_through_verdict": (PARTITION, lambda: (
        "def partition(numels, world_size):\n    return getattr(verdict, 'flat_' + 'partition')(numels, world_size)\n"),
        "this exercise scores 0 until partition computes the shares itself"),
    "zero1_no_sharding": (ZERO1, lambda: mutate(
        ZERO1, 'state["t"], state["m"], state["v"] = 0, torch.zeros_like(grad), torch.zeros_like(grad)',
        'state["t"], state["full"] = 0, [torch.zeros_like(p), torch.zeros_like(p)]\n'
        '                    state["m"] = state["full"][0].view(-1)[start:end]\n'
        '                    state["v"] = state["full"][1].view(-1)[start:end]'),
        "Adam's moments are not sharded"),
    "zero1_moments_kept_on_the_parameters": (ZERO1, lambda: mutate_all(
        ZERO1, ('state["t"], state["m"], state["v"] = 0, torch.zeros_like(grad), torch.zeros_like(grad)',
                'state["t"] = 0\n'
                '                    p.exp_avg, p.exp_avg_sq = torch.zeros_like(p), torch.zeros_like(p)'),
        ('t, m, v = state["t"], state["m"], state["v"]',
         't, m, v = state["t"], p.exp_avg.view(-1)[start:end], p.exp_avg_sq.view(-1)[start:end]')),
        "Adam's moments are not sharded"),
    "zero1_updates_not_shared": (ZERO1, lambda: mutate(
        ZERO1, "for rank, ranges in enumerate(shares):", "for rank, ranges in []:"),
        "the updated parameters do not reach every rank"),
    "zero1_gradients_summed": (ZERO1, lambda: mutate(
        ZERO1, "p.grad /= self.world_size", "pass"),
        "summed over the 2 ranks, not averaged"),
    "zero1_owners_differ": (ZERO1, lambda: mutate(  # rank 0 lists the shares in the wrong order
        ZERO1, 'shares = partition([p.numel() for p in group["params"]], self.world_size)',
        'shares = partition([p.numel() for p in group["params"]], self.world_size)\n'
        '            shares = shares[::-1] if self.rank == 0 else shares'),
        "the ranks disagree on who owns what"),
    "zero1_first_group_only": (ZERO1, lambda: mutate(
        ZERO1, 'group["lr"], group["betas"], group["eps"], group["weight_decay"]',
        'self.param_groups[0]["lr"], self.param_groups[0]["betas"], self.param_groups[0]["eps"], '
        'self.param_groups[0]["weight_decay"]'),
        "trained every parameter with the first group's hyper-parameters"),
    "zero1_first_group_partitioned_only": (ZERO1, lambda: mutate(
        ZERO1, "        for group in self.param_groups:\n", "        for group in self.param_groups[:1]:\n"),
        "only self.param_groups[0] is partitioned"),
    "zero1_groups_partitioned_together": (ZERO1, lambda: mutate(  # trains right, but not as DeepSpeed shares out
        ZERO1, 'shares = partition([p.numel() for p in group["params"]], self.world_size)',
        'together = partition([p.numel() for g in self.param_groups for p in g["params"]], self.world_size)\n'
        '            mine = range(first, first + len(group["params"]))\n'
        '            shares = [[(i - first, s, e) for i, s, e in ranges if i in mine] for ranges in together]'),
        "the parameter groups are partitioned together, as one flat list"),
    "zero1_ignores_grad_shard": (ZERO1, lambda: mutate(
        ZERO1, "grad = p.grad.view(-1)[start:end] if p.grad is not None else p.grad_shard",
        "grad = p.grad.view(-1)[start:end]"),
        "(how exercise 3 hands gradients over), rank 0 of 2 raised AttributeError"),
    "zero1_slices_the_grad_shard_again": (ZERO1, lambda: mutate(
        ZERO1, "grad = p.grad.view(-1)[start:end] if p.grad is not None else p.grad_shard",
        "grad = (p.grad if p.grad is not None else p.grad_shard).view(-1)[start:end]"),
        "use its .grad_shard as it is"),
    "zero1_coupled_l2_decay": (ZERO1, lambda: mutate(
        ZERO1, "mine.mul_(1 - lr * decay)", "grad = grad + decay * mine  # Adam's L2 decay"),
        "coupled"),
    "zero1_decays_what_it_does_not_own": (ZERO1, lambda: _decays_whole_parameters(),
        "decay is applied to elements more than once"),
    "zero1_all_gather_buffer_sized_by_ends": (ZERO1, lambda: mutate(  # trains right, sends more than the shares
        ZERO1, "size = max(sum(e - s for _, s, e in ranges) for ranges in shares)",
        "size = max(sum(e for _, s, e in ranges) for ranges in shares)"),
        "traffic: in step 1 rank 0's all-gathers produce"),
    "zero1_calls_zero_redundancy_optimizer": (ZERO1, lambda: (
        "from torch.distributed.optim import ZeroRedundancyOptimizer\n\n\n"
        "class ShardedAdamW(ZeroRedundancyOptimizer):\n"
        "    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):\n"
        "        super().__init__(params, optimizer_class=torch.optim.AdamW, lr=lr, betas=betas, eps=eps,\n"
        "                         weight_decay=weight_decay)\n"),
        "uses torch's ZeroRedundancyOptimizer, which does the sharding for you; this exercise scores 0"),
    "zero1_subclasses_the_reference": (ZERO1, lambda: (
        "class ShardedAdamW(__import__('zerolab.handmade.zero1.reference', fromlist=['_']).ShardedAdamW):\n"
        "    pass\n"),
        "uses the course's own reference implementation"),
    "zero1_calls_deepspeed": (ZERO1, lambda: mutate(
        ZERO1, "@torch.no_grad()", "@torch.no_grad()  # DeepSpeed's would be faster:\n"
        "    def _engine(self):\n        import deepspeed\n        return deepspeed\n\n    @torch.no_grad()"),
        "uses DeepSpeed, which does the sharding for you; this exercise scores 0"),
    "zero1_imports_zero_redundancy_by_a_computed_name": (ZERO1, lambda: mutate(
        ZERO1, "self.world_size, self.rank = dist.get_world_size(), dist.get_rank()",
        "self.world_size, self.rank = dist.get_world_size(), dist.get_rank()\n"
        "        __builtins__['__import__']('torch.distributed.' + 'optim')"),
        "imports torch.distributed.optim"),
}

# Defensible answers that differ from the solution and must get full marks.
RIGHT = {
    "zero1_keeps_its_all_gather_buffers": (ZERO1, lambda: mutate_all(
        ZERO1, ("outgoing = torch.zeros(size)",
                'kept = self.__dict__.setdefault("kept", {})  # persistent communication buffers, per group\n'
                '            outgoing, incoming = kept.setdefault(id(shares), (torch.zeros(size), '
                '[torch.empty(size) for _ in range(self.world_size)]))'),
        ("            incoming = [torch.empty(size) for _ in range(self.world_size)]\n", ""))),
}


def _decays_whole_parameters():
    """Shares updates by summing every rank's change (fine when a rank changes only what it owns), but decays the
    whole of each parameter it owns a part of: a parameter split over two ranks is decayed twice."""
    text = solution_cell(ZERO1)
    start, end = text.index("            # Share the updates"), text.index("    def zero_grad")
    text = text[:start] + (
        "        for q, old in zip(self.all_params, before):\n"
        "            change = q - old\n"
        "            dist.all_reduce(change)\n"
        "            q.copy_(old + change)\n\n") + text[end:]
    for old, new in (("mine.mul_(1 - lr * decay)", "p.mul_(1 - lr * decay)"),
                     ("        for group, shares in self.groups:\n",
                      "        before = [q.detach().clone() for q in self.all_params]\n"
                      "        for group, shares in self.groups:\n")):
        assert old in text, f"the solution of {ZERO1} changed: {old!r} is gone; update this case"
        text = text.replace(old, new, 1)
    return text


REDUCE_TO_OWNERS = """            for owner, ranges in enumerate(self.shares):
                for i, start, end in ranges:
                    if i == index:
                        dist.reduce(grad[start:end], dst=owner)
"""

# name: (how to build the cell, fragment of the message it must get); each scores 0 on the test cell
WRONG_ZERO2 = {
    "all_reduce_then_slice": (lambda: mutate(ZERO2, REDUCE_TO_OWNERS, "            dist.all_reduce(grad)\n"),
                              "traffic: in step 0 rank 0 all-reduces the gradients during backward"),
    "full_gradients_kept": (lambda: mutate(ZERO2, "grad, p.grad = p.grad.reshape(-1), None",
                                           "grad = p.grad.reshape(-1)"),
                            "memory: after backward parameter"),
    "reduced_only_when_backward_ends": (lambda: mutate(  # a bucket as large as the model: one reduction, at the end
        ZERO2, "self.bucket = torch.empty(bucket_elements)",
        "self.bucket = torch.empty(sum(p.numel() for p in self.params))"),
        "memory: during backward rank"),
    "gradients_summed": (lambda: mutate(ZERO2, "grad[start:end] / self.world_size", "grad[start:end].clone()"),
                         "wrong scale: the gradients are summed over the 2 ranks, not averaged"),
    "owners_differ": (lambda: mutate(ZERO2, "self.owned = self.shares[self.rank]",
                                     "self.owned = self.shares[self.rank + 1 if self.rank == 0 else self.rank]"),
                      "the ranks disagree on who owns what"),
    # Right in the first backward only: the hook counter is never reset, so from the second backward on the last
    # bucket is never sent (the grader's optimizer would still train right from the leftover gradients).
    "hook_counter_never_reset": (lambda: mutate(
        ZERO2, "        if self.arrived == len(self.params):  # the last gradient of this backward: ready for the next "
               "one\n            self.arrived = 0\n", ""),
        "missing shard: after the backward of step 1, parameter 0 has no grad_shard"),
    # Sends the bucket when the next gradient would fit, keeps filling it when it would not: right as long as no
    # gradient overfills the bucket (1500 and 700 elements here), wrong with 970 (a bias of 31, then a weight of 961)
    "sends_the_bucket_when_it_is_not_full": (lambda: mutate(
        ZERO2, "self.used + grad.numel() > self.bucket.numel()", "self.used + grad.numel() < self.bucket.numel()"),
        "with bucket_elements=970: rank 0 of 2 raised RuntimeError at line"),
    "imports_the_reference": (lambda: "from zerolab.handmade.zero1.reference import ShardedAdamW\n" + solution_cell(ZERO2),
                              "uses the course's own reference implementation"),
}


MASTER_FP32 = "self.master = [self.all_params[i].detach().view(-1)[s:e].float() for i, s, e in self.owned]"
WRONG_MIXED = {
    "bf16_master_weights": (lambda: mutate(MIXED, MASTER_FP32, MASTER_FP32.replace(".float()", ".clone()")),
                            "bf16 master weights: rank 0 keeps its master shard in bfloat16"),
    "master_rebuilt_from_bf16_each_step": (lambda: mutate(
        MIXED, "        grads = []\n", f"        {MASTER_FP32}\n        grads = []\n"),
        "bf16 master weights: the fp32 master holds no more than the bf16 parameters"),
    "clipping_per_shard": (lambda: mutate(MIXED, "        dist.all_reduce(squares)", "        pass"),
                           "clipping per shard: in step 0 rank 0's norm is the norm of its own share"),
    "gradients_summed_in_bf16": (lambda: mutate(
        MIXED, "            grad = p.grad.float()\n            dist.all_reduce(grad)\n",
        "            grad = p.grad.clone()\n            dist.all_reduce(grad)\n            grad = grad.float()\n"),
        "bf16 reduction: the gradients are summed over the ranks in bf16"),
    "clipping_missing": (lambda: mutate(MIXED, "scale = min(1.0, self.max_grad_norm / (norm + 1e-6))", "scale = 1.0"),
                         "clipping missing: the master moves as if the gradient were never scaled down"),
    "gradients_summed": (lambda: mutate(MIXED, "grads.append(grad / self.world_size)", "grads.append(grad)"),
                         "wrong scale: the gradients are summed over the 2 ranks, not averaged"),
    # Wrong only after the first step: each step is judged from the learner's state before it.
    "moments_reset_every_step": (lambda: mutate(
        MIXED, "        self.t += 1\n", "        self.t += 1\n        self.m = [torch.zeros_like(x) for x in self.master]\n"
                                      "        self.v = [torch.zeros_like(x) for x in self.master]\n"),
        "wrong training: in step 1 the fp32 master moves differently"),
    "bias_correction_stuck_at_step_1": (lambda: mutate(MIXED, "        self.t += 1\n", "        self.t = 1\n"),
                                        "wrong training: in step 1 the fp32 master moves differently"),
    "no_update_after_the_first_step": (lambda: mutate(
        MIXED, "        self.t += 1\n", "        self.t += 1\n        if self.t > 1:\n            return norm\n"),
        "wrong training: in step 1 the fp32 master moves differently"),
    "share_sized_by_ends_plus_starts": (lambda: mutate(  # trains right, all-gathers more than the shares
        MIXED, "self.share = max(sum(end - start for _, start, end in ranges) for ranges in self.shares)",
        "self.share = max(sum(end + start for _, start, end in ranges) for ranges in self.shares)"),
        "traffic: in step 0 rank 0 all-gathers"),
    "bf16_copy_not_refreshed": (lambda: mutate(
        MIXED, "self.all_params[index].view(-1)[start:end] = incoming[rank][offset:offset + end - start]", "pass"),
        "stale parameters: rank 0's bf16 parameters are not its fp32 master rounded to bf16"),
}


DENOMINATOR = "denom = (v.sqrt() / math.sqrt(1 - beta2 ** self.t)).add_(eps)"
SQUARES = """        squares = torch.zeros(1)
        for g in mine:
            squares += (g * g).sum()
"""
# Right answers written otherwise: each differs from the solution by an fp32 ulp here and there, which flips the bf16
# rounding of a weight now and then; a test that compared the runs only after the last step failed some of them.
RIGHT_MIXED = {
    "denominator_as_section_2_prints_it": mutate(MIXED, DENOMINATOR,
                                                 "denom = (v / (1 - beta2 ** self.t)).sqrt().add_(eps)"),
    "norm_with_vector_norm": mutate(MIXED, SQUARES, """        squares = torch.zeros(1)
        if mine:
            squares += torch.linalg.vector_norm(torch.cat(mine)) ** 2
"""),
    "bias_corrected_moments_by_name": mutate(
        MIXED, "            denom = (v.sqrt() / math.sqrt(1 - beta2 ** self.t)).add_(eps)\n"
               "            master.addcdiv_(m, denom, value=-lr / (1 - beta1 ** self.t))",
        "            m_hat = m / (1 - beta1 ** self.t)\n"
        "            v_hat = v / (1 - beta2 ** self.t)\n"
        "            master -= lr * m_hat / (v_hat.sqrt() + eps)"),
}


# name: (how to build the cell, fragment of the message it must get)
WRONG_ZERO3 = {
    "gathered_parameters_never_freed": (lambda: mutate(ZERO3, 
        "    def _free(self, layer):\n        for p in layer.parameters(recurse=False):\n"
        "            p.data = torch.empty(0)",
        "    def _free(self, layer):\n        pass"),
        "gathered parameters are not freed after use"),
    "forward_recomputed_in_backward": (lambda: mutate(ZERO3,   # activation checkpointing of every layer
        "        for index, layer in enumerate(self.layers):\n",
        "        import torch.utils.checkpoint as checkpointing\n"
        "        for layer in self.layers:\n"
        "            layer.forward = (lambda f: lambda *a: checkpointing.checkpoint(f, *a, use_reentrant=False))"
        "(layer.forward)\n"
        "        for index, layer in enumerate(self.layers):\n"),
        "recomputation: one step ran 12 Linear forwards for 6 layers"),
    "all_reduce_then_slice": (lambda: mutate(ZERO3, 
        "        mine = torch.empty_like(shard)\n        dist.reduce_scatter_single(mine, flat)",
        "        dist.all_reduce(flat)\n"
        "        mine = flat[self.rank * shard.numel():(self.rank + 1) * shard.numel()].clone()"),
        "the full gradients are all-reduced"),
    "gradients_summed": (lambda: mutate(ZERO3, "        mine /= self.world_size\n", ""),
                         "summed over the 2 ranks, not averaged"),
    "ranks_disagree_on_owners": (lambda: mutate(ZERO3, 
        "padded[self.rank * size:(self.rank + 1) * size]",
        "padded[(self.world_size - 1 - self.rank) * size:(self.world_size - self.rank) * size]"),
        "wrong owners: rank 0's shard of parameter 0"),
    "full_gradients_kept": (lambda: mutate(ZERO3, "        p.grad = None\n", ""),
                            "still holds its full .grad"),
    "padded_as_one_flat_buffer": (lambda: mutate(ZERO3,   # ZeRO-1/2's flat padding instead of per parameter
        "size = -(-p.numel() // self.world_size)",
        "size = p.numel() // self.world_size + 1"),
        "wrong size: rank 0's shard of parameter 0 has"),
    # Right with one backward() per step; with two, the second's gradient replaces the first's.
    "gradient_overwritten_not_accumulated": (lambda: mutate(ZERO3, 
        "shard.grad = mine if shard.grad is None else shard.grad + mine", "shard.grad = mine"),
        "gradient accumulation: with two backward() calls before each step"),
    # The prefetched all-gather read without waiting: a race that gloo usually won; the probe delivers at wait()
    "prefetch_read_without_wait": (lambda: mutate(ZERO3, "            work.wait()\n", ""),
                                   "async without wait(): in step 0 rank 0 started"),
    "calls_fully_shard": (lambda: "from torch.distributed.fsdp import fully_shard\n\n\n" + solution_cell(ZERO3),
                          "uses torch's FSDP, which does the sharding for you; this exercise scores 0"),
}


# More answers, for the validation report (zerolab.grading.variants reads VALIDATION): mistakes and right answers in
# other styles than the solution, each graded only by the exercise's test cell.
PARTITION_OTHER_STYLES = {
    "wrong": {
        "ranges_in_flat_offsets": mutate(  # (index, start, end) with start/end counted in the flat buffer
            PARTITION, "ranges.append((index, start - first, end - first))", "ranges.append((index, start, end))"),
        "each_parameter_split_evenly": '''def partition(numels, world_size):
    owned = [[] for _ in range(world_size)]
    for index, numel in enumerate(numels):
        piece = -(-numel // world_size)
        for rank in range(world_size):
            start, end = rank * piece, min(numel, (rank + 1) * piece)
            if start < end:
                owned[rank].append((index, start, end))
    return owned
''',
    },
    "right": {
        "ranges_from_cumulative_starts": '''import math


def partition(numels, world_size):
    total = sum(numels)
    per_rank = math.ceil(total / (2 * world_size)) * 2 * world_size // world_size
    starts = [sum(numels[:i]) for i in range(len(numels))]
    result = []
    for r in range(world_size):
        lo, hi = r * per_rank, (r + 1) * per_rank
        mine = []
        for i, (first, n) in enumerate(zip(starts, numels)):
            a, b = max(lo, first), min(hi, first + n)
            if a < b:
                mine.append((i, a - first, b - first))
        result.append(mine)
    return result
''',
        "a_cursor_walks_the_parameters": '''def partition(numels, world_size):
    unit = 2 * world_size
    share = (sum(numels) + unit - 1) // unit * unit // world_size
    owned = [[] for _ in range(world_size)]
    offset = 0
    for index, numel in enumerate(numels):
        pos = 0
        while pos < numel:
            rank = (offset + pos) // share
            take = min((rank + 1) * share - (offset + pos), numel - pos)
            owned[rank].append((index, pos, pos + take))
            pos += take
        offset += numel
    return owned
''',
    },
}

ZERO1_BIAS_CORRECTED_BY_NAME = mutate(
    ZERO1, "                denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(eps)\n"
           "                mine.addcdiv_(m, denom, value=-lr / (1 - beta1 ** t))",
    "                m_hat = m / (1 - beta1 ** t)\n"
    "                v_hat = v / (1 - beta2 ** t)\n"
    "                mine -= lr * m_hat / (v_hat.sqrt() + eps)")

ZERO2_OTHER_STYLES = {
    "async_reduces_waited_together": mutate(
        ZERO2, '''        for index, grad in self.waiting:
            for owner, ranges in enumerate(self.shares):
                for i, start, end in ranges:
                    if i == index:
                        dist.reduce(grad[start:end], dst=owner)
            for i, start, end in self.owned:''', '''        works = [dist.reduce(grad[start:end], dst=owner, async_op=True)
                 for index, grad in self.waiting
                 for owner, ranges in enumerate(self.shares)
                 for i, start, end in ranges if i == index]
        for work in works:
            work.wait()
        for index, grad in self.waiting:
            for i, start, end in self.owned:'''),
    "owners_looked_up_in_a_dict": mutate_all(
        ZERO2, ("        self.owned = self.shares[self.rank]\n",
                "        self.owned = self.shares[self.rank]\n"
                "        self.pieces = {}\n"
                "        for owner, ranges in enumerate(self.shares):\n"
                "            for i, start, end in ranges:\n"
                "                self.pieces.setdefault(i, []).append((owner, start, end))\n"),
        (REDUCE_TO_OWNERS, "            for owner, start, end in self.pieces.get(index, []):\n"
                           "                dist.reduce(grad[start:end], dst=owner)\n")),
}

CONFIG_OTHER_STYLES = {
    "wrong": {
        "clipping_left_out": "\n".join(line for line in solution_cell(CONFIG).splitlines()
                                       if "gradient_clipping" not in line),
        "clipping_at_one": mutate(CONFIG, '"gradient_clipping": 0.0', '"gradient_clipping": 1.0'),
        "learning_rate_typed_in": mutate(CONFIG, '"lr": hyper["lr"]', '"lr": 1e-3'),
        "betas_left_to_the_default": mutate(CONFIG, '"betas": list(hyper["betas"]), ', ""),
        "misspelt_top_level_key": mutate(CONFIG, '"gradient_clipping": 0.0', '"gradient_cliping": 0.0'),
        "micro_batch_is_the_global_batch": mutate(CONFIG, '"train_micro_batch_size_per_gpu": global_batch // world_size',
                                                  '"train_micro_batch_size_per_gpu": global_batch'),
    },
    "right": {
        "micro_batch_derived_by_deepspeed": '''def stage1_config(hyper, global_batch, world_size):
    return {"train_batch_size": global_batch, "gradient_accumulation_steps": 2,
            "optimizer": {"type": "AdamW", "params": dict(hyper, torch_adam=True)},
            "zero_optimization": {"stage": 1}, "gradient_clipping": 0}
''',
        "adam_in_adamw_mode": '''def stage1_config(hyper, global_batch, world_size):
    params = {key: hyper[key] for key in ("lr", "eps", "weight_decay")}
    params.update(betas=list(hyper["betas"]), adam_w_mode=True, torch_adam=True)
    return {"train_batch_size": global_batch,
            "train_micro_batch_size_per_gpu": global_batch // world_size,
            "optimizer": {"type": "Adam", "params": params},
            "zero_optimization": {"stage": 1},
            "gradient_clipping": 0.0}
''',
    },
}

ZERO3_OTHER_STYLES = {
    "gradient_accumulated_in_place": mutate(
        ZERO3, "        shard.grad = mine if shard.grad is None else shard.grad + mine",
        "        if shard.grad is None:\n            shard.grad = mine\n        else:\n            shard.grad += mine"),
    "averaged_before_the_reduce_scatter": mutate_all(
        ZERO3, ("        flat[:p.numel()] = p.grad.reshape(-1)\n",
                "        flat[:p.numel()] = p.grad.reshape(-1) / self.world_size\n"),
        ("        mine /= self.world_size\n", "")),
}


def _built(cases, exercise=None):
    """{name: cell text} of a case table (a case builds its text lazily, and may name its exercise first)."""
    built = {}
    for name, case in cases.items():
        if exercise is not None:
            if case[0] != exercise:
                continue
            case = case[1:]
        build = case[0] if isinstance(case, tuple) else case
        built[name] = build() if callable(build) else build
    return built


# {grade_id: {"wrong": {name: cell}, "right": {name: cell}}}: every hand-written answer of this lesson, in the
# validation report of lesson 08 (zerolab.grading.variants.LESSON_HANDWRITTEN)
VALIDATION = {
    PARTITION: {"wrong": {**_built(WRONG, PARTITION), **PARTITION_OTHER_STYLES["wrong"]},
                "right": PARTITION_OTHER_STYLES["right"]},
    ZERO1: {"wrong": _built(WRONG, ZERO1),
            "right": {**_built(RIGHT, ZERO1), "bias_corrected_moments_by_name": ZERO1_BIAS_CORRECTED_BY_NAME}},
    ZERO2: {"wrong": _built(WRONG_ZERO2), "right": ZERO2_OTHER_STYLES},
    CONFIG: CONFIG_OTHER_STYLES,
    ZERO3: {"wrong": _built(WRONG_ZERO3), "right": ZERO3_OTHER_STYLES},
    MIXED: {"wrong": _built(WRONG_MIXED), "right": RIGHT_MIXED},
}
