"""nbgrader's exchange between real Linux users on a real JupyterHub (issue 33): an instructor and three students,
each a user of this machine with a home of their own, and the exchange a shared folder with the permissions
nbgrader documents. The instructor releases lesson 01. Alice logs in to the hub (scripts/hub_local.sh) in Chromium,
opens the Assignment List from the Nbgrader menu, fetches the lesson, answers and submits with its buttons, and
later fetches her feedback with its Fetch Feedback button; Bob and Carol use nbgrader's commands as themselves. The
instructor collects, grades with `zerolab grade` and releases the feedback; each student fetches their own feedback
and can see no one else's.

What nbgrader documents is checked on the way: a resubmission replaces the earlier one at collect, a submission
after the due date is graded and recorded late, and a student cannot list the exchange's inbound or feedback
folders (nor read another student's submission). The scores are the lesson's own points: full marks for the right
answers, less exercise 1's points for the wrong one."""
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from tests.browser_session import ARTIFACTS, CHROMIUM, FLAGS
from tests.submissions import corpus
from tests.submissions.graded import REPO, read_rows
from zerolab.base.interpreter import env_with_interpreter_bin

pytestmark = pytest.mark.slow
COURSE_ID = "zerolab"
LESSON = corpus.LESSON
HUB = REPO / "scripts" / "hub_local.sh"
PASSWORD = secrets.token_urlsafe(12)


def _why_not():
    if os.geteuid() != 0:
        return "the round makes Linux users (useradd), which needs root"
    if not shutil.which("useradd") or not shutil.which("runuser"):
        return "useradd and runuser (Debian's passwd and util-linux) are needed"
    closed = [path for path in (Path(os.path.realpath(sys.executable)), Path(sys.prefix), REPO)
              if not _open_to_everyone(path)]
    if closed:
        return (f"{closed[0]} is closed to other users (a folder on its path is, as /root is): the students run this "
                "venv's python, its packages and this checkout's zerolab, as a hub's users do; make the venv from "
                "a python every user can run (scripts/setup.sh with /usr/bin/python3, what CI does) in a checkout "
                "they can read")
    if not os.access(CHROMIUM, os.X_OK) or not shutil.which("npm"):
        return "Chromium and npm are needed (bash scripts/setup.sh --grading; npm brings the hub's proxy)"
    try:
        import jupyterhub  # noqa: F401
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "JupyterHub and Playwright are needed: pip install -r scripts/requirements-grading.txt"
    return None


def _open_to_everyone(path):
    """Others may enter every folder down to ``path`` and run or read it."""
    return path.stat().st_mode & 0o005 and all(folder.stat().st_mode & 0o001 for folder in path.parents)


class Users:
    """Linux users made for one test session, named with a random tag (two checkouts on a machine never meet),
    removed with their homes at the end."""

    def __init__(self):
        self.tag = secrets.token_hex(3)
        self.made = []

    def add(self, role):
        name = f"zl{self.tag}{role}"
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, timeout=60)
        self.made.append(name)
        return name

    def remove(self):
        for name in self.made:
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True, timeout=30)
            subprocess.run(["userdel", "--remove", name], capture_output=True, timeout=60)


def as_user(user, *args, cwd=None, check=True):
    """Run `python -m ARGS` as ``user`` in a login-like environment of theirs: their HOME, this venv's bin on PATH
    (nbgrader starts alembic by name)."""
    home = Path("/home") / user
    env = {"HOME": str(home), "USER": user, "LOGNAME": user, "PATH": env_with_interpreter_bin()["PATH"],
           "LANG": "C.UTF-8"}
    done = subprocess.run(["runuser", "-u", user, "--", sys.executable, "-m", *args], cwd=cwd or home, env=env,
                          capture_output=True, text=True, timeout=600)
    if check:
        assert done.returncode == 0, f"{user}: {' '.join(args)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def shell_as(user, command):
    return subprocess.run(["runuser", "-u", user, "--", "bash", "-c", command], capture_output=True, text=True,
                          timeout=60)


def write_student_config(user, exchange):
    """What a hub puts in each student's Jupyter config (on a real hub: /etc/jupyter/nbgrader_config.py)."""
    config = Path("/home") / user / ".jupyter" / "nbgrader_config.py"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"c = get_config()\nc.CourseDirectory.course_id = {COURSE_ID!r}\n"
                      f"c.Exchange.root = {str(exchange)!r}\n")
    shutil.chown(config.parent, user, user)
    shutil.chown(config, user, user)


