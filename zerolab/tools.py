"""Python tools started by the interpreter that runs zerolab, never by a bare name looked up on PATH.

`.venv/bin/python -m pytest` or `.venv/bin/zerolab grade` run without the venv activated, so `.venv/bin` is not on
PATH and a bare `nbgrader` or `ninja` is either missing or someone else's. Everything zerolab starts goes through
these two helpers.
"""
import os
import sys


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
