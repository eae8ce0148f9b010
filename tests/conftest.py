import contextlib
import os
import re
import sys
from pathlib import Path

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from tests.submissions.graded import graded_corpus  # noqa: E402,F401 (one unsharded corpus run per session)

# pyproject.toml runs the suite on 2 pytest-xdist workers. A worker takes a whole test module at a time, so a
# module's fixtures are built once; modules that share a session fixture (named here) go to one worker together.
SHARED_SESSION_FIXTURES = {"graded_corpus": ("tests/test_grading_corpus.py", "tests/test_grading_shards.py",
                                              "tests/test_slurm_grading.py")}
_UNIT_OF_MODULE = {module: fixture for fixture, modules in SHARED_SESSION_FIXTURES.items() for module in modules}
# Modules that execute whole lessons with their real teaching runs, which the session's run cache holds once
# (tests/session_cache.py): their tests go to workers a lesson at a time, so one lesson's executions follow each
# other on one worker, the first running the ranks and the next copying, instead of two workers waiting on one.
LESSON_UNIT_MODULES = {"tests/test_notebooks.py": None, "tests/test_no_answers_in_sight.py": None,
                       "tests/test_lesson09.py": "09_checkpoints",
                       "tests/test_release_flow.py": {"test_lesson_01_": "01_where_memory_goes",
                                                      "test_lesson_06_": "06_predict_then_measure"}}
_LESSON_IN_ID = re.compile(r"[\[-](\d\d_[a-z0-9_]+)")
# Modules about one lesson whose tests do not name it, beyond LESSON_UNIT_MODULES (for --lesson); the claim checks
# of each lesson (tests/test_claims_NN.py) too.
LESSON_OF_MODULE = {"tests/test_lesson08_grading.py": "08_zero_from_scratch",
                    **{f"tests/test_claims_{source.stem[:2]}.py": source.stem
                       for source in (Path(__file__).resolve().parent.parent / "autograder" / "src").glob("[0-9][0-9]_*.py")}}


def pytest_addoption(parser):
    parser.addoption("--lesson", action="append", default=[], metavar="NAME",
                     help="only the tests of this lesson (its name or number: 09_checkpoints, 09); repeatable")


def lessons_of(nodeid):
    """The lessons a test is about: those its parameters name, or its module's."""
    module, unit = nodeid.split("::", 1)[0], _unit(nodeid)
    return (set(_LESSON_IN_ID.findall(nodeid)) | ({LESSON_OF_MODULE[module]} if module in LESSON_OF_MODULE else set())
            | ({unit.removeprefix("lesson ")} if unit.startswith("lesson ") else set()))