@contextlib.contextmanager
def hub(state, users, exchange):
    """scripts/hub_local.sh's hub for ``users``, its state in ``state``: yields its URL."""
    env = dict(os.environ, ZEROLAB_HUB_DIR=str(state), ZEROLAB_HUB_USERS=" ".join(users),
               ZEROLAB_HUB_PASSWORD=PASSWORD, ZEROLAB_HUB_EXCHANGE=str(exchange), ZEROLAB_HUB_COURSE=COURSE_ID)
    try:
        started = subprocess.run(["bash", str(HUB), "start"], env=env, capture_output=True, text=True, timeout=600)
        assert started.returncode == 0, started.stderr[-3000:]
        yield (state / "url").read_text().strip()
    finally:
        subprocess.run(["bash", str(HUB), "stop"], env=env, capture_output=True, timeout=120)


@contextlib.contextmanager
def assignment_list(url, user, profile, name):
    """A student's browser on the hub: logged in, their server started, Nbgrader > Assignment List open; yields the
    page. A screenshot is kept as tests/artifacts/browser/hub-NAME.png (failed-hub-NAME.png on failure)."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                            args=FLAGS, viewport={"width": 1280, "height": 900})
        page = context.new_page()
        try:
            page.goto(f"{url}/hub/login")
            page.fill("#username_input", user)
            page.fill("#password_input", PASSWORD)
            page.click("#login_submit")
            page.wait_for_selector(".jp-LabShell", timeout=240_000)  # the hub starts the user's server first
            page.click(".lm-MenuBar-itemLabel:text-is('Nbgrader')", timeout=60_000)
            page.click(".lm-Menu-itemLabel:text-is('Assignment List')")
            yield page
            page.screenshot(path=str(ARTIFACTS / f"hub-{name}.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / f"failed-hub-{name}.png"))
            raise
        finally:
            context.close()


def fetch_and_submit_in_the_browser(url, user, notebook, profile):
    """What a student does on the hub: Fetch in the Assignment List, answer, Submit."""
    with assignment_list(url, user, profile, "submitted") as page:
        released = page.locator(f"#released_assignments_list .list_item:has-text('{LESSON}')")
        released.locator("button:has-text('Fetch')").click(timeout=60_000)
        fetched = page.locator(f"#fetched_assignments_list .list_item:has-text('{LESSON}')").first
        fetched.locator("button:has-text('Submit')").wait_for(timeout=60_000)
        answer(user, notebook)
        fetched.locator("button:has-text('Submit')").click()
        page.locator(f"#submitted_assignments_list .list_item:has-text('{LESSON}')").first.wait_for(timeout=60_000)


def fetch_feedback_in_the_browser(url, user, profile):
    """Fetch Feedback in the Assignment List; returns once the feedback page is in the student's folder."""
    with assignment_list(url, user, profile, "feedback") as page:
        submitted = page.locator(f"#submitted_assignments_list .list_item:has-text('{LESSON}')").first
        submitted.locator("button:has-text('Fetch Feedback')").click(timeout=60_000)
        deadline = time.monotonic() + 60
        while not list((Path("/home") / user / LESSON / "feedback").glob(f"*/{LESSON}.html")):
            assert time.monotonic() < deadline, "Fetch Feedback brought no feedback page"
            page.wait_for_timeout(500)


def answer(user, notebook):
    """The student's edit: their copy of the fetched notebook replaced by ``notebook``, owned by them."""
    path = Path("/home") / user / LESSON / f"{LESSON}.ipynb"
    nbformat.write(notebook, str(path))
    shutil.chown(path, user, user)


