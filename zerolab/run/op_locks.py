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

from zerolab.tools import extensions_root

RECHECK_S = 0.5  # torch closes the lock, then deletes it: a lock still there and unheld after this is orphaned

__all__ = ["extensions_root", "holders", "clear_orphaned_locks"]


def holders(lock):
    """The pids of the processes that have `lock` open, or None when that cannot be known here."""
    try:
        wanted = os.stat(lock)
    except FileNotFoundError:
        return set()
    if not os.path.isdir("/proc/self/fd") or (wanted.st_uid != os.geteuid() and os.geteuid() != 0):
        return None
    found = set()
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
            if (opened.st_dev, opened.st_ino) == (wanted.st_dev, wanted.st_ino):
                found.add(int(entry.name))
    return found


def clear_orphaned_locks(root=None):
    """Remove every op build lock under root (default: this environment's ops) that no live process holds;
    return the paths removed."""
    root = Path(root) if root is not None else extensions_root()
    if not root.is_dir():
        return []
    unheld = [lock for lock in root.glob("**/lock") if lock.is_file() and holders(lock) == set()]
    if unheld:
        time.sleep(RECHECK_S)
    removed = []
    for lock in unheld:
        if holders(lock) == set():
            try:
                lock.unlink()
                removed.append(lock)
            except FileNotFoundError:
                pass
    return removed
