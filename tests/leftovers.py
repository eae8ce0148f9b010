"""Processes that a finished grading run left behind, told apart from those of runs still going on: pytest runs
the suite on two workers, so another test may be grading at the same time.

A grading worker holds the lock file of its uid for as long as it lives (zerolab.grading.uids), so a process of a
grading uid whose lock nobody holds belongs to no running grading. A process caught ending between two looks is
not counted: it must still be there a second later."""
import fcntl
import time

import psutil

from zerolab.grading import uids


def grading_processes_left():
    """'pid uid command' of each process of an unleased grading uid, seen twice a second apart."""
    first = _unleased()
    if not first:
        return []
    time.sleep(1)
    second = _unleased()
    return [f"{pid} {second[pid][0]} {second[pid][1]}" for pid in first if pid in second]


def orphaned(command_part):
    """'pid command' of each process whose command line holds command_part and whose parent is gone (pid 1 took it)."""
    found = []
    for process in psutil.process_iter(["pid", "ppid", "cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if command_part in command and process.info["ppid"] == 1:
            found.append(f"{process.info['pid']} {command}")
    return found


def ranks_left():
    """This process's children and theirs, apart from its warm servers (zerolab.run.warm: lesson 08's rank launcher,
    the server of CPU runs), which wait for the next job by design: what a finished run must not leave."""
    from zerolab.run.warm import warm_pids

    warm = warm_pids()
    return [child for child in psutil.Process().children(recursive=True) if child.pid not in warm]


def cpu_seconds():
    """CPU seconds of this process and everything it started: the children it waited for, and the live ones (the
    warm rank launcher) with the jobs they waited for."""
    import resource

    children, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    total = children.ru_utime + children.ru_stime + me.ru_utime + me.ru_stime
    for child in psutil.Process().children():
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _unleased():
    found = {}
    for process in psutil.process_iter(["pid", "uids", "cmdline"]):
        uid = process.info["uids"].real if process.info["uids"] else None
        if uid is not None and uids.BASE_UID <= uid < uids.BASE_UID + uids.COUNT and not _leased(uid):
            found[process.info["pid"]] = (uid, " ".join(process.info["cmdline"] or []))
    return found


def _leased(uid):
    try:
        with open(uids.LOCK_DIR / f"uid-{uid}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the file closes
    except BlockingIOError:
        return True
    except OSError:
        return False  # no lock folder: no grading worker ever leased it
    return False
