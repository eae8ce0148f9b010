"""A later exercise that calls an earlier one is graded on its own logic, so one mistake costs points once.

For the rest of the test cell, the notebook's name of the earlier function (``pcie_bytes``) calls the learner's
function and the course's reference side by side: where the two agree, the learner's own value goes on (as plain
numbers, so a rigged type cannot ride along); where they disagree, the reference's value does, and a note says so
(what the learner's function gave, never what the reference gives). References should be exact, so that agreeing
means right at any size. The learner's function is put back when the
cell ends, also when it fails (IPython's post_run_cell event).

    earlier = with_reference("pcie_bytes", reference_pcie_bytes, "exercise 3", "exercise 4")
    ...  # the test's asserts on pcie_seconds, which may call pcie_bytes
    earlier.note()
"""
import math

from zerolab.base.i18n import tr


def with_reference(name, reference, exercise, later, namespace=None, rel_tol=1e-6, abs_tol=2):
    """Put ``reference`` in the place of the learner's ``name`` until the cell ends; returns the Substitute."""
    substitute = Substitute(name, reference, exercise, later, namespace, rel_tol, abs_tol)
    substitute.install()
    return substitute


class Substitute:
    def __init__(self, name, reference, exercise, later, namespace, rel_tol, abs_tol):
        self.name, self.reference, self.exercise, self.later = name, reference, exercise, later
        self.rel_tol, self.abs_tol = rel_tol, abs_tol
        self.shell = _shell() if namespace is None else None
        self.namespace = namespace if namespace is not None else (self.shell.user_ns if self.shell else {})
        self.missing = object()
        self.learner = self.namespace.get(name, self.missing)
        self.differences = []
        self.noted = False

    def install(self):
        self.namespace[self.name] = self._call
        if self.shell is not None:
            self.shell.events.register("post_run_cell", self._restore_after_cell)

    def restore(self):
        if self.learner is self.missing:
            self.namespace.pop(self.name, None)
        else:
            self.namespace[self.name] = self.learner

    def note(self):
        """Print, once, what the learner's earlier function gave where it disagrees with the reference."""
        if not self.differences or self.noted:
            return
        self.noted = True
        call, got = self.differences[0]
        print(tr(f"note: your {self.name} from {self.exercise} gives {got} for {call}, which {self.exercise}'s test "
                 f"does not accept; {self.later} is graded with the course's {self.name} in its place, so that mistake "
                 f"costs points only once"))

    def _call(self, *args, **kwargs):
        want = self.reference(*args, **kwargs)
        if self.learner is self.missing:
            got = tr("nothing (it is not defined)")
        else:
            try:
                got = self.learner(*args, **kwargs)
            except Exception as error:  # unanswered (NotImplementedError) or broken: the later exercise still counts
                got = tr(f"an error ({type(error).__name__})")
            else:
                if agrees(got, want, self.rel_tol, self.abs_tol):
                    return plain_like(got, want)  # a right answer is graded with its own value, not the course's
                got = _short(got)
        shown = ", ".join([repr(arg) for arg in args] + [f"{key}={value!r}" for key, value in kwargs.items()])
        self.differences.append((f"{self.name}({shown})", got))
        return want

    def _restore_after_cell(self, *_):
        self.restore()
        self.shell.events.unregister("post_run_cell", self._restore_after_cell)


def agrees(got, want, rel_tol=1e-6, abs_tol=2):
    """Whether ``got`` is ``want`` up to the tolerances, through dicts and lists; exact types are not required."""
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(
            agrees(got[key], want[key], rel_tol, abs_tol) for key in want)
    if isinstance(want, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(want) and all(
            agrees(a, b, rel_tol, abs_tol) for a, b in zip(got, want))
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return not isinstance(got, (bool, str)) and math.isclose(float(got), want, rel_tol=rel_tol, abs_tol=abs_tol)
        except (TypeError, ValueError, OverflowError):
            return False
    return got == want


def plain_like(got, want):
    """The learner's ``got``, which agrees with ``want``, in ``want``'s plain types (int, float, dict, list)."""
    if isinstance(want, dict):
        return {key: plain_like(got[key], want[key]) for key in want}
    if isinstance(want, (list, tuple)):
        return type(want)(plain_like(a, b) for a, b in zip(got, want))
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        value = float(got)
        return int(value) if isinstance(want, int) and value.is_integer() else value
    return want


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()
