"""Warm processes: one per kernel and kind, that has done the imports its children need once and forks a child on
request, so that a child starts in milliseconds instead of the seconds torch's and DeepSpeed's imports take.

A server is a module run as ``python -m MODULE`` that calls ``serve(warm_up, run)``: it calls ``warm_up()``, then
reads one JSON request a line on stdin ({"env", "cwd", "log", ...}) and answers on stdout {"pid": P} once it has
forked child P (a session of its own, its output in request["log"], os.environ replaced by request["env"], running
``run(request)``, whose return value is its exit code), then {"ended": P, "code": C} when P exits. The server runs
nothing of a request itself, so nothing a child does outlives it in the server. It ends when its stdin closes (the
kernel is gone), killing every child still running.

``start(server, request)`` is the kernel's side: it starts the server on first use (with the kernel's environment of
that moment) and returns a handle with the ``pid``, ``poll``, ``wait`` and ``returncode`` of a subprocess.Popen, or
None when no warm server can be had (the caller then starts a cold process).
"""
import atexit
import gc
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import traceback

_SERVERS = {}  # module name -> _Server, this process's warm servers
_LOCK = threading.Lock()


def start(server, request):
    with _LOCK:
        for _ in range(2):  # a server that died is replaced once
            current = _SERVERS.get(server)
            if current is None or not current.alive():
                try:
                    current = _SERVERS[server] = _Server(server, request["env"])
                except OSError:
                    return None
            child = current.submit(request)
            if child is not None:
                return child
            current.close()
            _SERVERS.pop(server, None)
        return None


def shut_down(server):
    """Stop this process's warm ``server`` now (the next request starts a new one)."""
    with _LOCK:
        current = _SERVERS.pop(server, None)
        if current is not None:
            current.close()


@atexit.register
def _shut_down_all():
    """At exit, so that no server outlives this process even for the moment it takes to see its stdin close."""
    for server in list(_SERVERS):
        shut_down(server)


def warm_pid(server):
    """The pid of this process's warm ``server``, or None: it outlives a request by design."""
    current = _SERVERS.get(server)
    return current.process.pid if current is not None and current.alive() else None


def warm_pids():
    """The pids of every warm server this process holds (tests tell them from processes a run left behind)."""
    return {pid for pid in (warm_pid(server) for server in list(_SERVERS)) if pid is not None}


class _Server:
    """The kernel's side of a warm server process."""

    def __init__(self, server, env):
        self.process = subprocess.Popen([sys.executable, "-m", server], env=env, stdin=subprocess.PIPE,
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
        return None if pid is None else _Child(self, pid)

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


class _Child:
    """A forked child, as its callers use a subprocess.Popen."""

    def __init__(self, server, pid):
        self.server, self.pid, self.args = server, pid, ["warm child", str(pid)]
        self.returncode = None

    def poll(self):
        with self.server.changed:
            self.returncode = self.server.codes.get(self.pid, self.returncode)
            if self.returncode is None and self.server.process.poll() is not None:
                self.returncode = 1  # the server died, and the child with it
        return self.returncode

    def wait(self, timeout=None):
        with self.server.changed:
            if not self.server.changed.wait_for(lambda: self.poll() is not None, timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


def serve(warm_up, run):
    """The server's loop: ``warm_up()`` once, then a forked child running ``run(request)`` per request line."""
    warm_up()
    # What the imports made is never garbage and never the children's: frozen, the collector neither scans it in a
    # child (copy-on-write keeps the pages shared) nor lists it in gc.get_objects(), which lesson 08's memory checks
    # call dozens of times a step to find the tensors a learner's code keeps (0.03 s a call over torch's objects).
    gc.freeze()
    children, pending = set(), b""
    try:
        while True:
            ready, _, _ = select.select([0], [], [], 0.05 if children else None)  # idle: wait for a request
            if ready:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    return
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    pid = os.fork()
                    if pid == 0:
                        _child(run, json.loads(line))  # never returns
                    children.add(pid)
                    _answer({"pid": pid})
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                children.discard(pid)
                _answer({"ended": pid, "code": os.waitstatus_to_exitcode(status)})
    finally:
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def _child(run, request):
    """In the forked child: the environment and folder the kernel had when it made the request, then run it."""
    import tempfile

    code = 1
    try:
        os.setsid()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)  # the answers pipe is fd 1 in the server: the child no longer holds it
        os.dup2(log, 2)
        sys.stdout.reconfigure(line_buffering=True)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        os.chdir(request["cwd"])
        code = run(request) or 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _answer(message):
    os.write(1, (json.dumps(message) + "\n").encode())
