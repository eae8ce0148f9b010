"""DeepSpeed's CPU Adam on this machine: parameters stepped per second, measured once and kept in zerolab's cache.

`zerolab fit --measure-host` times ``deepspeed.ops.adam.DeepSpeedCPUAdam.step`` (the optimizer DeepSpeed builds for
``offload_optimizer``, engine.py ``get_optimizer_configuration``) on fp32 parameters with fp32 gradients, as
ZeRO-Offload calls it, using every core this process may use; `zerolab fit` reads the result from
``cache_path()`` as the node's CPU Adam throughput (zerolab.sizing.step_time). The cache is $ZEROLAB_CACHE_DIR, else
$XDG_CACHE_HOME/zerolab, else ~/.cache/zerolab.
"""
import json
import os
import platform
import time
from pathlib import Path

MEASURE_PARAMS = 2**25  # 33.5M parameters: 0.5 GB of fp32 state, a few tenths of a second a step on 2 cores
MEASURE_STEPS = 5


def cache_path():
    root = os.environ.get("ZEROLAB_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "zerolab")
    return Path(root) / "cpu_adam.json"


def measure_cpu_adam(params=MEASURE_PARAMS, steps=MEASURE_STEPS):
    """{"params_per_s", "params", "steps", "threads", "seconds", "machine", "deepspeed", "op_load_s", ...}: the
    fastest of ``steps`` timed steps after one untimed (which creates Adam's moments)."""
    from zerolab.base.interpreter import env_with_interpreter_bin

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ["PATH"] = env_with_interpreter_bin()["PATH"]  # the ninja next to this interpreter builds the op
    import deepspeed
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    weights = torch.nn.Parameter(torch.randn(int(params), dtype=torch.float32))
    weights.grad = torch.randn_like(weights)
    started = time.perf_counter()
    optimizer = DeepSpeedCPUAdam([weights], lr=1e-4)  # loads the op, compiling it when it is not cached
    op_load_s = time.perf_counter() - started
    optimizer.step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    best = min(times)
    return {"params_per_s": params / best, "params": int(params), "steps": steps, "seconds": best,
            "threads": torch.get_num_threads(), "machine": f"{platform.node()} ({os.cpu_count()} CPUs)",
            "deepspeed": deepspeed.__version__, "op_load_s": op_load_s,
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def save(result, path=None):
    path = Path(path or cache_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def load(path=None):
    """The stored measurement, or None when there is none (or it cannot be read)."""
    try:
        data = json.loads(Path(path or cache_path()).read_text())
        return data if float(data["params_per_s"]) > 0 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
