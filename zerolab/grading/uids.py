"""Grading uids for the sandbox, one per grading worker, never shared by two runs on one machine at once.

A worker takes the first uid from BASE_UID on whose lock file in LOCK_DIR it gets an exclusive flock, and that
no running process uses (a kernel of a killed run may outlive its lock). The lock lives as long as the open
file: a worker that dies, however it dies, gives its uid back; nothing to clean up.
"""
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from zerolab.errors import UserError

BASE_UID = 61000
COUNT = 1000  # 61000-61999: nothing else on the machine should use them
LOCK_DIR = Path("/run/zerolab-grading")


@dataclass
class Lease:
    uid: int
    handle: object  # the open lock file; closing it gives the uid back

    def release(self):
        self.handle.close()


def allocate(lock_dir=LOCK_DIR, first=BASE_UID, count=COUNT):
    """A Lease on a free grading uid (UserError when all `count` are taken)."""
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    busy = uids_in_use()
    for uid in range(first, first + count):
        if uid in busy:
            continue
        handle = open(lock_dir / f"uid-{uid}.lock", "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        if uid in uids_in_use():  # a process of a run that died started between the two looks
            handle.close()
            continue
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return Lease(uid, handle)
    raise UserError(f"all {count} grading uids from {first} are in use by other grading runs; wait for one to end")


def uids_in_use():
    """Real uids of the processes running now."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("Uid:"):
                    found.add(int(line.split()[1]))
                    break
        except (OSError, ValueError):
            continue  # the process ended while we looked
    return found
