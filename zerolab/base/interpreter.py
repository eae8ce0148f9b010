"""Python tools started by the interpreter that runs zerolab, never by a bare name looked up on PATH.

`.venv/bin/python -m pytest` or `.venv/bin/zerolab grade` run without the venv activated, so `.venv/bin` is not on
PATH and a bare `nbgrader` or `ninja` is either missing or someone else's. Everything zerolab starts goes through
these two helpers.
"""
import os
import sys
from pathlib import Path


def python_module(module, *args):
    """argv that runs `python -m MODULE ARGS...` with this interpreter (`nbgrader`, `jupyter`, `jupytext`, ...)."""
    return [sys.executable, "-m", module, *map(str, args)]


def interpreter_bin():
    """The folder of this interpreter's scripts (where pip put `ninja`): `.venv/bin` for a venv's python."""
    return os.path.dirname(sys.executable)


def env_with_interpreter_bin(env=None):
    """A copy of env (default: os.environ) whose PATH starts with interpreter_bin().

    DeepSpeed compiles its ops with torch's cpp_extension, which runs `ninja` by name: a rank must find the
    ninja that pip installed next to this interpreter, activated venv or not.
    """
    env = dict(os.environ if env is None else env)
    folder = interpreter_bin()
    parts = [part for part in env.get("PATH", os.defpath).split(os.pathsep) if part and part != folder]
    env["PATH"] = os.pathsep.join([folder, *parts])
    return env


def own_extensions_root():
    """Where this environment keeps DeepSpeed's JIT-compiled ops: `<venv>/torch_extensions` for a virtual
    environment's python, else None (torch's own default, ~/.cache/torch_extensions: Colab, a system python).

    torch caches every op in one folder per user, and the build command names the interpreter's own torch. Two
    checkouts with a venv each (a course copy and a grading copy, a developer's tree and a CI clone) then see each
    other's builds as stale and recompile them in turn, minutes each on 2 cores. One folder per venv ends that."""
    if sys.prefix == sys.base_prefix:
        return None
    return Path(sys.prefix) / "torch_extensions"


def own_inductor_cache():
    """Where this environment keeps torch.compile's compiled kernels (inductor's FX graph and Triton/C++ caches):
    `<venv>/torchinductor` for a virtual environment's python, else None (torch's default, /tmp/torchinductor_$USER,
    which every checkout of one user shares; DeepSpeed's Muon compiles its Newton-Schulz step there)."""
    if sys.prefix == sys.base_prefix:
        return None
    return Path(sys.prefix) / "torchinductor"


# Each cache folder zerolab keeps per environment, and the variable that records zerolab chose it (inherited by the
# processes it starts).
PER_ENVIRONMENT = {"TORCH_EXTENSIONS_DIR": own_extensions_root, "TORCHINDUCTOR_CACHE_DIR": own_inductor_cache}


def keep_ops_per_environment():
    """Point TORCH_EXTENSIONS_DIR at own_extensions_root() and TORCHINDUCTOR_CACHE_DIR at own_inductor_cache(),
    each unless someone else set it. zerolab's import calls this, so the lessons' kernels, every rank and tool
    zerolab starts, and grading's op seeding all use one folder of each.

    A value zerolab set in a parent process of another environment (a test that starts a kernel of a second venv)
    is replaced: that venv's ops belong in that venv.

    It also puts this environment's own `ninja` first on PATH: pip's ninja 1.13 and Debian's 1.11 hash a build
    command differently, so an op built by one is rebuilt from scratch by the other (minutes on 2 cores; a
    sandboxed grading kernel that found /usr/bin/ninja recompiled the op seeded into it inside a graded cell).
    Only a virtual environment's bin goes first (what activating it does): a system python's bin (/usr/bin on
    Colab) first on PATH could change which `pip` or `python` a learner's shell command finds."""
    if own_extensions_root() is not None and os.path.exists(os.path.join(interpreter_bin(), "ninja")):
        os.environ["PATH"] = env_with_interpreter_bin()["PATH"]
    for name, own_folder in PER_ENVIRONMENT.items():
        marker = "ZEROLAB_" + name
        current = os.environ.get(name)
        if current and current != os.environ.get(marker):
            continue  # the user's, or the grading sandbox's
        own = own_folder()
        if own is None:
            for variable in (name, marker):
                os.environ.pop(variable, None)
        else:
            os.environ[name] = os.environ[marker] = str(own)


def skip_the_slow_iri_checker():
    """Keep jsonschema from importing rfc3987-syntax in this process: 2 s of CPU (4 s on a loaded 2-core machine)
    spent building 38 Earley parsers at import, in every process that imports nbformat or nbgrader, for the "iri"
    and "iri-reference" formats, which no notebook or nbgrader schema uses (jsonschema issue #1428; checked by
    tests/test_tools_startup.py). zerolab's own commands and grading workers call it first thing; the lessons'
    kernels do not, so a learner's jsonschema is untouched."""
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)  # None in sys.modules: its import raises ImportError


def run_cache_from_environment():
    """ZEROLAB_RUN_CACHE (zerolab.run.run_cache), or None: unset, or nbgrader is grading."""
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    return os.environ.get("ZEROLAB_RUN_CACHE") or None


RUN_CACHE_AT_IMPORT = run_cache_from_environment()  # zerolab's import, before any learner's cell can change it


def poll_shell_in_slices(client, slice_s=1.0):
    """Make an nbclient NotebookClient look for a cell's reply every second instead of once per cell timeout.

    Under load, pyzmq's asyncio poll sometimes misses the wake-up of the reply while the kernel sends many
    messages on IOPub (widget cells do): nbclient then waits out the whole cell timeout before it reads a reply
    that was there all along (measured: lessons of 2-5 s took 300 s in CI, and with a 7 s timeout 6 s more).
    Pass as NotebookClient(on_notebook_start=...): hook(notebook) runs once the kernel client exists."""
    from queue import Empty
    from time import monotonic

    def hook(notebook=None, **_):
        channel = client.kc.shell_channel
        get_msg = channel.get_msg

        async def get_msg_in_slices(timeout=None):
            deadline = None if timeout is None else monotonic() + timeout
            while True:
                left = slice_s if deadline is None else min(slice_s, max(0.0, deadline - monotonic()))
                try:
                    return await get_msg(timeout=left)
                except Empty:
                    if deadline is not None and monotonic() >= deadline:
                        raise

        channel.get_msg = get_msg_in_slices

    return hook
