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

# %% nbgrader={"grade": false, "grade_id": "ex5_mixed_precision", "locked": false, "schema_version": 3, "solution": true, "task": false}
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


# %% nbgrader={"grade": true, "grade_id": "test_ex5_mixed_precision", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
mixed_ranks = mixed.mixed_precision(ranks=2)
### BEGIN HIDDEN TESTS
from zerolab.handmade import mixed as _mixed

_mixed.mixed_precision(ranks=3, steps=5, max_grad_norm=0.05,
                       hyper={"lr": 2e-2, "betas": [0.8, 0.99], "eps": 3e-3, "weight_decay": 0.1})
### END HIDDEN TESTS
