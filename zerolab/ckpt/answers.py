"""Lesson 09's answer parsing and its multiple-choice key (kept out of the notebook, so no cell shows it)."""
import contextlib

from zerolab.lesson.checks import number
from zerolab.engine.units import parse_bytes

LETTERS = "ABCD"

# Q: the error of load_state_dict on a ZeRO-3 model-states file; options in the order the lesson lists them
DIAGNOSIS_OPTIONS = (("world_size", "the checkpoint was saved on 2 ranks and is loaded into 1 process"),
                     ("truncated", "the file was cut short while it was being copied"),
                     ("placeholders", "ZeRO-3 partitions the parameters; the module in this file holds empty "
                                      "placeholders because the save did not gather them"),
                     ("dtype", "the weights were saved in bf16 and the model expects fp32"))
DIAGNOSIS_RIGHT = "placeholders"


def diagnosis_letter(option):
    """The letter under which the lesson lists ``option`` (an option id)."""
    return LETTERS[[option_id for option_id, _ in DIAGNOSIS_OPTIONS].index(option)]


def diagnosis_key():
    return diagnosis_letter(DIAGNOSIS_RIGHT)


def as_bytes(value, name="your answer"):
    """Bytes from an int or float (bytes) or a string with a unit ('1.2 GB', '1.1GiB', '0.0 MB', '6.6e-4 GiB',
    '711168 bytes'); AssertionError otherwise."""
    if type(value) is str:
        try:
            return parse_bytes(value, allow_zero=True)
        except ValueError:
            raise AssertionError(f"wrong unit: {name} is the string {value!r:.40}; write a number of bytes, or a "
                                 "string with a unit such as '1.5 GB' or '1.4 GiB'") from None
    return number(value, name, "bytes")


def quietly(function, *args, **kwargs):
    """``function(*args, **kwargs)`` with everything it prints kept out of the cell's output, Python's streams and
    file descriptors 1 and 2 alike (DeepSpeed's progress bars, a subprocess, the launcher's notes): nbgrader gives
    0 points to a test cell with any stderr output, and these are not the learner's mistakes."""
    import contextlib
    import io
    import os
    import sys
    import tempfile

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with tempfile.TemporaryFile() as sink, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            return function(*args, **kwargs)
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


class _NoProcessPool:
    """Stands in for ds_to_universal's ProcessPoolExecutor while lesson 09's exercise 5 is tested."""

    def __init__(self, max_workers=None, **_):
        raise AssertionError(
            # claim: ds-to-universal-in-process-with-one-worker
            f"process pool: ds_to_universal started a pool of {max_workers} worker processes, which the grading "
            "sandbox's process cap refuses (PermissionError there); pass num_extract_workers=1 and "
            "num_merge_workers=1, so that the conversion runs in this process")


@contextlib.contextmanager
# claim: ds-to-universal-in-process-with-one-worker
def no_process_pool():
    """A context in which DeepSpeed's ds_to_universal cannot start a process pool, in Jupyter as under grading:
    the visible test then fails where grading would, with a message that says why."""
    from deepspeed.checkpoint import ds_to_universal

    original = ds_to_universal.ProcessPoolExecutor
    ds_to_universal.ProcessPoolExecutor = _NoProcessPool
    try:
        yield
    finally:
        ds_to_universal.ProcessPoolExecutor = original
