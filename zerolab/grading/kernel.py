"""The kernel launcher nbgrader starts (through the zerolab-grading kernelspec) for every submission.

    python -m zerolab.grading.kernel POLICY.json CONNECTION_FILE [ipykernel arguments...]

It runs as the grading process's user, outside the sandbox: it applies the resource limits, starts
ipykernel (inside bubblewrap in "sandbox" mode), kills it when the notebook runs past its deadline, and
records what happened (exit status, deadline) in the worker's state file, which the student cannot reach.
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zerolab.grading import diskcap, sandbox

# ipykernel_launcher, with an os.fork that the per-cell cap's interrupt always stops (see forksafe).
KERNEL_MAIN = ("from zerolab.grading import forksafe\n"
               "forksafe.install()\n"
               "from ipykernel import kernelapp\n"
               "kernelapp.launch_new_instance()")


def main(argv):
    policy = json.loads(Path(argv[0]).read_text())
    connection_file, extra = argv[1], argv[2:]
    workdir = Path.cwd()
    scratch = Path(tempfile.mkdtemp(prefix="kernel-", dir=policy["scratch_root"]))
    if policy["mode"] == "sandbox":
        # The kernel works in a copy of its folder, with its /tmp, on a tmpfs of disk_limit bytes (see diskcap).
        uid = policy["uid"]
        kernel = [sys.executable, "-c", KERNEL_MAIN, "-f", "/tmp/kernel.json", *extra]
        inner = sandbox.command(kernel, uid=uid, workdir=workdir, workdir_source=scratch / "work",
                                scratch=scratch / "tmp", ipc_dir=policy["ipc_dir"],
                                read_only=[Path(p) for p in policy["read_only"]])
        argv = diskcap.command({"mount": str(scratch), "size": policy["disk_limit"], "uid": uid,
                                "workdir": str(workdir), "connection_file": connection_file}, inner)
    else:
        shutil.copy(connection_file, scratch / "kernel.json")
        argv = [sys.executable, "-c", KERNEL_MAIN, "-f", str(scratch / "kernel.json"), *extra]
    child = subprocess.Popen(argv, preexec_fn=lambda: _limit(policy))
    signal.signal(signal.SIGINT, lambda *_: None)  # nbclient interrupts the whole process group; the kernel handles it
    signal.signal(signal.SIGTERM, lambda *_: child.kill())
    try:
        status = child.wait(timeout=policy["notebook_timeout"])
        _record(policy, {"event": "exit", "status": status})
    except subprocess.TimeoutExpired:
        _record(policy, {"event": "notebook_timeout", "seconds": policy["notebook_timeout"]})
        child.kill()
        status = child.wait()
    shutil.rmtree(scratch, ignore_errors=True)
    return 0 if status == 0 else 1


def _limit(policy):
    """Runs in the child before exec: limits inherited by the kernel and everything it starts."""
    # bubblewrap would die of the interrupt nbclient sends to the process group (and take the kernel with it);
    # ipykernel installs its own SIGINT handler around each cell, so interrupts still reach the student's code.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    memory = policy["memory_limit"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    disk = policy["disk_limit"]  # one file; the sandbox's tmpfs caps all of them together
    resource.setrlimit(resource.RLIMIT_FSIZE, (disk, disk))
    cpu = policy["notebook_timeout"] + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if policy["mode"] == "sandbox":  # counted per uid: only meaningful for the grading-only uid
        resource.setrlimit(resource.RLIMIT_NPROC, (policy["max_processes"], policy["max_processes"]))


def _record(policy, event):
    event["time"] = time.time()
    state = Path(policy["state_file"])
    temporary = state.with_suffix(".tmp")
    temporary.write_text(json.dumps(event))
    os.replace(temporary, state)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
