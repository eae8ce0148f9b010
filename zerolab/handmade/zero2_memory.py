"""The peak of gradient memory in a rank during backward, from every tensor alive in the process.

At each sample the sampler takes every tensor object alive in the process (zerolab.handmade.live: the garbage
collector's list, so a gradient kept in a list, a closure or an attribute of the parameter is found wherever the
learner put it), adds each parameter's ``.grad``, and counts each storage once. It leaves out what is not gradient
memory: the parameters' storages, every storage already alive when the sampler was made (a live.Baseline: the
grader's model, data and imports), the tensors the grader names with :meth:`ignore` (its batch and loss), and
activations: tensors with a ``grad_fn``, whose Python objects torch keeps while autograd holds them. Tensors that
only autograd holds without a Python object (the gradients flowing between layers) are not found either: they
are the same for every implementation. A storage is counted whole: a small view keeps its whole buffer alive.
Sampling does not run the garbage collector: what the learner dropped is freed at once by reference counting.
"""
from zerolab.handmade import live


def _key(tensor):
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class GradientMemory:
    """Samples the bytes of gradient memory a rank holds; ``peak`` is the largest sample, ``where`` its place."""

    def __init__(self, params):
        self.params = list(params)
        self._baseline = live.Baseline()  # holds its tensors: their addresses cannot be reused by a new one
        self._skip = self._baseline.keys | {_key(p) for p in self.params}
        self._ignored = []
        self.active, self.step = False, 0
        self.peak, self.where, self.samples = 0, None, 0

    def ignore(self, *tensors):
        self._ignored = list(tensors)

    def sample(self, where):
        if not self.active:
            return
        skip = self._skip | {_key(t) for t in self._ignored}
        seen, total = set(), 0
        for tensor in live.live_tensors() + [p.grad for p in self.params if p.grad is not None]:
            if tensor.grad_fn is not None or tensor.device.type == "meta":
                continue  # an activation in the autograd graph
            key = _key(tensor)
            if key in skip or key in seen or key[1] == 0:
                continue
            seen.add(key)
            total += key[1]
        self.samples += 1
        if total > self.peak:
            self.peak, self.where = total, f"in step {self.step}, {where}"
