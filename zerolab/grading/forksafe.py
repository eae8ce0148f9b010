"""os.fork in a grading kernel that the per-cell cap's interrupt always stops, whatever moment it lands.

nbclient stops a cell past its cap by sending SIGINT to the kernel's process group. A fork bomb got past that in
two ways, so the same submission was graded differently from run to run:
- a copy of the kernel made by os.fork kept the kernel's handler: it raised KeyboardInterrupt and went on as a
  kernel of its own, on the kernel's sockets;
- os.fork runs Python's at-fork hooks (logging's among them) also when the fork fails, as it does all the time
  once the process cap is reached. An interrupt handled inside a hook raised KeyboardInterrupt there, where
  Python ignores exceptions: the interrupt was lost (and logging's lock stayed taken). Measured: the kernel
  forked 40 new children within 0.2 s of an interrupt that had killed all the others, and ignored up to a dozen
  interrupts in a row.

install() replaces os.fork: while a fork and its hooks run, SIGINT is only noted. Afterwards, whether the fork
worked or failed, the parent raises KeyboardInterrupt where the student's code called fork, and a child (which
gets the default action right away) is killed.
"""
import os
import signal
import threading

_fork = os.fork


def fork():
    handler = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(handler):
        return _fork()  # handlers belong to the main thread; a forked child keeps the default action
    noted = []
    signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    pid = None
    try:
        pid = _fork()
        return pid
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if pid == 0 else handler)
        if noted and pid == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # the interrupt ends a child, as the default action would
        if noted:
            handler(signal.SIGINT, None)  # KeyboardInterrupt, also in place of a failed fork's OSError


def _child_default():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def install():
    os.fork = fork
    # Forks that do not go through os.fork (C extensions, os.forkpty) still give the child the default action.
    os.register_at_fork(after_in_child=_child_default)
