"""What the learner's code sends through torch.distributed inside one rank, counted at the collectives.

``CollectiveCounter.install()`` wraps the functions of ``torch.distributed`` (and of its ``distributed_c10d``
module, where they are defined, so ``from torch.distributed import all_reduce`` run later gets the wrapper too):
all_reduce, reduce, broadcast, reduce_scatter, reduce_scatter_tensor, all_gather, all_gather_into_tensor,
all_to_all, gather, scatter, the coalesced and ``_base`` variants, and the point-to-point sends. Install it
before the learner's cell runs. A call is counted when it is made, ``async_op=True`` or not; a call made from
inside a counted call (torch implementing one collective with another, ``all_gather_object``'s inner gathers
aside: those are counted, as all-gathers of bytes) is not counted again. Calls made while no label is set (the
grader's own collectives) are not counted.

The accounting is the course's two, no third:

- ``elements`` / ``bytes``: the size of the whole collective, as zerolab.run.meter counts DeepSpeed's: the tensor
  of an all-reduce, reduce or broadcast, the full input of a reduce-scatter or all-to-all, the full output of an
  all-gather, every rank's piece of a gather or scatter; bytes are elements x element size;
- ``volume`` / ``wire_bytes``: the ZeRO paper's volume in elements (an all-reduce counts twice: a reduce-scatter
  plus an all-gather) and the bytes this rank sends with ring collectives, ``volume x (N-1)/N x element size``,
  both from zerolab.engine.comm.Collective (lesson 03). A point-to-point send puts all its elements on the wire.

Records are grouped per label (the grader labels each step, or each phase of a step) and per (op, dtype).
"""
import inspect
import threading

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from zerolab.engine.comm import Collective

# function name: (op as lesson 03 and the meter name it, how the whole collective's elements are found)
WRAPPED = {
    "all_reduce": ("all-reduce", "tensor"),
    "all_reduce_coalesced": ("all-reduce", "tensors"),
    "reduce": ("reduce", "tensor"),
    "broadcast": ("broadcast", "tensor"),
    "reduce_scatter": ("reduce-scatter", "input_list"),
    "reduce_scatter_tensor": ("reduce-scatter", "input"),
    "_reduce_scatter_base": ("reduce-scatter", "input"),
    "all_gather": ("all-gather", "tensor_list"),
    "all_gather_into_tensor": ("all-gather", "output_tensor"),
    "_all_gather_base": ("all-gather", "output_tensor"),
    "all_gather_coalesced": ("all-gather", "output_tensor_lists"),
    "all_to_all": ("all-to-all", "input_tensor_list"),
    "all_to_all_single": ("all-to-all", "input"),
    "gather": ("gather", "tensor x world"),
    "scatter": ("scatter", "tensor x world"),
    "send": ("send", "tensor"),
    "isend": ("send", "tensor"),
    "batch_isend_irecv": ("send", "p2p_op_list"),
}


def _tensors(value):
    """Every tensor in a tensor, a (nested) list of tensors, or a list of P2POp (its sends only)."""
    if torch.is_tensor(value):
        return [value]
    found = []
    for item in value or ():
        if isinstance(item, dist.P2POp):
            if getattr(item.op, "__name__", "") == "isend":
                found.append(item.tensor)
        else:
            found += _tensors(item)
    return found


class CollectiveCounter:
    """Counts this rank's collectives per label; ``label`` None counts nothing. ``on_call(op, tensors)`` is called
    before each counted collective runs (the grader samples memory there)."""

    def __init__(self, on_call=None):
        self.label = None
        self.on_call = on_call
        self.records = {}  # label: {(op, dtype): [calls, elements, bytes]}
        self._depth = threading.local()
        self._originals = {}

    def install(self):
        for name, (op, argument) in WRAPPED.items():
            original = getattr(c10d, name, None)
            if original is None or name in self._originals:
                continue
            self._originals[name] = original
            wrapper = self._wrap(original, op, argument)
            for module in (c10d, dist):
                if getattr(module, name, None) is original:
                    setattr(module, name, wrapper)
        return self

    def uninstall(self):
        for name, original in self._originals.items():
            for module in (c10d, dist):
                setattr(module, name, original)
        self._originals = {}

    def _wrap(self, original, op, argument):
        signature = inspect.signature(original)

        def counted(*args, **kwargs):
            depth = getattr(self._depth, "value", 0)
            if depth == 0 and self.label is not None:
                self._count(op, argument, signature.bind_partial(*args, **kwargs).arguments)
            self._depth.value = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth.value = depth

        counted.__name__ = original.__name__
        counted.__wrapped__ = original
        return counted

    def _count(self, op, argument, arguments):
        world = dist.get_world_size(arguments.get("group"))
        name, _, times_world = argument.partition(" x ")
        tensors = _tensors(arguments.get(name))
        elements = sum(t.numel() for t in tensors) * (world if times_world else 1)
        dtype = tensors[0].dtype if tensors else torch.float32
        if self.on_call is not None:
            self.on_call(op, tensors)
        entry = self.records.setdefault(self.label, {}).setdefault((op, str(dtype).replace("torch.", "")),
                                                                   [0, 0, 0, dtype.itemsize, world])
        entry[0] += 1
        entry[1] += elements
        entry[2] += elements * dtype.itemsize

    def summary(self, label):
        """One label's collectives as JSON-ready rows, with the paper's volume and the ring's wire bytes."""
        rows = []
        for (op, dtype), (calls, elements, nbytes, itemsize, world) in sorted(self.records.get(label, {}).items()):
            if op == "send":
                volume, wire = elements, nbytes
            else:
                collective = Collective(op, "", "", elements, 1, calls, itemsize, world)
                volume, wire = collective.volume, collective.wire_bytes
            rows.append({"op": op, "dtype": dtype, "calls": calls, "elements": elements, "bytes": nbytes,
                         "volume": volume, "wire_bytes": wire})
        return rows


def volume(rows, op=None):
    """Total paper volume (elements) of summary rows, or of one op's rows."""
    return sum(row["volume"] for row in rows if op is None or row["op"] == op)


def count_cell(job, _namespace=None):
    """Rank side of a job {"cell": source, "call": name}: the counter installed, the cell run, then ``name()``
    called under the label "call"; the summary of what it sent (kind "zerolab.handmade.core.traffic:count_cell")."""
    from zerolab.handmade.core.rank import learner_namespace

    counter = CollectiveCounter().install()
    try:
        namespace = learner_namespace(job["cell"])
        counter.label = "call"
        namespace[job["call"]]()
        counter.label = None
    finally:
        counter.uninstall()
    return {"collectives": counter.summary("call")}
