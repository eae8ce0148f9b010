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
