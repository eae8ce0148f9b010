"""An exercise's explanation and figures appear only once its test cell has passed.

A test cell ends with ``passed("Q03")``, which prints "Right." and remembers it for this kernel. A teaching cell
that would show the answer starts with ``if revealed("Q03"):``; until that test has passed it prints one line
saying what to answer first instead, so Run All goes on to the end. A cell that needs the learner's code rather
than a passed test uses ``answer_first`` when the code is not there yet.
"""
from zerolab.base.i18n import tr

_passed = set()


def passed(name, message="Right."):
    """Called last in a test cell: every check above it held."""
    _passed.add(name)
    print(tr(message))


def revealed(name):
    """True once the test of ``name`` has passed in this kernel; else one line saying to answer it first."""
    if name in _passed:
        return True
    print(tr(f"answer {name} first: this cell shows its answer and figures once your test cell for it passes"))
    return False


def answer_first(name):
    """One line for a teaching cell that runs the learner's code from ``name`` when that code is not there yet."""
    print(tr(f"answer {name} first: this cell runs your code from it"))
