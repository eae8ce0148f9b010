"""What the grader watches inside a rank while a learner's ZeRO-3 trains: collectives, matmuls and live bytes.

- Collectives: every torch.distributed collective the rank calls (async ones too; by its name in torch.distributed
  or in torch.distributed.distributed_c10d, where they are defined; torch 2.13's ``all_gather_single`` and
  ``reduce_scatter_single`` as well as the deprecated names that forward to them) is counted once, at the call,
  in the ZeRO paper's accounting that zerolab.run.meter uses for DeepSpeed: a collective over n elements counts
  n, where n is the tensor of an all-reduce, broadcast or reduce, the full input of a reduce-scatter and the full
  output of an all-gather. A collective called from inside another (a deprecated name forwarding to the new one)
  counts once.
- Matmuls: the torch functions a Linear layer's forward calls from Python (F.linear, matmul, mm, addmm and the
  tensor's @), counted by wrapping them where Python looks them up (a torch function mode would miss the
  forwards that activation checkpointing reruns inside backward). Autograd's backward computes in C++ and is
  not seen, so a step that counts more than one per layer ran some layer's forward again.
- Async all-gathers (``async_op=True``), with ``deliver_on_wait``: their result reaches the output tensor when ``wait()`` is called on the
  work they return, not before (an async collective promises its data only after ``wait()``; gloo on CPU usually
  finishes sooner, so a missing ``wait()`` was a race that passed most runs). Until then the output holds NaN, and
  a step that ends with one never waited for says so.
- Live bytes: the storages behind every torch tensor the garbage collector tracks in the process (parameters,
  gathered buffers, whatever the learner keeps), each storage once, minus the storages the grader names
  (gradients, optimizer state, batch, activations). Sampled at every collective and every matmul, and wherever
  the grader asks.
"""
import functools
import gc
import threading
import time
import weakref
from collections import defaultdict

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# name: (op, position of the whole collective's tensor or list, its keyword)
COLLECTIVES = {
    "all_reduce": ("all-reduce", 0, "tensor"),
    "all_reduce_coalesced": ("all-reduce", 0, "tensors"),
    "reduce": ("reduce", 0, "tensor"),
    "broadcast": ("broadcast", 0, "tensor"),
    "reduce_scatter": ("reduce-scatter", 1, "input_list"),
    "reduce_scatter_tensor": ("reduce-scatter", 1, "input"),
    "reduce_scatter_single": ("reduce-scatter", 1, "input"),
    "_reduce_scatter_base": ("reduce-scatter", 1, "input"),
    "all_gather": ("all-gather", 0, "tensor_list"),
    "all_gather_into_tensor": ("all-gather", 0, "output_tensor"),
    "all_gather_single": ("all-gather", 0, "output_tensor"),
    "_all_gather_base": ("all-gather", 0, "output_tensor"),
    "all_gather_coalesced": ("all-gather", 0, "output_tensor_lists"),
    "all_to_all_single": ("all-to-all", 0, "output"),
    "all_to_all": ("all-to-all", 0, "output_tensor_list"),
    "gather": ("gather", 0, "tensor"),
    "scatter": ("scatter", 0, "tensor"),
    "send": ("send", 0, "tensor"),
    "recv": ("recv", 0, "tensor"),
    "isend": ("send", 0, "tensor"),
    "irecv": ("recv", 0, "tensor"),
}
SETTLE_SECONDS = 0.003
MATMULS = [(torch.nn.functional, "linear"), (torch, "matmul"), (torch, "mm"), (torch, "addmm"),
           (torch.Tensor, "matmul"), (torch.Tensor, "__matmul__"), (torch.Tensor, "mm")]


def _elements(value):
    if torch.is_tensor(value):
        return value.numel(), value.element_size()
    if isinstance(value, (list, tuple)):
        counted = [_elements(item) for item in value]
        return sum(n for n, _ in counted), max((size for _, size in counted), default=0)
    return 0, 0


def storage_key(tensor):
    try:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return None, 0


