"""Turn a failed rank into one clear message: what went wrong and which knob fixes it."""
import signal


class RunFailed(Exception):
    """A run stopped because a rank failed; every rank has been stopped. ``str()`` is the whole message."""

    def __init__(self, message, rank=None, log_tail=""):
        super().__init__(message)
        self.rank = rank
        self.log_tail = log_tail


class RunTimeout(RunFailed):
    """The run outlived its time limit; every rank has been stopped."""


CPU_ADAM_FIX = ("DeepSpeed could not build its C++ CPU Adam op (needed by offload_optimizer). Install a C++ "
                "compiler and ninja (Debian/Ubuntu: apt-get install g++; pip install ninja), then clear a stale "
                "build from this environment's op cache, TORCH_EXTENSIONS_DIR (zerolab sets it to the virtual "
                "environment's torch_extensions folder; ~/.cache/torch_extensions outside one), and run again")
OP_BUILD_FIX = ("DeepSpeed could not compile one of its C++ ops. Install a C++ compiler and ninja "
                "(apt-get install g++; pip install ninja), clear this environment's op cache, "
                "TORCH_EXTENSIONS_DIR (.venv/torch_extensions in a virtual environment, else "
                "~/.cache/torch_extensions), and run again")
MEMORY_FIX = ("the rank ran out of memory. Free memory per rank by: a higher ZeRO stage (partitions more state), "
              "offload_optimizer / offload_param to cpu, a smaller train_micro_batch_size_per_gpu, fewer ranks "
              "on this machine, or a smaller model")

_RULES = (  # (words in the error or log, what to tell the user); first match wins
    (("DeepSpeedCPUAdam requires the cpu_adam op", "Unable to JIT load the cpu_adam op",
      "object has no attribute 'ds_opt_adam'"), CPU_ADAM_FIX),
    (("ninja not being installed", "Ninja is required", "Error building extension", "c++: not found",
      "No such file or directory: 'c++'", "failed to build/load"), OP_BUILD_FIX),
    (("CUDA out of memory", "OutOfMemoryError", "MemoryError", "DefaultCPUAllocator: can't allocate memory",
      "not enough memory"), MEMORY_FIX),
)


def explain_failure(rank, error, returncode, log_tail):
    """One message for a failed rank. ``error`` is the rank's error record (type, message, traceback) or None."""
    text = "\n".join(filter(None, [(error or {}).get("type"), (error or {}).get("message"),
                                   (error or {}).get("traceback"), log_tail]))
    for words, advice in _RULES:
        if any(word.lower() in text.lower() for word in words):
            return f"rank {rank} failed: {advice}" + _cause(error)
    if returncode == -signal.SIGKILL and error is None:
        return (f"rank {rank} was killed (SIGKILL, exit -9), most likely by the operating system's out-of-memory "
                f"killer: {MEMORY_FIX}")
    if error is not None:
        return f"rank {rank} failed: {error['type']}: {_first_line(error['message'])}; every rank was stopped"
    last = next((line for line in reversed(log_tail.splitlines()) if line.strip()), "no output")
    return f"rank {rank} exited with status {returncode} ({last.strip()}); every rank was stopped"


def _cause(error):
    if not error:
        return ""
    return f" (the error was {error['type']}: {_first_line(error['message'])})"


def _first_line(message, most=3):
    """A message on one line: pydantic puts the field and the reason on the lines after the first."""
    lines = [line.strip() for line in str(message).splitlines()
             if line.strip() and not line.strip().startswith("For further information")]
    return ": ".join(lines[:most]) if lines else "no message"