def pytest_xdist_make_scheduler(config, log):
    """xdist's loadscope scheduling with a module as the unit of work, except the modules sharing a fixture.
    (xdist's own loadgroup marks are ignored on pytest 9.2: pytest-xdist issue #1386.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _unit(nodeid)

    return ByModule(config, log)


def pytest_collection_modifyitems(config, items):
    """The longest work first, so that the last unit a worker starts is a short one: the modules sharing a session
    fixture, then the modules with slow tests, then the rest. Also checks SHARED_SESSION_FIXTURES is complete."""
    slow_modules = {_module_path(item) for item in items if item.get_closest_marker("slow")}
    users = {}
    for item in items:
        for name in _session_fixtures(item):
            users.setdefault(name, set()).add(_module_path(item))
    for name, modules in users.items():
        if len(modules) > 1 and not modules <= set(SHARED_SESSION_FIXTURES.get(name, ())):
            raise pytest.UsageError(f"the session fixture {name} is used by {', '.join(sorted(modules))}: name them "
                                    "in SHARED_SESSION_FIXTURES (tests/conftest.py), so one worker builds it once")
    items.sort(key=lambda item: (_module_path(item) not in _UNIT_OF_MODULE, _module_path(item) not in slow_modules))
    wanted = config.getoption("--lesson")
    if wanted:
        keep = [item for item in items if any(lesson.startswith(prefix) for lesson in lessons_of(item.nodeid)
                                              for prefix in wanted)]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


def _unit(nodeid):
    """The unit of work a test belongs to: its lesson (LESSON_UNIT_MODULES), the modules sharing its session
    fixture, or its module."""
    module = nodeid.split("::", 1)[0]
    if module in LESSON_UNIT_MODULES:
        lesson = LESSON_UNIT_MODULES[module]
        if isinstance(lesson, dict):  # by the test's name
            test = nodeid.split("::", 1)[-1]
            lesson = next((name for prefix, name in lesson.items() if test.startswith(prefix)), None)
        lesson = lesson or next(iter(_LESSON_IN_ID.findall(nodeid)), None)
        if lesson:
            return f"lesson {lesson}"
    return _UNIT_OF_MODULE.get(module, module)


def _module_path(item):
    return item.nodeid.split("::", 1)[0]


def _session_fixtures(item):
    """The session-scoped fixtures from tests/ that the item uses (pytest's own are cheap or per worker anyway)."""
    return [name for name, definitions in item._fixtureinfo.name2fixturedefs.items()
            if definitions and definitions[-1].scope == "session" and definitions[-1].baseid.startswith("tests")]


# The suite's time, recorded for scripts/suite_budget.py: each test's seconds (setup, call and teardown), the CPU
# seconds it spent with its children (a test far below its seconds waits: on a timeout, a sleep, a slow peer), and
# the wall time, in the controlling process (with xdist, the workers' reports reach it too).
_DURATIONS = {"started": None, "tests": {}, "cpu": {}}


def pytest_sessionstart(session):
    import time

    _DURATIONS["started"] = time.monotonic()
    _DURATIONS["load_average"] = round(os.getloadavg()[0], 1)
    _DURATIONS["ops"] = _built_ops()


def _built_ops():
    """{op: (library mtime, build.ninja text)} of this venv's compiled DeepSpeed ops: a recompile during the suite
    costs minutes of CPU, and the build file says which command differed (a CI run saw one, cause unknown)."""
    from zerolab.base.interpreter import own_extensions_root

    root = own_extensions_root()
    found = {}
    for library in (root.glob("*/*.so") if root else []):
        build = library.parent / "build.ninja"
        found[library.parent.name] = (library.stat().st_mtime, build.read_text() if build.exists() else "")
    return found


def _cpu_seconds():
    """CPU seconds of this process and of its children that ended (subprocess.run's, nbgrader's kernels, ranks)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _cpu_of_phase(item):
    started = _cpu_seconds()
    yield
    item._cpu_of_phase = _cpu_seconds() - started


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _cpu_of_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _cpu_of_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _cpu_of_phase(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().user_properties.append(("cpu_seconds", getattr(item, "_cpu_of_phase", 0.0)))
    item._cpu_of_phase = 0.0


def pytest_runtest_logreport(report):
    _DURATIONS["tests"][report.nodeid] = _DURATIONS["tests"].get(report.nodeid, 0.0) + report.duration
    cpu = sum(value for key, value in report.user_properties if key == "cpu_seconds")
    _DURATIONS["cpu"][report.nodeid] = _DURATIONS["cpu"].get(report.nodeid, 0.0) + cpu


def pytest_terminal_summary(terminalreporter, config):
    import json
    import time
    from pathlib import Path

    if hasattr(config, "workerinput") or not _DURATIONS["tests"]:
        return
    wall = time.monotonic() - _DURATIONS["started"]
    tests = [{"nodeid": nodeid, "seconds": round(seconds, 3), "cpu_seconds": round(_DURATIONS["cpu"].get(nodeid, 0.0), 3)}
             for nodeid, seconds in _DURATIONS["tests"].items()]
    workers = getattr(config.option, "numprocesses", None) or 1
    record = {"wall_seconds": round(wall, 1), "workers": workers, "load_average": _DURATIONS["load_average"],
              "tests": tests}
    out = Path(__file__).resolve().parent / "artifacts" / "durations.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=0))
    total = sum(test["seconds"] for test in tests)
    for op, (built, build) in _built_ops().items():
        before = _DURATIONS["ops"].get(op)
        if before and before[0] != built:
            changed = sorted(set(build.split()) ^ set(before[1].split()))
            unchanged = "nothing (another ninja? one of another version hashes the same command differently)"
            terminalreporter.write_line(f"the suite recompiled DeepSpeed op {op} in this venv; its build command "
                                        f"changed in: {changed or unchanged}")
    terminalreporter.write_line(
        f"suite time: {len(tests)} tests, {wall / 60:.1f} min wall on {workers} worker(s), {total / 60:.1f} min of "
        f"tests (budget: 25 min wall on an idle 2-core machine; per module: python scripts/suite_budget.py)")


# The ops the set-up builds (scripts/build_ops.py); the suite compiling any other in this venv is a defect: a minute or
# more of CPU that a fresh clone pays inside the tests (three probes once built DeepSpeed's shm comm op that way).
OPS_OF_THE_SET_UP = {"cpu_adam"}
OPS_BUILT_ON_PURPOSE = {"zerolab_probe_op"}  # tests/test_ops_per_venv.py: one function, built in seconds, to test folders


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput") or "ops" not in _DURATIONS:
        return
    new = sorted(set(_built_ops()) - set(_DURATIONS["ops"]) - OPS_OF_THE_SET_UP - OPS_BUILT_ON_PURPOSE)
    if new:
        print(f"\nthe suite compiled DeepSpeed op(s) {new} in this venv: call "
              "zerolab.run.op_cache.skip_shm_comm_op() before DeepSpeed starts distributed, as the course's runs do",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@contextlib.contextmanager
def probe_launcher():
    """A warm rank launcher (zerolab.handmade.core.rank_launcher) that can import tests/rank_probe.py, started by the
    first job inside: jobs of kind "rank_probe:FUNCTION" run that probe on the ranks."""
    from pathlib import Path

    from zerolab.handmade.core import rank_launcher

    tests = Path(__file__).resolve().parent
    rank_launcher.shut_down()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tests), os.environ.get("PYTHONPATH")])))
        patch.chdir(tests.parent)
        try:
            yield
        finally:
            rank_launcher.shut_down()


@pytest.fixture
def fresh_launcher():
    """probe_launcher for one test."""
    with probe_launcher():
        yield