class LiveTensors:
    """The tensors alive in this process, found by the garbage collector, cheaply enough to look many times.

    ``start()`` lists every tracked tensor once and stops automatic collections; from then on every new tensor
    stays in the youngest generation, so a look needs only that generation and the tensors listed at the start.
    ``stop()`` lets the collector run again.
    """

    def __init__(self):
        self.known = []
        self.running = False

    def start(self):
        self.running = gc.isenabled()
        gc.disable()
        self.known = [weakref.ref(thing) for thing in gc.get_objects() if issubclass(type(thing), torch.Tensor)]

    def stop(self):
        self.known = []
        if self.running:
            gc.enable()

    def storages(self, shapes=None):
        """{storage address: bytes} of every live tensor (and, into ``shapes``, a shape seen for each)."""
        found = {}
        young = [thing for thing in gc.get_objects(generation=0) if issubclass(type(thing), torch.Tensor)]
        for tensor in [ref() for ref in self.known] + young:
            if tensor is not None:
                pointer, nbytes = storage_key(tensor)
                if pointer and nbytes:
                    found[pointer] = nbytes
                    if shapes is not None:
                        shapes[pointer] = tuple(tensor.shape)
        return found


def live_storages():
    """{storage address: bytes} of every tensor the garbage collector tracks in this process (one full look)."""
    found = {}
    for thing in gc.get_objects():
        if issubclass(type(thing), torch.Tensor):
            pointer, nbytes = storage_key(thing)
            if pointer and nbytes:
                found[pointer] = nbytes
    return found


class DeliveredOnWait:
    """The work of an async all-gather run into a staging buffer: ``wait()`` (or ``synchronize()``, a completed
    ``is_completed()``, ``get_future()``) copies the result into the learner's output; the rest is the work's."""

    def __init__(self, work, staging, outputs, probe):
        self._work, self._staging, self._outputs, self._probe = work, staging, outputs, probe
        self.delivered = False

    def _deliver(self):
        if not self.delivered:
            self._work.wait()
            for output, staged in zip(self._outputs, self._staging):
                output.copy_(staged)
            self.delivered = True
            self._probe.in_flight.remove(self)

    def wait(self, *args, **kwargs):
        self._deliver()
        return True

    def synchronize(self):
        self._deliver()

    def is_completed(self):
        done = self._work.is_completed()
        if done:
            self._deliver()
        return done

    def get_future(self):
        self._deliver()
        future = torch.futures.Future()
        future.set_result(list(self._outputs))
        return future

    def __getattr__(self, name):
        return getattr(self._work, name)


def _staged(value):
    """(staging buffers, learner's outputs) for an all-gather output: a tensor, or a list of tensors."""
    outputs = [value] if torch.is_tensor(value) else list(value)
    return [torch.empty_like(t) for t in outputs], outputs


