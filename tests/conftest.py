import os

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from tests.submissions.graded import graded_corpus  # noqa: E402,F401 (one unsharded corpus run per session)

# pyproject.toml runs the suite on 2 pytest-xdist workers. A worker takes a whole test module at a time, so a
# module's fixtures are built once; modules that share a session fixture (named here) go to one worker together.
SHARED_SESSION_FIXTURES = {"graded_corpus": ("tests/test_grading_corpus.py", "tests/test_grading_shards.py")}
_UNIT_OF_MODULE = {module: fixture for fixture, modules in SHARED_SESSION_FIXTURES.items() for module in modules}


def pytest_xdist_make_scheduler(config, log):
    """xdist's loadscope scheduling with a module as the unit of work, except the modules sharing a fixture.
    (xdist's own loadgroup marks are ignored on pytest 9.2: pytest-xdist issue #1386.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            module = nodeid.split("::", 1)[0]
            return _UNIT_OF_MODULE.get(module, module)

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


def _module_path(item):
    return item.nodeid.split("::", 1)[0]


def _session_fixtures(item):
    """The session-scoped fixtures from tests/ that the item uses (pytest's own are cheap or per worker anyway)."""
    return [name for name, definitions in item._fixtureinfo.name2fixturedefs.items()
            if definitions and definitions[-1].scope == "session" and definitions[-1].baseid.startswith("tests")]
