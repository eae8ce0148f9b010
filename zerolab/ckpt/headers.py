"""Read a torch.save file's pickle without loading a tensor (or torch): shapes, dtypes and bytes only.

A ``.pt`` file is a zip: ``<archive>/data.pkl`` describes the objects, ``<archive>/data/<key>`` holds each
storage's raw bytes. This reads data.pkl with an unpickler that builds nothing but plain containers and
``TensorInfo`` records, so a 70B checkpoint is described in the time it takes to read a few kilobytes, and a file
from a stranger runs none of its code (every class is replaced by a ``Stub``).
"""
import collections
import pickle
import zipfile
from dataclasses import dataclass

# torch's legacy storage class names, as torch.save still writes them, and the bytes of one element  # claim: torch-save-zip-with-legacy-storage-names
STORAGE_DTYPES = {
    "FloatStorage": ("float32", 4), "DoubleStorage": ("float64", 8), "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2), "LongStorage": ("int64", 8), "IntStorage": ("int32", 4),
    "ShortStorage": ("int16", 2), "CharStorage": ("int8", 1), "ByteStorage": ("uint8", 1),
    "BoolStorage": ("bool", 1), "ComplexFloatStorage": ("complex64", 8), "ComplexDoubleStorage": ("complex128", 16),
    "Float8_e4m3fnStorage": ("float8_e4m3fn", 1), "Float8_e5m2Storage": ("float8_e5m2", 1),
}


class NotATorchFile(Exception):
    """The file is not a complete torch.save zip (truncated, or something else)."""


@dataclass(frozen=True)
class StorageInfo:
    key: str
    dtype: str
    itemsize: int
    numel: int


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple
    dtype: str
    storage: StorageInfo

    @property
    def numel(self):
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def nbytes(self):
        return self.numel * self.storage.itemsize


class Stub:
    """Whatever class the pickle names (an enum, a loss scaler, ...): its arguments and state, kept as data."""

    name = "?"

    def __new__(cls, *args, **kwargs):
        instance = object.__new__(cls)
        instance.args, instance.state = args, None
        return instance

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.state = state

    def __repr__(self):
        return f"{self.name}{self.args!r}" if self.args else self.name


_STUBS = {}


def stub_class(name):
    """One Stub subclass per pickled name (NEWOBJ needs a real class)."""
    if name not in _STUBS:
        _STUBS[name] = type(name.rsplit(".", 1)[-1], (Stub,), {"name": name})
    return _STUBS[name]


def _rebuild_tensor(storage, offset, size, stride, *rest):
    return TensorInfo(tuple(size), storage.dtype, storage)


def _rebuild_parameter(data, *rest):
    return data


def _rebuild_from_type(function, new_type, args, state=None):
    return function(*args)


def _reconstruct(cls, base, state=None):
    return cls() if isinstance(cls, type) and issubclass(cls, Stub) else stub_class(repr(cls))()


class _HeaderUnpickler(pickle.Unpickler):
    SAFE = {("collections", "OrderedDict"): collections.OrderedDict, ("builtins", "set"): set,
            ("builtins", "frozenset"): frozenset, ("builtins", "slice"): slice,
            ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
            ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
            ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
            ("copyreg", "_reconstructor"): _reconstruct}

    def find_class(self, module, name):
        if (module, name) in self.SAFE:
            return self.SAFE[(module, name)]
        if module == "torch" and name in STORAGE_DTYPES:
            return name
        return stub_class(f"{module}.{name}")

    def persistent_load(self, pid):
        kind, storage_type, key, _location, numel = pid
        dtype, itemsize = STORAGE_DTYPES.get(storage_type, (str(storage_type), 1))
        return StorageInfo(str(key), dtype, itemsize, int(numel))


def read_header(path):
    """The object torch.save wrote to ``path``, with every tensor a TensorInfo. Raises NotATorchFile."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            # claim: torch-save-zip-with-legacy-storage-names
            pickles = [name for name in names if name.endswith("/data.pkl") or name == "data.pkl"]
            if not pickles:
                raise NotATorchFile("it holds no data.pkl")
            with archive.open(pickles[0]) as handle:
                return _HeaderUnpickler(handle).load()
    except (zipfile.BadZipFile, EOFError, pickle.UnpicklingError, ValueError, TypeError) as error:
        raise NotATorchFile(str(error) or type(error).__name__) from None


def tensors(obj):
    """Every TensorInfo inside ``obj`` (dicts, lists, tuples, Stub arguments and state)."""
    found, stack = [], [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, TensorInfo):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, Stub):
            stack.extend([item.args, item.state])
    return found


def storage_bytes(obj):
    """{dtype: bytes} of the distinct storages the tensors in ``obj`` live in (views of one buffer count once)."""
    storages = {info.storage.key: info.storage for info in tensors(obj)}
    totals = {}
    for storage in storages.values():
        totals[storage.dtype] = totals.get(storage.dtype, 0) + storage.numel * storage.itemsize
    return totals
