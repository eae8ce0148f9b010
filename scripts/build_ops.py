"""Compile, once, the DeepSpeed op the course's CPU runs need, so lesson 06's first run starts at once.

    DS_ACCELERATOR=cpu python scripts/build_ops.py      (scripts/setup.sh runs this)

The op is CPU Adam (used with optimizer offload). DeepSpeed's shared-memory communication op is not built: only
tensor-parallel inference uses it, and the course's runs tell DeepSpeed to skip it
(zerolab.run.op_cache.skip_shm_comm_op). The op is compiled with g++ and ninja on first use and cached in this virtual environment's own folder,
.venv/torch_extensions (zerolab.base.interpreter.own_extensions_root; $TORCH_EXTENSIONS_DIR overrides it), so another
checkout's venv never rebuilds it; an op already cached loads in a second. A line every 15 s shows the build is alive.
`bash scripts/setup.sh` runs it in the background (log: .venv/build_ops.log); a run that needs an op meanwhile
waits for this build (torch's lock in the op's folder) and shows its progress (zerolab/run/progress.py).
"""
import os
import sys
import threading
import time

OPS = ("CPUAdamBuilder",)
TICK_S = 15


def build(name):
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder(name)
    if builder is None:
        print(f"build_ops: {name} is not offered by DeepSpeed's {get_accelerator().device_name()} accelerator; skipped")
        return 0.0
    from zerolab.run import op_cache

    started = time.time()
    done = threading.Event()

    def tick():
        while not done.wait(TICK_S):
            print(f"  still compiling {builder.NAME}: {time.time() - started:.0f} s", flush=True)

    typical = op_cache.TYPICAL_BUILD_S.get(builder.NAME)
    about = f", about {round(typical / 60)} min on 2 cores" if typical else ""
    print(f"DeepSpeed op {builder.NAME}: loading, or compiling on first use{about} ...", flush=True)
    threading.Thread(target=tick, daemon=True).start()
    try:
        builder.load(verbose=False)
    finally:
        done.set()
    seconds = time.time() - started
    how = "compiled now" if op_cache.compiled_after(builder.NAME, started) else "loaded from the cache"
    print(f"DeepSpeed op {builder.NAME}: {how} in {seconds:.0f} s", flush=True)
    return seconds


def main():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import zerolab  # noqa: F401 (sets TORCH_EXTENSIONS_DIR to this venv's own op folder)
    from zerolab.run.op_locks import clear_orphaned_locks

    for lock in clear_orphaned_locks():
        print(f"build_ops: removed a build lock that no process holds (left by a killed build): {lock}", flush=True)
    total = sum(build(name) for name in OPS)
    print(f"build_ops: ready in {total:.0f} s (cached: later runs start at once)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
