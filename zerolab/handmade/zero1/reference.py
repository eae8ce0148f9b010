"""The course's own ZeRO-1 optimizer (the answer to lesson 08's exercise 2, kept for the graders).

Exercise 3's test trains the learner's sharded gradients with it, so that exercise earns its points whether or
not exercise 2 is solved. Learners who import it are told to write their own (zerolab.lesson.source).
"""
import math

import torch
import torch.distributed as dist

from zerolab.handmade.core.partition import flat_partition, share_size


class ShardedAdamW(torch.optim.Optimizer):
    """AdamW whose moments live only on the rank that owns each element; updated elements are all-gathered.

    Each parameter group is flattened and partitioned on its own, as DeepSpeed does, and stepped with its own
    hyper-parameters. ``owned`` lists (param_index, start, end) with param_index counting the parameters of all
    groups in order. Gradients: a parameter with a full .grad is averaged over the ranks here (ZeRO-1); one whose
    .grad is None but carries .grad_shard (the averaged gradient of this rank's range, left by sharded gradients:
    ZeRO-2) is used as it is.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.flat_params = [p for group in self.param_groups for p in group["params"]]
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.group_shares, self.owned, first = [], [], 0
        for group in self.param_groups:
            shares = flat_partition([p.numel() for p in group["params"]], self.world_size)
            shares = [[(first + i, s, e) for i, s, e in ranges] for ranges in shares]
            self.group_shares.append(shares)
            self.owned += shares[self.rank]
            first += len(group["params"])

    @torch.no_grad()
    def step(self, closure=None):
        for p in self.flat_params:
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(self.world_size)
        for group, shares in zip(self.param_groups, self.group_shares):
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for index, start, end in shares[self.rank]:
                p = self.flat_params[index]
                grad = p.grad.reshape(-1)[start:end] if p.grad is not None else p.grad_shard
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(grad), exp_avg_sq=torch.zeros_like(grad))
                state["step"] += 1
                mine = p.data.view(-1)[start:end]
                mine.mul_(1 - lr * decay)
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** state["step"])).add_(eps)
                mine.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - beta1 ** state["step"]))
            self._share_updates(group, shares)

    def _share_updates(self, group, shares):
        size = share_size(sum(p.numel() for p in group["params"]), self.world_size)
        mine = torch.zeros(size)
        owned = shares[self.rank]
        if owned:
            mine[:_length(owned)] = torch.cat([self.flat_params[i].data.view(-1)[s:e] for i, s, e in owned])
        gathered = [torch.empty(size) for _ in range(self.world_size)]
        dist.all_gather(gathered, mine)
        for rank, ranges in enumerate(shares):
            offset = 0
            for index, start, end in ranges:
                self.flat_params[index].data.view(-1)[start:end] = gathered[rank][offset:offset + end - start]
                offset += end - start

    def zero_grad(self, set_to_none=True):
        super().zero_grad(set_to_none=True)
        for p in self.flat_params:
            p.grad_shard = None


def _length(ranges):
    return sum(end - start for _, start, end in ranges)
