"""Where a DeepSpeed JIT op stands in torch's extension cache: built, being built by another process, or neither.

torch builds an op in <extensions root>/<name>/ (torch.utils.cpp_extension._get_build_directory) under a `lock`
file it creates when the build starts and removes when it ends; the op's <name>.so is written at the end. So a
lock says "compiling since the lock's time" (scripts/setup.sh's background build, or another rank), and a .so
written after a load began says that load compiled the op rather than loading it from the cache.
"""
import os

# Measured cold builds of cpu_adam on 2 cores (scripts/build_ops.py, TORCH_EXTENSIONS_DIR emptied): 42 s at load
# average 4, 198 s at 2-11, 309 s at 9-15, 401 s at 12-17 (issue 25: 289 s). The figure below is the middle of that
# range, what a student is told to expect.
TYPICAL_BUILD_S = {"cpu_adam": 180}


def skip_shm_comm_op():
    """Tell DeepSpeed not to build its shared-memory comm op; call before deepspeed.init_distributed/initialize.

    DeepSpeed's CPU accelerator compiles that op when distributed starts (a minute or more on 2 cores, once per
    environment), yet only inference_all_reduce (tensor-parallel inference) calls it: ZeRO training sends every
    collective through torch.distributed, gloo here, with or without it (claim deepspeed-shm-op-only-for-inference).
    Marked incompatible, the op is left unbuilt and inference_all_reduce would fall back to torch's all_reduce.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def probe_compatible_ops():
    """Run DeepSpeed's op-compatibility probe now, in a process that forks ranks, so that they inherit its answer.

    deepspeed.ops.__compatible_ops__ is computed on first use, and the probe compiles a test program with gcc (the
    async_io op looks for libaio's io_submit): a fraction of a second of CPU in every forked rank otherwise, and
    short-lived compiler processes under it."""
    import deepspeed.ops

    return deepspeed.ops.__compatible_ops__


def build_directory(name):
    from torch.utils.cpp_extension import _get_build_directory

    return _get_build_directory(name, False)


def state(name):
    """{'cached': the op's .so exists, 'building_since': the epoch time another build took the lock, or None}."""
    folder = build_directory(name)
    try:
        since = os.stat(os.path.join(folder, "lock")).st_mtime
    except FileNotFoundError:
        since = None
    return {"cached": os.path.exists(os.path.join(folder, f"{name}.so")), "building_since": since}


def compiled_after(name, started):
    """Whether the op's .so was written at or after the epoch time `started` (a build finished since then)."""
    try:
        return os.stat(os.path.join(build_directory(name), f"{name}.so")).st_mtime >= started - 1
    except FileNotFoundError:
        return False
