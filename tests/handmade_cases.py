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
        "from zerolab.handmade.partition import flat_partition as split\n\n\n"
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
    "zero1_calls_zero_redundancy_optimizer": (ZERO1, lambda: (
        "from torch.distributed.optim import ZeroRedundancyOptimizer\n\n\n"
        "class ShardedAdamW(ZeroRedundancyOptimizer):\n"
        "    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):\n"
        "        super().__init__(params, optimizer_class=torch.optim.AdamW, lr=lr, betas=betas, eps=eps,\n"
        "                         weight_decay=weight_decay)\n"),
        "uses torch's ZeroRedundancyOptimizer, which does the sharding for you; this exercise scores 0"),
    "zero1_subclasses_the_reference": (ZERO1, lambda: (
        "class ShardedAdamW(__import__('zerolab.handmade.sharded', fromlist=['_']).ShardedAdamW):\n"
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
