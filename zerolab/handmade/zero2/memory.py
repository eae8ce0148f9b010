"""The peak of gradient memory in a rank during backward, from every tensor alive in the process.

At each sample the sampler takes every tensor object alive in the process (zerolab.handmade.core.live: the garbage
collector's list, so a gradient kept in a list, a closure or an attribute of the parameter is found wherever the
learner put it), adds each parameter's ``.grad``, and counts each storage once. It leaves out what is not gradient
memory: the parameters' storages, every storage already alive when the sampler was made (a live.Baseline: the
grader's model, data and imports), the tensors the grader names with :meth:`ignore` (its batch and loss), and
activations: tensors with a ``grad_fn``, whose Python objects torch keeps while autograd holds them. Tensors that
only autograd holds without a Python object (the gradients flowing between layers) are not found either: they
are the same for every implementation. A storage is counted whole: a small view keeps its whole buffer alive.
Sampling does not run the garbage collector: what the learner dropped is freed at once by reference counting.

A collective's tensors can outlive it by a moment: gloo's worker thread lets go of them after the call has
returned, and needs the GIL to do it. A sample that would raise the peak is therefore taken again after short
sleeps (up to SETTLE_SECONDS), counting only what is still alive then: a right answer's dropped buffer is not
charged to it by chance, and what a learner really keeps (in a list, or in a pending async work) stays counted.
"""
import time
import weakref

from zerolab.handmade.core import live

SETTLE_SECONDS = 0.05


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
        found = self._candidates(skip)
        total = self._count(found, skip)
        if total > self.peak:  # perhaps only for a moment: see the module's docstring
            waited, alive = 0.0, [weakref.ref(t) for t in found]
            del found  # only the weak references may keep watching them
            while total > self.peak and waited < SETTLE_SECONDS:
                time.sleep(0.002)
                waited += 0.002
                total = self._count([t for t in (ref() for ref in alive) if t is not None], skip)
        self.samples += 1
        if total > self.peak:
            self.peak, self.where = total, f"in step {self.step}, {where}"

    def _candidates(self, skip):
        """The live tensors that may be gradient memory, but for the storages in ``skip``."""
        found = []
        for tensor in live.live_tensors():
            if tensor.grad_fn is not None or tensor.device.type == "meta":
                continue  # an activation in the autograd graph
            key = _key(tensor)
            if key not in skip and key[1] != 0:
                found.append(tensor)
        return found

    def _count(self, tensors, skip):
        """Bytes of the storages of ``tensors`` and of the parameters' .grad, each storage once."""
        grads = {_key(p.grad) for p in self.params if p.grad is not None} - skip
        return sum(nbytes for _, nbytes in {_key(t) for t in tensors} | grads)
