"""The traffic meter: what one rank really sends through collectives and copies to and from its offload buffers.

Measured by wrapping DeepSpeed 0.19.8 itself, inside a rank process, per optimizer step:

Collectives. Every call that reaches DeepSpeed's communication backend (the methods of ``deepspeed.comm.comm.cdb``,
the TorchBackend every ``deepspeed.comm`` function ends in) is recorded once, with the DeepSpeed function that
asked for it (its *site*). ``elements`` is the size of the whole collective: the tensor of an all-reduce,
broadcast or reduce, the full input of a reduce-scatter, the full output of an all-gather. ``bytes`` is
``elements x element size``: the collective's buffer, not what a ring algorithm puts on the wire (that is the
model's ``wire_bytes``). Calls are grouped by (op, dtype, site).

Offload copies. While the engine runs forward, backward and step, a torch function mode sees every
``Tensor.copy_`` and ``Tensor.to``. The *host offload buffers* are the tensors DeepSpeed's optimizer keeps on
its offload device: for stage 1/2 (``DeepSpeedZeroOptimizer`` with ``cpu_offload``) the fp32 partition
``single_partition_of_fp32_groups`` and its ``.grad``, the accumulation buffers ``accumulated_grads_in_cpu``
and the 16-bit staging buffer ``param_buffer_of_bit16_for_cpu_offload_groups``; for stage 3 with
``offload_optimizer`` the fp32 partition ``fp32_partitioned_groups_flat`` and its ``.grad`` and the gradient
partition buffer ``grad_partitions_flat_buffer``; with ``offload_param`` also ``fp16_partitioned_groups_flat``
and every parameter's ``ds_tensor``. A tensor is a host buffer when its storage is one of theirs. Then:

- ``dst.copy_(src)`` with ``dst`` a host buffer and ``src`` not is device-to-host; the reverse is host-to-device;
- ``buf.to(device)`` of a host buffer, asked for the accelerator's device, is host-to-device.

On a GPU these are real PCIe copies. On CPU ranks the "device" is CPU memory too: the meter counts the same
logical copies (``.to`` of a host buffer to the accelerator's device is then a no-op that torch skips, and is
still counted, because on a GPU it is a copy). Bytes are ``elements x element size`` of the side that crosses:
torch converts dtypes on the GPU for ``non_blocking`` copies and on the CPU otherwise (ATen cuda/Copy.cu), so a
non-blocking copy crosses in the host buffer's dtype and a blocking one in the device tensor's dtype.
Copies are grouped by (direction, dtype, site); one-element tensors (the norm, the overflow flag) count like any
other. Where a CPU rank takes a different branch than a GPU would (stage3.py ``partition_grads`` adds later
micro-steps in place when the buffer "is on the accelerator"), the meter counts what the CPU rank did, and
zerolab.engine.deepspeed_traffic models both.
"""
import sys
import threading
from collections import defaultdict

import torch
from torch.overrides import TorchFunctionMode

_OWN_FILES = ("zerolab/run/meter.py", "torch/", "deepspeed/comm/", "deepspeed/utils/nvtx.py", "contextlib.py")
# TorchBackend methods that run a collective; the value says which argument holds the whole collective's tensor.
COLLECTIVES = {
    "all_reduce": ("all-reduce", "tensor", 0),
    "inference_all_reduce": ("all-reduce", "tensor", 0),
    "all_reduce_coalesced": ("all-reduce", "tensors", 0),
    "reduce": ("reduce", "tensor", 0),
    "broadcast": ("broadcast", "tensor", 0),
    "reduce_scatter": ("reduce-scatter", "input_list", 1),
    "reduce_scatter_tensor": ("reduce-scatter", "input_tensor", 1),
    "all_gather": ("all-gather", "tensor_list", 0),
    "all_gather_into_tensor": ("all-gather", "output_tensor", 0),
    "all_gather_base": ("all-gather", "output_tensor", 0),
    "all_gather_coalesced": ("all-gather", "output_tensors", 0),
    "all_to_all_single": ("all-to-all", "output", 0),
}


def _site():
    """The innermost DeepSpeed (or engine) function on the stack outside the comm layer and torch."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if "deepspeed/" in name and not any(own in name for own in _OWN_FILES):
            return frame.f_code.co_name
        frame = frame.f_back
    return "?"


def _numel(value):
    if torch.is_tensor(value):
        return value.numel(), value.dtype
    tensors = [t for t in value if torch.is_tensor(t)]
    return sum(t.numel() for t in tensors), (tensors[0].dtype if tensors else None)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def host_buffers(engine):
    """The tensors DeepSpeed's ZeRO optimizer keeps on its offload device (see the module docstring)."""
    wrapper = engine.optimizer
    found = []

    def add(tensors):
        for tensor in tensors or ():
            if torch.is_tensor(tensor):
                found.append(tensor)
                if tensor.grad is not None:
                    found.append(tensor.grad)

    if getattr(wrapper, "cpu_offload", False):  # stage 1/2
        add(getattr(wrapper, "single_partition_of_fp32_groups", ()))
        add(list(getattr(wrapper, "accumulated_grads_in_cpu", {}).values()))
        add(getattr(wrapper, "param_buffer_of_bit16_for_cpu_offload_groups", ()))
    if getattr(wrapper, "offload_optimizer", False):  # stage 3
        add(getattr(wrapper, "fp32_partitioned_groups_flat", ()))
        add([getattr(wrapper, "grad_partitions_flat_buffer", None)])
    if getattr(wrapper, "offload_param", False):
        add(getattr(wrapper, "fp16_partitioned_groups_flat", ()))
        add([getattr(p, "ds_tensor", None) for p in engine.module.parameters()])
    return found


