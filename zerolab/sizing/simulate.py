"""A full-size training step of a Hugging Face causal LM, simulated: no memory allocated, no GPU.

``simulate(source, seq_len, micro_batch)`` builds the model with ``transformers`` under PyTorch's FakeTensorMode
(tensors carry shapes, dtypes and devices, no data), runs forward, the loss and backward once, and reads the memory
by category from ``torch.distributed._tools.mem_tracker.MemTracker``. The step is the one HF's Trainer runs:
``use_cache=False``, labels = the inputs, the model's outputs other than the loss dropped before backward, and for
``recompute="full"`` ``activation_checkpointing_enable`` (``gradient_checkpointing_enable`` before transformers 5)
with ``use_reentrant=False``, as Hugging Face recommends.

Device: the fake tensors are CPU tensors. FakeTensorMode does create "cuda" tensors without CUDA, but the weight
initialisation and SDPA's kernel choice then run device code ("PyTorch is not linked with support for cuda
devices"). Little is lost: autograd keeps the same tensors on either device, and for SDPA the CPU picks its flash
kernel, which keeps what CUDA's flash kernel keeps (query, key, value, the output and an fp32 log-sum-exp per row,
grouped-query attention inside the kernel); CUDA's memory-efficient kernel keeps the same. Not checked here on a
GPU: which kernel CUDA picks, and what cuDNN attention keeps. CUDA's allocator rounds blocks up to 512 bytes.

``activation_peak_bytes`` is the largest sum of MemTracker's ACT (what forward keeps) and TEMP (backward's
transients, a weight gradient included at the instant it is created) over the step: parameters, their gradients
and optimizer states are the budget's other terms. ``peak`` is MemTracker's snapshot at the largest total.
Results are cached as JSON per (config, shape, options, versions) in ``cache_dir()``.
"""
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata

from zerolab.sizing.hf_models import load_hf_config

ATTENTIONS = ("sdpa", "eager")
RECOMPUTES = ("none", "full")
PRECISIONS = ("bf16", "fp16", "fp32")
ENGINE_VERSION = 1  # bump when what a simulation measures changes: old cache entries then miss
CACHE_ENV = "ZEROLAB_CACHE_DIR"


@dataclass(frozen=True)
class Simulation:
    """One simulated step. Bytes throughout; ``peak`` maps MemTracker's categories to bytes at the total peak."""

    name: str
    config_sha256: str
    seq_len: int
    micro_batch: int
    attention: str
    recompute: str
    precision: str
    layers: int
    activation_peak_bytes: int
    activation_peak_phase: str  # "forward" or "backward"
    peak: dict
    seconds: float  # how long the simulation itself took (not a cache read)
    cached: bool = False

    def as_dict(self):
        return asdict(self)


def cache_dir():
    """$ZEROLAB_CACHE_DIR, else $XDG_CACHE_HOME/zerolab, else ~/.cache/zerolab."""
    if os.environ.get(CACHE_ENV):
        return os.environ[CACHE_ENV]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "zerolab")


def simulate(source, seq_len, micro_batch=1, attention="sdpa", recompute="none", precision="bf16", layers=None,
             cache=True, progress=True):
    """Simulate one training step of ``source`` (a preset name, a config.json path, a hub id, or a config dict).

    ``layers`` replaces the config's layer count (few-layer models of real widths, for tests). ``progress`` writes
    what is being built and run to stderr once the simulation has taken more than a second.
    """
    _check(seq_len, micro_batch, attention, recompute, precision, layers)
    name, config = ("config", dict(source)) if isinstance(source, dict) else load_hf_config(source)
    config_sha = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()
    options = dict(seq_len=seq_len, micro_batch=micro_batch, attention=attention, recompute=recompute,
                   precision=precision, layers=layers)
    path = os.path.join(cache_dir(), "simulate", f"{_cache_key(config_sha, options)}.json")
    if cache and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as handle:
                return Simulation(**{**json.load(handle), "name": name, "cached": True})
        except (OSError, ValueError, TypeError):
            pass  # a damaged entry is simulated again and rewritten
    from zerolab.sizing.simulate_run import run_step
    started = time.monotonic()
    measured = run_step(config, _Progress(progress, started), **options)
    result = Simulation(name=name, config_sha256=config_sha, seq_len=seq_len, micro_batch=micro_batch,
                        attention=attention, recompute=recompute, precision=precision, layers=measured["layers"],
                        activation_peak_bytes=measured["activation_peak_bytes"],
                        activation_peak_phase=measured["activation_peak_phase"], peak=measured["peak"],
                        seconds=round(time.monotonic() - started, 3))
    if cache:
        _write_atomically(path, result.as_dict())
    return result


def _cache_key(config_sha, options):
    versions = {package: _version(package) for package in ("torch", "transformers")}
    text = json.dumps({"config": config_sha, **options, **versions, "engine": ENGINE_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _write_atomically(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.replace(partial, path)


class _Progress:
    """Lines on stderr, the first after ``delay`` seconds, then at most one every ``every`` seconds."""

    def __init__(self, enabled, started, delay=1.0, every=0.5):
        self.enabled, self.started, self.delay, self.every = enabled, started, delay, every
        self.last = None

    def __call__(self, message, force=False):
        now = time.monotonic()
        if not self.enabled or now - self.started < self.delay:
            return
        if force or self.last is None or now - self.last >= self.every:
            self.last = now
            print(f"zerolab simulate: {message} ({now - self.started:.0f} s)", file=sys.stderr, flush=True)


def _check(seq_len, micro_batch, attention, recompute, precision, layers):
    for name, value in (("seq_len", seq_len), ("micro_batch", micro_batch), ("layers", layers)):
        if value is None and name == "layers":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    for name, value, allowed in (("attention", attention, ATTENTIONS), ("recompute", recompute, RECOMPUTES),
                                 ("precision", precision, PRECISIONS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
