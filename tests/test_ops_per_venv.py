"""Two checkouts on one machine, each with its own virtual environment, never rebuild or unlock each other's ops.

The second venv here is a real one (`python -m venv`) whose site-packages links to this one's packages: its torch
then lives at another path, as a second checkout's does, so torch's build command for an op differs from ours.
With one shared op cache (~/.cache/torch_extensions) each venv saw the other's build as stale and compiled the op
again, and one venv's build lock was removed as "stale" by the other while its build was running.
"""
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from zerolab.run.op_locks import clear_orphaned_locks, holders
from zerolab.base.interpreter import env_with_interpreter_bin, own_extensions_root, own_inductor_cache

pytestmark = pytest.mark.slow
SOURCE = Path(__file__).resolve().parent / "ops" / "probe_op.cpp"
# Builds (or loads) a one-function op the way a rank loads DeepSpeed's: a DeepSpeed CPU op builder, torch's JIT
# load, zerolab's per-venv folder and locks. It compiles in about 20 s where CPU Adam takes 100; everything the test
# checks (folders, locks, rebuilds) is the same for any op. Says where it lives and whether this load compiled it.
PROBE = f"""import json, os, time
os.environ['DS_ACCELERATOR'] = 'cpu'
import zerolab
from deepspeed.ops.op_builder.cpu.builder import CPUOpBuilder
from zerolab.run import op_cache


class ProbeOp(CPUOpBuilder):
    BUILD_VAR = 'DS_BUILD_ZEROLAB_PROBE_OP'
    NAME = 'zerolab_probe_op'

    def __init__(self):
        super().__init__(name=self.NAME)

    def absolute_name(self):
        return self.NAME

    def sources(self):
        return [{str(SOURCE)!r}]

    def include_paths(self):
        return []

    def cxx_args(self):
        return ['-O0', '-std=c++17']


builder = ProbeOp()
started = time.time()
assert builder.load(verbose=False).answer() == 42
print(json.dumps({{'folder': op_cache.build_directory(builder.NAME), 'name': builder.NAME,
                  'compiled': op_cache.compiled_after(builder.NAME, started)}}))
"""


