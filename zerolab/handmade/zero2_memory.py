"""The peak of gradient memory in a rank during backward, from every tensor alive in the process.

At each sample the sampler finds every tensor object alive in the process (the garbage collector's list, so a
gradient kept in a list, a closure or an attribute of the parameter is found wherever the learner put it), adds
each parameter's ``.grad``, and counts each storage once. It leaves out what is not gradient memory: the
parameters' storages, every storage already alive when the sampler was made (the grader's model, data and
imports; they are held, so their addresses cannot be reused by a new tensor), and the tensors the grader names
with :meth:`ignore` (its batch and loss), and activations: tensors with a ``grad_fn``, whose Python objects
torch keeps while autograd holds them. Tensors that only autograd holds without a Python object (the gradients
flowing between layers) are not found either: they are the same for every implementation. A storage is counted whole: a small view keeps its whole buffer alive.
"""
import gc

import torch


def _live_tensors():
    return [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]


class GradientMemory:
    """Samples the bytes of gradient memory a rank holds; ``peak`` is the largest sample, ``where`` its place."""

    def __init__(self, params):
        self.params = list(params)
        self._baseline = _live_tensors()  # held: their storages stay where they are
        self._skip = {t.untyped_storage().data_ptr() for t in self._baseline + self.params}
        self._ignored = []
        self.active = False
        self.peak, self.where, self.samples = 0, None, 0

    def ignore(self, *tensors):
        self._ignored = [t for t in tensors if torch.is_tensor(t)]

    def sample(self, where):
        if not self.active:
            return
        skip = self._skip | {t.untyped_storage().data_ptr() for t in self._ignored}
        seen, total = set(), 0
        for tensor in _live_tensors() + [p.grad for p in self.params if p.grad is not None]:
            if tensor.grad_fn is not None:
                continue  # an activation in the autograd graph (its Python object outlives the layer's call)
            storage = tensor.untyped_storage()
            pointer = storage.data_ptr()
            if pointer in skip or pointer in seen or storage.nbytes() == 0:
                continue
            seen.add(pointer)
            total += storage.nbytes()
        self.samples += 1
        if total > self.peak:
            self.peak, self.where = total, where
