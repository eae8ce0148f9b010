"""What isolation this machine offers, and the bubblewrap command line that gives it.

The sandbox is bubblewrap (Debian package `bubblewrap`) started as root, dropping to a grading-only uid with
setpriv. Inside it the student's kernel sees a fresh root with only the system (/usr, /etc), the Python
installation (read-only), its own submission folder (read-write, notebooks hidden) and a private /tmp; it has no
network, its own process tree (everything in it dies with the kernel), and it runs as a uid that owns nothing,
so RLIMIT_NPROC really caps its processes (the kernel ignores that limit for root).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from zerolab.base import i18n
from zerolab.grading.uids import BASE_UID  # noqa: F401 (grading uids: see uids.allocate)
SYSTEM_DIRS = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "DS_ACCELERATOR", "MPLBACKEND", "OMP_NUM_THREADS")
# The kernel's torch extensions cache, in its private /tmp (the course's runs need no op compiled there: DeepSpeed's
# shm comm op is skipped, zerolab.run.op_cache.skip_shm_comm_op, and graded cells do not offload the optimizer).
TORCH_EXTENSIONS_DIR = "/tmp/torch_extensions"


def probe():
    """(True, '') when the sandbox works here, else (False, why and what to do)."""
    if not shutil.which("bwrap"):
        return False, "bubblewrap is not installed (apt-get install bubblewrap)"
    if not shutil.which("setpriv"):
        return False, "setpriv (util-linux) is not installed"
    if os.geteuid() != 0:
        return False, "grading is not running as root, so it cannot switch the kernel to a grading-only user"
    from zerolab.grading import uids

    lease = uids.allocate()
    argv = _bwrap_base(read_only=python_paths(exclude=())) + [
        "--", *_drop_to(lease.uid), sys.executable, "-c", "import ipykernel"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"bubblewrap could not start: {error}"
    finally:
        lease.release()
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return False, f"bubblewrap failed here ({last}); a container may need CAP_SYS_ADMIN"
    return True, ""


def python_paths(exclude):
    """Directories the kernel needs to import Python packages, minus any that contain or sit inside `exclude`."""
    import site

    import zerolab

    # Not every sys.path entry: a path-style editable install puts a whole checkout (with solutions) there.
    candidates = {Path(sys.prefix), Path(sys.base_prefix), Path(zerolab.__file__).parent}
    candidates.update(Path(entry) for entry in site.getsitepackages() + [site.getusersitepackages()])
    keep = set()
    for path in candidates:
        path = path.resolve()
        if not path.is_dir() or any(_overlaps(path, Path(hidden).resolve()) for hidden in exclude):
            continue
        if any(str(path).startswith(f"/{top}/") or str(path) == f"/{top}" for top in SYSTEM_DIRS):
            continue  # already there
        keep.add(path)
    return sorted(keep)


def _overlaps(a, b):
    return a == b or a in b.parents or b in a.parents


def _bwrap_base(read_only, scratch=None):
    argv = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--proc", "/proc", "--dev", "/dev"]
    for top in SYSTEM_DIRS:
        path = Path("/") / top
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    if scratch is not None:
        # The private /tmp goes first: a checkout or virtual environment under /tmp is bound on top of it.
        argv += ["--bind", str(scratch), "/tmp"]
    made = set()
    for path in read_only:
        argv += _parents(path, made) + ["--ro-bind", str(path), str(path)]
    return argv


def _parents(path, made):
    """bwrap creates missing parent folders private (0700); make them 0755 so the grading uid can pass."""
    argv = []
    for parent in reversed(Path(path).parents):
        if str(parent) != "/" and parent not in made:
            made.add(parent)
            argv += ["--perms", "0755", "--dir", str(parent)]
    return argv


def _drop_to(uid):
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]


def command(kernel_argv, *, uid, workdir, scratch, ipc_dir, read_only, workdir_source=None):
    """The bwrap command that runs `kernel_argv` in `workdir` as `uid`, seeing only what it needs.
    `workdir_source` (default: workdir itself) is the folder shown at `workdir`: the disk-capped copy."""
    made = set()
    argv = _bwrap_base(read_only, scratch)
    argv += _parents(ipc_dir, made) + ["--bind", str(ipc_dir), str(ipc_dir)]
    argv += _parents(workdir, made) + ["--bind", str(workdir_source or workdir), str(workdir)]
    for notebook in sorted(Path(workdir).glob("*.ipynb")):
        argv += ["--ro-bind", "/dev/null", str(notebook)]  # the copy with hidden tests stays unreadable
    argv += ["--chdir", str(workdir), "--clearenv"]
    for key in KEEP_ENV:
        if key in os.environ:
            argv += ["--setenv", key, os.environ[key]]
    for key, value in os.environ.items():
        if key.startswith("NBGRADER"):  # not JPY_PARENT_PID: in its own pid namespace the kernel's parent is pid 1
            argv += ["--setenv", key, value]
    # The kernel cannot read its notebook here, so it is told the edition's language (zerolab/base/i18n.py).
    argv += ["--setenv", "ZEROLAB_LANG", i18n.folder_language(workdir)]
    argv += ["--setenv", "HOME", "/tmp", "--setenv", "MPLCONFIGDIR", "/tmp/.matplotlib",
             "--setenv", "TORCH_EXTENSIONS_DIR", TORCH_EXTENSIONS_DIR,
             "--setenv", "TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor",  # the venv's is read-only here
             "--setenv", "IPYTHONDIR", "/tmp/.ipython", "--setenv", "MALLOC_ARENA_MAX", "2"]
    argv += ["--cap-add", "CAP_SETUID,CAP_SETGID", "--", *_drop_to(uid), *kernel_argv]
    return argv
