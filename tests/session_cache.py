"""A folder this test session's workers share, and no other session: for results computed once per session.

pytest-xdist gives each worker a base temporary folder inside one folder of the session's own
(/tmp/pytest-of-USER/pytest-N/popen-gwK), so a second checkout's session (another N) never sees it.
"""
import os


def shared_folder(tmp_path_factory, name):
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


def run_cache(tmp_path_factory):
    """For ZEROLAB_RUN_CACHE (zerolab.run.run_cache): a lesson's teaching runs happen once per session, however many
    times the lesson is executed, in either edition, answered or not."""
    return shared_folder(tmp_path_factory, "zerolab-run-cache")
