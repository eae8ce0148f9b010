"""Orphaned build locks of DeepSpeed's JIT ops, found and removed before a run waits on them forever.

torch's cpp_extension guards each op's build folder with a `lock` file (FileBaton). The process that takes it
keeps the file open until the build ends, then closes and deletes it. A process killed while it compiles (a
timeout, Ctrl-C in a notebook, a CI job stopped) leaves the file behind, and every later load of the op waits for
it to vanish: forever, printing "still building".

So a lock is orphaned when no process has it open, and only then is it removed. Its age says nothing: a build
can take eight minutes on a loaded machine, and a lock of another checkout's build is as young or old as ours.
Whoever has the file open is read from /proc (the kernel's own record of each process's open files); where that
cannot be read (no /proc, or a lock another user took) the lock is left alone.
"""
import os
import time
from pathlib import Path

RECHECK_S = 0.5  # torch closes the lock, then deletes it: a lock still there and unheld after this is orphaned


def extensions_root():
    """Where torch caches JIT-built ops: $TORCH_EXTENSIONS_DIR (zerolab sets it per venv), else
    ~/.cache/torch_extensions."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def holders(lock):
    """The pids of the processes that have `lock` open, or None when that cannot be known here."""
    return _holders([lock])[lock]


def _holders(locks):
    """{lock: pids that have it open (None: cannot be known)}, from one pass over /proc."""
    wanted, found = {}, {}
    for lock in locks:
        try:
            status = os.stat(lock)
        except FileNotFoundError:
            found[lock] = set()
            continue
        knowable = os.path.isdir("/proc/self/fd") and (status.st_uid == os.geteuid() or os.geteuid() == 0)
        found[lock] = set() if knowable else None
        if knowable:
            wanted[(status.st_dev, status.st_ino)] = lock
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        folder = f"/proc/{entry.name}/fd"
        try:
            descriptors = os.listdir(folder)
        except OSError:  # gone, or another user's process (which cannot hold a lock this user created)
            continue
        for descriptor in descriptors:
            try:
                opened = os.stat(f"{folder}/{descriptor}")
            except OSError:
                continue
            lock = wanted.get((opened.st_dev, opened.st_ino))
            if lock is not None:
                found[lock].add(int(entry.name))
    return found


def clear_orphaned_locks(root=None):
    """Remove every op build lock under root (default: this environment's ops) that no live process holds;
    return the paths removed."""
    root = Path(root) if root is not None else extensions_root()
    if not root.is_dir():
        return []
    first = _holders([lock for lock in root.glob("**/lock") if lock.is_file()])
    unheld = [lock for lock, pids in first.items() if pids == set()]
    if not unheld:
        return []
    time.sleep(RECHECK_S)
    removed = []
    for lock, pids in _holders(unheld).items():
        if pids == set():
            try:
                lock.unlink()
                removed.append(lock)
            except FileNotFoundError:
                pass
    return removed
