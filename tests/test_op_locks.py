"""A DeepSpeed op build lock is removed only when no process holds it, however old it is; one a live build holds is
kept, however old it looks. Locks are taken with torch's own FileBaton, as a build takes them."""
import os
import subprocess
import sys
import time

from zerolab.run.op_locks import clear_orphaned_locks, holders

# What torch does when a build begins: take the baton, then work (here: wait for stdin to close).
HOLD = ("import sys\nfrom torch.utils.file_baton import FileBaton\nbaton = FileBaton(sys.argv[1])\n"
        "assert baton.try_acquire()\nprint('held', flush=True)\nsys.stdin.read()\n")


def lock_in(root, op):
    folder = root / "py311_cpu" / op
    folder.mkdir(parents=True)
    return folder / "lock"


def age(path, seconds):
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_lock_a_live_build_holds_is_kept_however_old_and_removed_once_its_owner_is_gone(tmp_path):
    lock = lock_in(tmp_path, "cpu_adam")
    build = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert build.stdout.readline() == "held\n"
        age(lock, 3 * 3600)  # three hours: a build on a loaded machine, or another checkout's
        assert holders(lock) == {build.pid}
        assert clear_orphaned_locks(tmp_path) == [] and lock.exists(), "a live build's lock was removed"
    finally:
        build.kill()
        build.wait()
    assert holders(lock) == set()
    assert clear_orphaned_locks(tmp_path) == [lock] and not lock.exists()


def test_an_orphaned_lock_is_removed_however_young(tmp_path):
    lock = lock_in(tmp_path, "deepspeed_shm_comm")
    lock.touch()  # left by a build killed a second ago: nobody holds it
    assert clear_orphaned_locks(tmp_path) == [lock]


def test_a_missing_cache_is_nothing_to_do(tmp_path):
    assert clear_orphaned_locks(tmp_path / "absent") == []
    assert holders(tmp_path / "absent" / "lock") == set()


def test_each_interpreter_picks_its_own_folder_unless_someone_chose_one(tmp_path):
    """A kernel of another venv started from this one inherits this venv's choice, and must not keep it; a folder
    the user (or the grading sandbox) chose is kept."""
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(other)], check=True)
    ask = "import os, zerolab; print(os.environ.get('TORCH_EXTENSIONS_DIR'))"
    ours = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, check=True).stdout.strip()
    inherited = dict(os.environ, TORCH_EXTENSIONS_DIR=ours, ZEROLAB_TORCH_EXTENSIONS_DIR=ours,
                     PYTHONPATH=os.pathsep.join(sys.path))
    theirs = subprocess.run([str(other / "bin" / "python"), "-c", ask], env=inherited, capture_output=True,
                            text=True, check=True).stdout.strip()
    assert theirs == str(other / "torch_extensions") and theirs != ours
    chosen = dict(inherited, TORCH_EXTENSIONS_DIR="/srv/ops")
    assert subprocess.run([str(other / "bin" / "python"), "-c", ask], env=chosen, capture_output=True, text=True,
                          check=True).stdout.strip() == "/srv/ops"
