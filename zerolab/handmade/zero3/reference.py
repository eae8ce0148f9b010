"""The course's own ZeRO-3 (the answer to lesson 08's ZeRO-3 exercise, kept for the side-by-side).

Learners who import it are told to write their own (zerolab.lesson.source forbids zerolab.handmade).
"""
import torch
import torch.distributed as dist


class Zero3:
    """Shard every parameter of ``model`` over the ranks; gather a layer only while it computes (ZeRO-3).

    Each parameter is padded to a multiple of N and rank r keeps elements [r*s, (r+1)*s) as a 1-D leaf tensor
    (``shards()``, what the optimizer steps). A layer's parameters are all-gathered in its forward pre-hook and
    freed after its forward, gathered again in its backward pre-hook and freed once their gradient is
    reduce-scattered. The saved activations are kept: nothing is recomputed. With ``prefetch`` the next layer's
    gather (depth 1) is started with ``async_op=True`` while this one computes.
    """

    def __init__(self, model, prefetch=True):
        self.model, self.prefetch = model, prefetch
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

    def __call__(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def shards(self):
        """This rank's shard of every parameter, in model.parameters() order."""
        return [self.shard_of[p] for p in self.model.parameters()]

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
        following = index + direction
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