def second_venv(base):
    """A venv at `base` whose site-packages holds a link to each of this venv's packages (zerolab included)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = next((base / "lib").glob("python3*/site-packages"))
    for entry in ours.iterdir():
        (theirs / entry.name).symlink_to(entry)
    return base / "bin" / "python"


def probe(python, **popen):
    env = env_with_interpreter_bin()
    env.pop("TORCH_EXTENSIONS_DIR", None)  # each interpreter picks its own, as a fresh shell's would
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env["PATH"]])  # its own bin first, then ninja's
    return subprocess.Popen([str(python), "-c", PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def result(process):
    out, err = process.communicate(timeout=1200)
    assert process.returncode == 0, err[-3000:]
    import json
    return json.loads(out.strip().splitlines()[-1])


def test_each_venv_builds_its_own_op_once_and_never_touches_the_others(tmp_path):
    if own_extensions_root() is None:
        pytest.skip("the suite runs outside a virtual environment: there is no venv of its own to keep ops in")
    ours = result(probe(sys.executable))  # built once per venv, in its own folder; later loads read the cache
    assert Path(ours["folder"]).is_relative_to(own_extensions_root())
    assert not result(probe(sys.executable))["compiled"], "this venv compiled its op again"
    library = Path(ours["folder"]) / f"{ours['name']}.so"
    built_at = library.stat().st_mtime

    other = second_venv(tmp_path / "other-venv")
    their_root = tmp_path / "other-venv" / "torch_extensions"
    build = probe(other)  # a new venv: its first load compiles, into its own folder
    lock = their_root / ours["name"] / "lock"
    while not lock.exists() and build.poll() is None:
        time.sleep(0.1)
    assert lock.exists(), "the other venv's build never took a lock in its own folder"
    assert build.pid in (holders(lock) or set())
    assert clear_orphaned_locks(their_root) == [] and lock.exists(), "a live build's lock was removed"
    theirs = result(build)
    assert theirs["compiled"] and Path(theirs["folder"]).is_relative_to(tmp_path / "other-venv")

    assert library.stat().st_mtime == built_at, "the other venv's build replaced this venv's op"
    assert not result(probe(sys.executable))["compiled"], "this venv compiled its op again after the other's build"
    assert not result(probe(other))["compiled"], "the other venv compiled its op again"


def test_zerolab_builds_ops_with_its_own_environments_ninja_whatever_path_says():
    """Debian's ninja (1.11) and pip's (1.13) hash one build command differently: an op built by one is rebuilt from
    scratch by the other. A process that imports zerolab from a shell whose PATH finds the system's first (CI's
    PATH, a grading sandbox) must still build with the ninja pip put beside its interpreter."""
    ours = Path(sys.executable).parent / "ninja"
    if not ours.exists():
        pytest.skip("this interpreter has no ninja of its own (not a venv made by scripts/setup.sh)")
    done = subprocess.run([sys.executable, "-c", "import shutil, zerolab; print(shutil.which('ninja'))"],
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": os.environ.get("HOME", "/")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(ours)


def test_a_system_python_with_a_ninja_beside_it_keeps_the_path_as_it_was(tmp_path):
    """Outside a virtual environment (Colab's /usr/bin/python3 has /usr/bin/ninja beside it) zerolab leaves PATH
    alone: its bin first could change which pip or python a learner's `!pip` finds."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "python3").symlink_to(os.path.realpath(os.path.join(sys.base_prefix, "bin", "python3")))
    (folder / "ninja").write_text("#!/bin/sh\n")
    (folder / "ninja").chmod(0o755)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([str(folder / "python3"), "-c",
                           "import os, sys, zerolab; print(sys.prefix == sys.base_prefix, os.environ['PATH'])"],
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "/usr/bin:/bin"]


def test_this_venvs_built_ops_are_up_to_date_for_its_own_ninja():
    """Every op in the venv's folder was last built by the venv's ninja: loading it again compiles nothing (the
    suite's summary also names an op rebuilt during the run)."""
    root, ninja = own_extensions_root(), Path(sys.executable).parent / "ninja"
    built = [library.parent for library in root.glob("*/*.so")] if root else []
    if not built or not ninja.exists():
        pytest.skip("no op built in this venv yet, or no ninja of its own")
    stale = {}
    for folder in built:
        done = subprocess.run([str(ninja), "-C", str(folder), "-n", "-d", "explain"], capture_output=True,
                              text=True, timeout=60)
        if "no work to do" not in done.stdout:
            stale[folder.name] = (done.stdout + done.stderr).splitlines()[:2]
    assert not stale, f"these ops would be compiled again on their next load: {stale}"


def test_torch_compile_caches_in_this_venv_unless_the_user_chose_a_folder():
    """torch.compile (DeepSpeed's Muon compiles its Newton-Schulz step) caches in /tmp/torchinductor_$USER by
    default, one folder for every checkout of a user; a process that imports zerolab caches in its own venv's, as
    inductor itself resolves it, and keeps a folder the user set."""
    if own_inductor_cache() is None:
        pytest.skip("the suite runs outside a virtual environment: there is no venv of its own to cache in")
    ask = "import zerolab; from torch._inductor.runtime.cache_dir_utils import cache_dir; print(cache_dir())"
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": os.environ.get("HOME", "/")}
    for chosen, expected in ((None, own_inductor_cache()), ("/tmp/a-users-choice", Path("/tmp/a-users-choice"))):
        done = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=120,
                              env={**env, **({"TORCHINDUCTOR_CACHE_DIR": chosen} if chosen else {})})
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip().splitlines()[-1]) == expected