class _CopyMode(TorchFunctionMode):
    def __init__(self, meter):
        super().__init__()
        self.meter = meter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func is torch.Tensor.copy_ and len(args) >= 2:
            self.meter._copied(args[0], args[1], kwargs.get("non_blocking", len(args) > 2 and args[2]))
        elif func is torch.Tensor.to and args:
            device = kwargs.get("device")
            if device is None:
                device = next((a for a in args[1:] if isinstance(a, (str, torch.device))), None)
            if device is not None:
                self.meter._moved(args[0], result, torch.device(device), kwargs.get("non_blocking", False))
        return result


class TrafficMeter:
    """Per optimizer step: collectives and host-offload copies of this rank (use :meth:`step` around each step)."""

    def __init__(self, engine):
        from deepspeed.accelerator import get_accelerator
        import deepspeed.comm.comm as ds_comm

        self.engine = engine
        self.device = torch.device(get_accelerator().current_device_name())
        self.steps = []
        self._current = None
        self._depth = threading.local()
        self._host = set()
        self._backend = ds_comm.cdb
        for name, spec in COLLECTIVES.items():
            original = getattr(self._backend, name, None)
            if original is not None:
                setattr(self._backend, name, self._wrap(original, *spec))

    def _wrap(self, original, op, argument, position):
        def recorded(*args, **kwargs):
            depth = getattr(self._depth, "value", 0)
            if depth == 0 and self._current is not None:
                value = kwargs.get(argument, args[position] if len(args) > position else None)
                elements, dtype = _numel(value)
                key = ("collective", op, _dtype_name(dtype), _site())
                self._add(key, elements, elements * (dtype.itemsize if dtype is not None else 0))
            self._depth.value = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth.value = depth

        return recorded

    def _add(self, key, elements, nbytes):
        entry = self._current[key]
        entry[0] += 1
        entry[1] += elements
        entry[2] += nbytes

    def _is_host(self, tensor):
        if not torch.is_tensor(tensor) or tensor.numel() == 0:
            return False
        pointer = tensor.untyped_storage().data_ptr()
        if pointer not in self._host:
            self._host = {t.untyped_storage().data_ptr() for t in host_buffers(self.engine) if t.numel() > 0}
        return pointer in self._host

    def _copied(self, dst, src, non_blocking):
        if self._current is None or not torch.is_tensor(src):
            return
        dst_host, src_host = self._is_host(dst), self._is_host(src)
        if dst_host == src_host:
            return
        host, device = (dst, src) if dst_host else (src, dst)
        crossing = host if non_blocking else device
        direction = "device_to_host" if dst_host else "host_to_device"
        self._add(("copy", direction, _dtype_name(crossing.dtype), _site()), dst.numel(),
                  dst.numel() * crossing.element_size())

    def _moved(self, source, result, device, non_blocking):
        if self._current is None or device.type != self.device.type or not self._is_host(source):
            return
        if source.device.type != "cpu" and source.device == device:
            return  # a host buffer already on the accelerator (not offloaded): nothing moves
        crossing = source if non_blocking else result
        self._add(("copy", "host_to_device", _dtype_name(crossing.dtype), _site()), source.numel(),
                  source.numel() * crossing.element_size())

    def step(self):
        """A context manager around one optimizer step (all its micro-steps)."""
        return _Step(self)

    def as_dicts(self):
        return [summarize(step) for step in self.steps]


class _Step:
    def __init__(self, meter):
        self.meter = meter
        self.mode = _CopyMode(meter)

    def __enter__(self):
        self.meter._current = defaultdict(lambda: [0, 0, 0])
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        self.meter.steps.append(dict(self.meter._current))
        self.meter._current = None
        return False


def summarize(records):
    """One step's records as JSON-ready lists, plus the two offload totals."""
    collectives, copies = [], []
    for key, (calls, elements, nbytes) in sorted(records.items()):
        kind, what, dtype, site = key
        row = {"dtype": dtype, "site": site, "calls": calls, "elements": elements, "bytes": nbytes}
        if kind == "collective":
            collectives.append({"op": what, **row})
        else:
            copies.append({"direction": what, **row})
    return {
        "collectives": collectives,
        "copies": copies,
        "device_to_host_bytes": sum(c["bytes"] for c in copies if c["direction"] == "device_to_host"),
        "host_to_device_bytes": sum(c["bytes"] for c in copies if c["direction"] == "host_to_device"),
    }
