"""Import deepspeed without its start-up chatter on stdout.

DeepSpeed's logger writes to sys.stdout, and on a machine without a GPU (and no DS_ACCELERATOR) importing it
logs "Setting accelerator to CPU ..." - which would break `zerolab check --json`. Importing deepspeed takes
about 1.5-2 s on a 2-core CPU, so only the functions that need it call this, never a module import.
"""
import contextlib
import io
import logging
import sys


def import_deepspeed():
    """Import deepspeed once, with whatever it logs during the import kept off stdout."""
    if "deepspeed" in sys.modules:
        return sys.modules["deepspeed"]
    buffer, real_stdout = io.StringIO(), sys.stdout
    with contextlib.redirect_stdout(buffer):
        import deepspeed
    for handler in logging.getLogger("DeepSpeed").handlers:  # created during the import, pointing at the buffer
        if isinstance(handler, logging.StreamHandler) and handler.stream is buffer:
            handler.setStream(real_stdout)
    return deepspeed
