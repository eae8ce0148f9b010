"""The course's ZeRO-2 stand-in for the side-by-side (zerolab.handmade.side_by_side) while a learner has not answered
lesson 08's ZeRO-2 exercise: gradients reduced from post-accumulate-grad hooks a bucket at a time to the ranks
that own them (the flat, padded partition of zerolab.handmade.core.partition), the rest freed; the averaged shard is
left in ``p.grad_shard`` for the course's ZeRO-1 optimizer (zerolab.handmade.zero1.reference). It is the exercise's
solution (autograder/src/08_zero_from_scratch.py, exercise 3), kept here so that the engine has one to run.
"""
import torch
import torch.distributed as dist

from zerolab.handmade.core.partition import flat_partition


class Zero2Gradients:
    def __init__(self, model, bucket_elements):
        self.params = list(model.parameters())
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.shares = flat_partition([p.numel() for p in self.params], self.world_size)
        self.owned = self.shares[self.rank]
        self.bucket = torch.empty(bucket_elements)
        self.waiting = []
        self.used = self.arrived = 0
        for index, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, index=index: self.gradient_arrived(index, p))

    def gradient_arrived(self, index, p):
        grad, p.grad = p.grad.reshape(-1), None
        fits = grad.numel() <= self.bucket.numel()
        if not fits or self.used + grad.numel() > self.bucket.numel():
            self.send_bucket()
        if fits:
            grad = self.bucket[self.used:self.used + grad.numel()].copy_(grad)
            self.used += grad.numel()
        self.waiting.append((index, grad))
        self.arrived += 1
        if not fits or self.arrived == len(self.params):
            self.send_bucket()
        if self.arrived == len(self.params):
            self.arrived = 0

    def send_bucket(self):
        for index, grad in self.waiting:
            for owner, ranges in enumerate(self.shares):
                for i, start, end in ranges:
                    if i == index:
                        dist.reduce(grad[start:end], dst=owner)
            for i, start, end in self.owned:
                if i == index:
                    self.params[index].grad_shard = grad[start:end] / self.world_size
        self.waiting, self.used = [], 0
