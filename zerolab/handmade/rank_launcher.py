"""A warm launcher: one process per kernel that has imported what the ranks need, and forks a job's launcher on
request, so that a job starts its ranks in milliseconds instead of the seconds torch's import takes.

``python -m zerolab.handmade.rank_launcher`` reads one JSON request a line on stdin (job, ranks, env, cwd, log) and
answers on stdout: {"pid": P} once it has forked the job's launcher P (a session of its own, which forks the ranks
as ``python -m zerolab.handmade.rank`` would), then {"ended": P, "code": C} when P exits. It never runs the learner's
code itself, so nothing the learner does outlives a job in it. It ends when its stdin closes (the kernel is gone),
taking any job still running with it.

``start(job_path, ranks, env, log_path)`` is the kernel's side: it starts the launcher on first use and returns a
handle with the ``pid``, ``wait`` and ``poll`` of a ``subprocess.Popen``, or None when no warm launcher can be had
(zerolab.handmade.harness then starts a cold one).
"""
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import traceback

_LAUNCHER = None
_LOCK = threading.Lock()


def start(job_path, ranks, env, log_path):
    global _LAUNCHER
    with _LOCK:
        for _ in range(2):  # a launcher that died is replaced once
            if _LAUNCHER is None or not _LAUNCHER.alive():
                try:
                    _LAUNCHER = _Launcher(env)
                except OSError:
                    return None
            job = _LAUNCHER.submit({"job": job_path, "ranks": ranks, "env": env, "cwd": os.getcwd(),
                                    "log": log_path})
            if job is not None:
                return job
            _LAUNCHER.close()
            _LAUNCHER = None
        return None


def shut_down():
    """Stop this process's warm launcher now (the next job starts a new one)."""
    global _LAUNCHER
    with _LOCK:
        if _LAUNCHER is not None:
            _LAUNCHER.close()
        _LAUNCHER = None


def warm_pid():
    """The pid of this process's warm launcher, or None: it outlives a job by design."""
    launcher = _LAUNCHER
    return launcher.process.pid if launcher is not None and launcher.alive() else None


class _Launcher:
    """The kernel's side of the warm launcher process."""

    def __init__(self, env):
        self.process = subprocess.Popen([sys.executable, "-m", __name__], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self.owner = os.getpid()  # a forked copy of the kernel starts its own
        self.started = queue.Queue()
        self.codes = {}
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def alive(self):
        return self.owner == os.getpid() and self.process.poll() is None

    def close(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        self.process.wait()

    def submit(self, request):
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            pid = self.started.get(timeout=120)  # the first request waits for the imports
        except (OSError, ValueError, queue.Empty):
            return None
        return None if pid is None else _Job(self, pid)

    def _read(self):
        for line in self.process.stdout:
            message = json.loads(line)
            if "pid" in message:
                self.started.put(message["pid"])
            else:
                with self.changed:
                    self.codes[message["ended"]] = message["code"]
                    self.changed.notify_all()
        self.started.put(None)
        with self.changed:
            self.changed.notify_all()


class _Job:
    """A job's launcher, as zerolab.handmade.harness and zerolab.run.launch.stop use a Popen."""

    def __init__(self, launcher, pid):
        self.launcher, self.pid, self.args = launcher, pid, [__name__, str(pid)]
        self.returncode = None

    def poll(self):
        with self.launcher.changed:
            self.returncode = self.launcher.codes.get(self.pid, self.returncode)
            if self.returncode is None and self.launcher.process.poll() is not None:
                self.returncode = 1  # the warm launcher died, and the job with it
        return self.returncode

    def wait(self, timeout=None):
        with self.launcher.changed:
            if not self.launcher.changed.wait_for(lambda: self.poll() is not None, timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


def serve():
    from zerolab.handmade import rank

    rank.import_what_ranks_need()
    jobs, pending = set(), b""
    try:
        while True:
            ready, _, _ = select.select([0], [], [], 0.05 if jobs else None)  # idle: wait for a job
            if ready:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    return
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    pid = os.fork()
                    if pid == 0:
                        _run_job(json.loads(line))  # never returns
                    jobs.add(pid)
                    _answer({"pid": pid})
            while jobs:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                jobs.discard(pid)
                _answer({"ended": pid, "code": os.waitstatus_to_exitcode(status)})
    finally:
        for pid in jobs:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def _run_job(request):
    """In the forked child: become the job's launcher, with the kernel's environment and folder of this moment."""
    import tempfile

    from zerolab.handmade import rank

    code = 1
    try:
        os.setsid()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)  # the answers pipe is fd 1 in the warm launcher: the job no longer holds it
        os.dup2(log, 2)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        os.chdir(request["cwd"])
        code = rank.fork_ranks_now(request["job"], request["ranks"])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _answer(message):
    os.write(1, (json.dumps(message) + "\n").encode())


if __name__ == "__main__":
    serve()