class Probe:
    """Counts collectives and matmuls per step and samples live bytes (see the module docstring).

    ``excluded()`` returns the tensors whose storages a sample leaves out; it is called at each sample. With
    ``measure`` a sample is ``measure(tensors of the reduction being called, or ())`` instead of live bytes. With
    ``deliver_on_wait`` async all-gathers deliver at ``wait()`` (the learner's ZeRO-3; not DeepSpeed's or FSDP's,
    whose works go on into torch's own code).
    """

    def __init__(self, excluded=lambda: (), measure=None, deliver_on_wait=False):
        self.excluded, self.measure, self.deliver_on_wait = excluded, measure, deliver_on_wait
        self.steps = []
        self.sampling = False
        self._current = None
        self._depth = threading.local()
        self._originals = {}
        self._patched = []
        self.live = LiveTensors()
        self.in_flight = []  # DeliveredOnWait works not yet waited for

    def install(self, matmuls=True):
        """Wrap torch.distributed's collectives (and the matmuls); call before the learner's cell is run."""
        for name, spec in COLLECTIVES.items():
            original = getattr(dist, name, None)
            if original is not None:
                self._originals[name] = original
                wrapped = self._wrap(original, *spec)
                setattr(dist, name, wrapped)
                if getattr(c10d, name, None) is original:  # where it is defined: imported from there, or called
                    setattr(c10d, name, wrapped)         # by a deprecated name (all_gather_into_tensor -> _single)
        for owner, name in MATMULS if matmuls else ():
            original = getattr(owner, name)
            self._patched.append((owner, name, original))
            setattr(owner, name, self._counting(original))
        return self

    def _counting(self, original):
        @functools.wraps(original)
        def matmul(*args, **kwargs):
            if self._current is not None:
                self._current["matmuls"] += 1
                self.sample("matmul")
            return original(*args, **kwargs)

        return matmul

    def original(self, name):
        """The unwrapped collective, for the grader's own communication."""
        return self._originals.get(name, getattr(dist, name))

    def _wrap(self, original, op, position, keyword):
        def counted(*args, **kwargs):
            depth = getattr(self._depth, "value", 0)
            if depth == 0 and self._current is not None:
                value = kwargs.get(keyword, args[position] if len(args) > position else None)
                elements, size = _elements(value)
                entry = self._current["collectives"][op]
                entry[0] += 1
                entry[1] += elements
                entry[2] += elements * size
                # what a reduction sends is a gradient, not a parameter: left out of this sample
                self.sample(f"{op} call", value if op in ("reduce-scatter", "all-reduce", "reduce") else ())
            self._depth.value = depth + 1
            try:
                if self.deliver_on_wait and depth == 0 and op == "all-gather" \
                        and kwargs.get("async_op", len(args) > 3 and args[3]):
                    return self._deliver_on_wait(original, position, keyword, args, kwargs)
                return original(*args, **kwargs)
            finally:
                self._depth.value = depth

        counted.__wrapped__ = original
        return counted

    def _deliver_on_wait(self, original, position, keyword, args, kwargs):
        value = kwargs.get(keyword, args[position] if len(args) > position else None)
        staging, outputs = _staged(value)
        target = staging[0] if torch.is_tensor(value) else staging
        if keyword in kwargs:
            kwargs = dict(kwargs, **{keyword: target})
        else:
            args = args[:position] + (target,) + args[position + 1:]
        work = original(*args, **kwargs)
        for output in outputs:
            if output.is_floating_point():
                output.fill_(float("nan"))
        delivery = DeliveredOnWait(work, staging, outputs, self)
        self.in_flight.append(delivery)
        return delivery

    def sample(self, where, also_excluded=()):
        if not (self.sampling and self._current is not None):
            return
        also = [also_excluded] if torch.is_tensor(also_excluded) else list(also_excluded)
        if self.measure is not None:
            nbytes = self.measure(also)
        else:
            # gloo's worker thread lets go of a finished collective's tensors a moment after wait() returns, and
            # needs the GIL for it: give it that moment, or a buffer already let go of would count
            time.sleep(SETTLE_SECONDS)
            shapes = {}
            live = self.live.storages(shapes)
            staged = [t for delivery in self.in_flight for t in delivery._staging]
            for tensor in list(self.excluded()) + also + staged:
                if torch.is_tensor(tensor):
                    live.pop(storage_key(tensor)[0], None)
            nbytes = sum(live.values())
        if nbytes > self._current["peak_bytes"]:
            self._current["peak_bytes"], self._current["peak_at"] = nbytes, where
            if self.measure is None:  # what was alive then: the largest storages, for the report and for debugging
                self._current["peak_storages"] = sorted(([n, list(shapes.get(p, ()))] for p, n in live.items()),
                                                        reverse=True)[:16]

    def step(self, sample_memory=False):
        """A context manager around one training step."""
        return _Step(self, sample_memory)

    def uninstall(self):
        for name, original in self._originals.items():
            setattr(dist, name, original)
            if getattr(c10d, name, None) is not None and getattr(getattr(c10d, name), "__wrapped__", None) is original:
                setattr(c10d, name, original)
        for owner, name, original in self._patched:
            setattr(owner, name, original)


class _Step:
    def __init__(self, probe, sample_memory):
        self.probe, self.sample_memory = probe, sample_memory

    def __enter__(self):
        self.probe._current = {"collectives": defaultdict(lambda: [0, 0, 0]), "matmuls": 0, "peak_bytes": 0,
                               "peak_at": None}
        self.probe.sampling = self.sample_memory
        if self.sample_memory and self.probe.measure is None:
            self.probe.live.start()
        return self

    def __exit__(self, *exc):
        if self.sample_memory and self.probe.measure is None:
            self.probe.live.stop()
        current = self.probe._current
        self.probe._current, self.probe.sampling = None, False
        never_waited = len(self.probe.in_flight)
        for delivery in list(self.probe.in_flight):  # delivered now, so the next step starts clean
            delivery._deliver()
        self.probe.steps.append({
            "never_waited": never_waited,
            "collectives": {op: {"calls": c, "elements": e, "bytes": b} for op, (c, e, b) in
                            sorted(current["collectives"].items())},
            "matmuls": current["matmuls"],
            "peak_param_bytes": current["peak_bytes"] if self.sample_memory else None,
            "peak_at": current["peak_at"], "peak_storages": current.get("peak_storages")})
        return False

