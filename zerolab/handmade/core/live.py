"""Bytes of every tensor alive in this process, found by the garbage collector, each storage counted once.

A rank's memory is measured here rather than where a grader expects the learner to keep it (``optimizer.state``):
moments stored as attributes of the parameters, in a global dict or in a closure are all found. What the grader
knows the purpose of is named and reported as its own line; everything else is "other".

- ``breakdown(lines, exclude)``: {line: bytes, ..., "other": bytes}. ``lines`` maps a name to tensors (or
  storages); a storage goes to the first line that names it. ``exclude`` tensors/storages are left out entirely
  (the grader's own: its data, a baseline).
- ``settled_breakdown(lines, exclude)``: the same, once a collective's tensors that gloo's worker thread still
  held when the call returned have been let go (the smallest of the samples over SETTLE_SECONDS).
- ``live_bytes(exclude)``: the bytes of all live storages but the excluded ones.
- ``model_lines(model)``: the usual lines of a model: parameters, their .grad, its buffers.
- ``Baseline()``: the storages alive now (kept alive by it, so their addresses are not reused); pass it in
  ``exclude`` to leave out what existed before the learner's code ran.
- ``watch_collectives()`` / ``communication_storages()``: which storages went through a torch.distributed
  collective since the last ``forget_collectives()``; a storage that is still alive afterwards is a persistent
  communication buffer (a kept all-gather buffer, a flat gradient buffer), reported as its own line.
  ``all_gathered_elements()``: how many elements the all-gathers since then produced.

A storage is a whole allocation: a "shard" that is a view of a full-size tensor counts the full size. Tensors held
only by C++ (autograd's saved tensors, a .grad never read from Python) have no Python object and are not seen:
read ``p.grad`` (``model_lines`` does) before measuring.
"""
import functools
import gc
import time

import torch

SETTLE_SECONDS = 0.05  # how long gloo's worker thread may hold a finished collective's tensors, at most
OTHER = "other"
COMMUNICATION = "communication buffers"
_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base",
                "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
                "gather", "scatter", "send", "recv", "isend", "irecv", "all_gather_coalesced")
_ALL_GATHERS = ("all_gather", "all_gather_into_tensor", "_all_gather_base")
_seen_in_collectives = set()
_all_gathered = [0]


def _key(storage):
    return storage.data_ptr(), storage.nbytes()


def _storages(values):
    """Storage keys (address, bytes) of tensors or storages in ``values`` (nested lists, dicts, a Baseline)."""
    keys = set()
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, Baseline):
            keys |= value.keys
        elif issubclass(type(value), torch.Tensor):
            storage = _storage_of(value)
            if storage is not None:
                keys.add(_key(storage))
        elif isinstance(value, (torch.UntypedStorage, torch.TypedStorage)):
            keys.add(_key(value.untyped_storage() if isinstance(value, torch.TypedStorage) else value))
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple, set)):
            stack.extend(value)
    return keys


def _storage_of(tensor):
    try:
        if tensor.layout != torch.strided or tensor.device.type == "meta":
            return None
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return storage if storage.nbytes() and storage.data_ptr() else None


def held_by(owner, exclude=(), depth=4):
    """Bytes of the storages reachable from ``owner`` through its attributes, dicts, lists, tuples and sets (up to
    ``depth`` levels), each once, leaving out ``exclude`` (tensors, storages, a Baseline or
    communication_storages()). What an object keeps, wherever in it: an optimizer's moments in ``self.state`` or
    in attributes of its own are found alike."""
    found, seen, level = set(), set(), [owner]
    for _ in range(depth + 1):
        below = []
        for value in level:
            if id(value) in seen:
                continue
            seen.add(id(value))
            if issubclass(type(value), torch.Tensor):
                found |= _storages(value)
            elif isinstance(value, dict):
                below += list(value.keys()) + list(value.values())
            elif isinstance(value, (list, tuple, set, frozenset)):
                below += list(value)
            elif hasattr(value, "__dict__") and not isinstance(value, (type, torch.nn.Module)) \
                    and not callable(value):
                below += list(vars(value).values())
        level = below
    return sum(nbytes for _, nbytes in found - _storages(exclude))