@pytest.fixture(scope="module")
def round_trip():
    if _why_not():
        pytest.skip(_why_not())
    users = Users()
    exchange = Path(tempfile.mkdtemp(prefix="zerolab-exchange-"))
    scratch = Path(tempfile.mkdtemp(prefix="zerolab-hub-"))  # the hub's state (its users read their config there)
    try:
        scratch.chmod(0o755)
        exchange.chmod(0o777)  # nbgrader's documented set-up: everyone reads and writes the exchange root
        instructor = users.add("i")
        alice, bob, carol = (users.add(name) for name in ("a", "b", "c"))
        course = Path("/home") / instructor / "course"
        corpus.write_course(course, REPO)
        with open(course / "nbgrader_config.py", "a") as config:
            config.write(f"c.CourseDirectory.course_id = {COURSE_ID!r}\nc.Exchange.root = {str(exchange)!r}\n")
        subprocess.run(["chown", "-R", f"{instructor}:{instructor}", str(course)], check=True)
        as_user(instructor, "nbgrader", "generate_assignment", LESSON, "--force", cwd=course)
        as_user(instructor, "nbgrader", "release_assignment", LESSON, cwd=course)
        right = corpus.correct_notebook(course)
        wrong = corpus.correct_notebook(course)
        corpus.replace("ex1_model_state_bytes", corpus.WRONG_EX1)(wrong, None)

        seen = {}
        # Alice's server finds the exchange through the hub's config alone; her own config comes after, for the
        # command that fetches her feedback
        with hub(scratch / "hub", [alice], exchange) as url:
            fetch_and_submit_in_the_browser(url, alice, right, scratch / "browser")
        for student in (alice, bob, carol):
            write_student_config(student, exchange)
        for student in (bob, carol):
            as_user(student, "nbgrader", "fetch_assignment", LESSON)
        answer(bob, wrong)
        as_user(bob, "nbgrader", "submit", LESSON)
        # Carol submits a wrong answer on time, then the right one after the due date.
        answer(carol, wrong)
        as_user(carol, "nbgrader", "submit", LESSON)
        due = datetime.now(timezone.utc)
        as_user(instructor, "nbgrader", "db", "assignment", "add", LESSON,
                f"--duedate={due.strftime('%Y-%m-%d %H:%M:%S')} UTC", cwd=course)
        time.sleep(1.5)  # nbgrader's timestamps have a resolution of a second or better; make "after" unmistakable
        answer(carol, right)
        as_user(carol, "nbgrader", "submit", LESSON)

        seen["inbound_listing"] = shell_as(alice, f"ls {exchange}/{COURSE_ID}/inbound")
        seen["bob_reads_nothing_of_alice"] = shell_as(
            bob, f"cat {exchange}/{COURSE_ID}/inbound/{alice}+{LESSON}+*/{LESSON}.ipynb")
        as_user(instructor, "nbgrader", "collect", LESSON, cwd=course)
        seen["collected"] = {student: nbformat.read(str(course / "submitted" / student / LESSON / f"{LESSON}.ipynb"),
                                                    as_version=4) for student in (alice, bob, carol)}
        graded = as_user(instructor, "zerolab", "grade", LESSON, "--course", str(course), "--feedback",
                         cwd=course)
        seen["grade_output"] = graded.stdout + graded.stderr
        as_user(instructor, "nbgrader", "release_feedback", LESSON, cwd=course)
        seen["feedback_listing"] = shell_as(alice, f"ls {exchange}/{COURSE_ID}/feedback")
        with hub(scratch / "hub-again", [alice], exchange) as url:  # a later day: a new login
            fetch_feedback_in_the_browser(url, alice, scratch / "browser-again")
        for student in (bob, carol):
            as_user(student, "nbgrader", "fetch_feedback", LESSON)
        yield dict(seen, course=course, exchange=exchange, instructor=instructor, students=(alice, bob, carol),
                   right=right, wrong=wrong, due=due)
    finally:
        users.remove()
        shutil.rmtree(exchange, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def test_each_student_gets_the_lessons_own_points(round_trip):
    alice, bob, carol = round_trip["students"]
    rows = read_rows(round_trip["course"])
    assert {student: (rows[student]["status"], float(rows[student]["score"])) for student in (alice, bob, carol)} \
        == {alice: ("graded", corpus.FULL), bob: ("graded", corpus.FULL - corpus.EX1), carol: ("graded", corpus.FULL)}


def test_a_resubmission_replaces_the_earlier_one_and_a_late_one_is_recorded_late(round_trip):
    from nbgrader.api import Gradebook

    alice, bob, carol = round_trip["students"]
    collected = round_trip["collected"]
    exercise = lambda nb: corpus.cell(nb, "ex1_model_state_bytes").source  # noqa: E731
    assert exercise(collected[carol]) == exercise(round_trip["right"]) != exercise(round_trip["wrong"])
    with Gradebook(f"sqlite:///{round_trip['course'] / 'gradebook.db'}") as gradebook:
        late = {student: gradebook.find_submission(LESSON, student).total_seconds_late
                for student in (alice, bob, carol)}
    assert late[alice] == late[bob] == 0 and late[carol] > 0


def test_students_cannot_list_the_exchange_or_read_each_others_work(round_trip):
    assert round_trip["inbound_listing"].returncode != 0 and "Permission denied" in round_trip["inbound_listing"].stderr
    assert round_trip["feedback_listing"].returncode != 0
    assert round_trip["bob_reads_nothing_of_alice"].returncode != 0


def test_each_student_fetches_only_their_own_feedback(round_trip):
    students = round_trip["students"]
    scores = {students[0]: corpus.FULL, students[1]: corpus.FULL - corpus.EX1, students[2]: corpus.FULL}
    for student in students:
        fetched = sorted((Path("/home") / student / LESSON / "feedback").glob(f"*/{LESSON}.html"))
        assert len(fetched) == 1, (student, fetched)
        page = fetched[0].read_text()
        assert f"{scores[student]:g} / {corpus.FULL:g}" in page.replace(".0 ", " "), student
        assert "BEGIN HIDDEN" not in page and "hidden_tests" not in page.lower()
        others = [other for other in students if other != student]
        assert not any(other in page for other in others)
