"""Stale build locks of DeepSpeed's JIT ops, found and removed before a run waits on them forever.

torch's cpp_extension guards each op's build folder with a `lock` file (FileBaton). A process killed while it
compiles (a timeout, Ctrl-C in a notebook, a CI job stopped) leaves that file behind, and every later load of the
op then waits for it to vanish: forever, printing "still building". A lock is taken as stale when it is older
than `min_age_s` and no ninja process (the build torch runs) is alive on this machine.
"""
import os
import time
from pathlib import Path

import psutil

MIN_AGE_S = 120


def extensions_root():
    """Where torch caches JIT-built ops: $TORCH_EXTENSIONS_DIR, else ~/.cache/torch_extensions."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def _ninja_running():
    for process in psutil.process_iter(["name"]):
        if (process.info.get("name") or "").startswith("ninja"):
            return True
    return False


def clear_stale_locks(root=None, min_age_s=MIN_AGE_S, building=_ninja_running):
    """Remove every stale op build lock under root; return the paths removed.

    building() says whether a build is running on this machine now (then no lock is touched).
    """
    root = Path(root) if root is not None else extensions_root()
    if not root.is_dir():
        return []
    now = time.time()
    old = [lock for lock in root.glob("**/lock") if lock.is_file() and now - lock.stat().st_mtime > min_age_s]
    if not old or building():
        return []
    removed = []
    for lock in old:
        try:
            lock.unlink()
            removed.append(lock)
        except FileNotFoundError:
            pass
    return removed