def live_tensors():
    """Every tensor object alive in this process (parameters and views included)."""
    return [obj for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor)]


def _live_storages():
    """{(address, bytes): bytes} of every storage behind a live tensor, each once."""
    found = {}
    for tensor in live_tensors():
        storage = _storage_of(tensor)
        if storage is not None:
            found.setdefault(_key(storage), storage.nbytes())
    return found


def breakdown(lines=None, exclude=()):
    """{line: bytes} of every live storage: a storage goes to the first of ``lines`` naming it, else to "other"."""
    gc.collect()
    live = _live_storages()
    for key in _storages(exclude):
        live.pop(key, None)
    result = {}
    for name, tensors in (lines or {}).items():
        result[name] = sum(live.pop(key) for key in _storages(tensors) if key in live)
    result[OTHER] = sum(live.values())
    return result


def settled_breakdown(lines=None, exclude=(), settle=SETTLE_SECONDS):
    """breakdown() of a rank whose own code has returned: gloo's worker thread lets go of a collective's tensors a
    moment after the call returns (it needs the GIL), so one sample may charge them to the learner (a right ZeRO-1
    answer measured 500 bytes over its budget once in 3 class runs). Samples are taken for ``settle`` seconds and
    the smallest kept: what the learner holds is in every one of them."""
    best = breakdown(lines, exclude)
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        time.sleep(0.005)
        again = breakdown(lines, exclude)
        if sum(again.values()) < sum(best.values()):
            best = again
    return best


def live_bytes(exclude=()):
    """Bytes of every live tensor storage, each once, leaving out those of ``exclude``."""
    return breakdown(exclude=exclude)[OTHER]


def model_lines(model):
    """{"parameters", "gradients", "buffers"} of a torch.nn.Module, in that order of precedence."""
    params = list(model.parameters())
    return {"parameters": params, "gradients": [p.grad for p in params if p.grad is not None],
            "buffers": list(model.buffers())}


class Baseline:
    """The storages alive when it is made; it holds their tensors so that no later allocation reuses an address."""

    def __init__(self):
        gc.collect()
        self._tensors = live_tensors()
        self.keys = _storages(self._tensors)

    def release(self):
        self._tensors, self.keys = [], set()


def watch_collectives():
    """Record the storages of the tensors passed to torch.distributed's collectives (idempotent)."""
    import torch.distributed as dist

    for name in _COLLECTIVES:
        function = getattr(dist, name, None)
        if function is None or getattr(function, "_zerolab_watched", False):
            continue
        setattr(dist, name, _watched(function))


def _watched(function):
    gathers = function.__name__ in _ALL_GATHERS

    @functools.wraps(function)
    def collective(*args, **kwargs):
        _seen_in_collectives.update(_storages([list(args), kwargs]))
        if gathers:  # the output: a list of tensors or one tensor, the first argument
            output = args[0] if args else next(iter(kwargs.values()), None)
            _all_gathered[0] += sum(t.numel() for t in (output if isinstance(output, (list, tuple)) else [output])
                                    if isinstance(t, torch.Tensor))
        return function(*args, **kwargs)

    collective._zerolab_watched = True
    return collective


def forget_collectives():
    _seen_in_collectives.clear()
    _all_gathered[0] = 0


def all_gathered_elements():
    """Elements all-gathered since the last forget_collectives(): the whole output of each all-gather."""
    return _all_gathered[0]


def communication_storages():
    """The storage keys seen in a collective since the last forget_collectives(), usable in ``lines``."""
    return _Keys(_seen_in_collectives)


class _Keys(Baseline):
    def __init__(self, keys):
        self._tensors, self.keys = [], set(keys)
