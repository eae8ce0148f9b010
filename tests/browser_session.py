"""What the browser tests share: a JupyterLab server over a folder, a headless Chromium (Debian's package) driven by
Playwright, and the moves a student makes in it (open a notebook, Run All, save). Each test module starts its own
server and browser from these; screenshots and failure evidence go to tests/artifacts/browser/ (ignored by git).
"""
import contextlib
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from zerolab.run.launch import free_port
from zerolab.base.interpreter import env_with_interpreter_bin, python_module

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "zerolab-browser-test"
RUN_TIMEOUT_MS = 600_000  # Run All of a lesson: lesson 06 takes 1-4 min on a busy 2-core machine

NEEDS_CHROMIUM = [pytest.mark.slow,
                  pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                     reason="apt-get install chromium (setup.sh --grading)")]


@contextlib.contextmanager
def jupyter_lab(root, run_cache=None):
    """A JupyterLab server (this venv's, students' configuration) on a free port over ``root``: yields its URL.
    Its kernels copy the teaching cells' real runs from ``run_cache`` (ZEROLAB_RUN_CACHE), if given."""
    port = free_port()
    env = env_with_interpreter_bin()
    env.pop("ZEROLAB_STATIC", None)
    env.pop("ZEROLAB_RUN_CACHE", None)
    if run_cache:
        env["ZEROLAB_RUN_CACHE"] = str(run_cache)
    env["JUPYTER_CONFIG_DIR"] = str(root / ".jupyter-user")  # no settings from the user running the tests
    server = subprocess.Popen(
        python_module("jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                      f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
                      "--LabApp.news_url=", "--ServerApp.open_browser=False"),
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "w"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180  # a busy 2-core CI machine
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail("JupyterLab did not start:\n" + (root / "server.log").read_text()[-2000:])
            time.sleep(0.5)
    try:
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


@contextlib.contextmanager
def chromium(profile):
    """A headless Chromium with a new, empty user-data-dir ``profile``: yields its Playwright context."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A test module's Chromium: import this fixture into the module."""
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


# The notebook in front; JupyterLab may keep other notebooks' tabs (hidden) in the page.
FRONT = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# Its tab is the lesson's, and its kernel is connected and idle. Run All before that silently skips every cell: while
# the session has no kernel yet, JupyterLab clears each code cell's prompt to "[ ]" instead of running it.
KERNEL_READY = f"""name => {{
    const tab = document.querySelector('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel');
    const status = document.querySelector('{FRONT} .jp-Notebook-ExecutionIndicator');
    return tab && tab.textContent === name && status && status.getAttribute('data-status') === 'idle';
}}"""
KERNEL_IDLE = f"""() => {{
    const status = document.querySelector('{FRONT} .jp-Notebook-ExecutionIndicator');
    return status && status.getAttribute('data-status') === 'idle';
}}"""
RUN_STARTED = f"""() => [...document.querySelectorAll('{FRONT} .jp-CodeCell .jp-InputPrompt')]
    .some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"""
RUN_FINISHED = f"""() => {{
    const prompts = [...document.querySelectorAll('{FRONT} .jp-CodeCell .jp-InputPrompt')].map(p => p.textContent);
    return prompts.length && !prompts.some(p => p.includes('*')) && /\\[\\d+\\]/.test(prompts[prompts.length - 1]);
}}"""


def open_notebook(context, url, path):
    """Opens `path` ("lab/tree/..." or "notebooks/...") in a new page, once its kernel is idle; JupyterLab in a
    workspace of its own, so that no tab of an earlier test is restored next to it (each restored notebook would
    also start a kernel)."""
    page = context.new_page()
    errors = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    lab = path.startswith("lab/tree/")
    address = path.replace("lab/tree/", f"lab/workspaces/test-{time.monotonic_ns()}/tree/") if lab else path
    page.goto(f"{url}/{address}?token={TOKEN}")
    try:
        page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=60_000)
        if lab:
            page.wait_for_function(KERNEL_READY, arg=path.rsplit("/", 1)[-1], timeout=120_000)
        else:  # Notebook 7: one notebook a page, no tabs
            page.wait_for_function(KERNEL_IDLE, timeout=120_000)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"failed-{path.replace('/', '-')}.png"))
        raise
    return page, errors


def run_all(page, name, while_running=None):
    """Run All on the notebook in front, as a student picks it from the Run menu (the same in JupyterLab and
    Notebook 7). The command acts on the widget that has focus: when the file browser kept it (opening a notebook
    in a subfolder), it runs nothing, so focus the notebook first and ask again if no cell has started. JupyterLab
    may ask which kernel to start at any moment of this (before the click or because of it): the kernel is chosen
    as a student would, and Run All asked again only if the run has not started since.
    ``while_running(page)`` is called once the run has started, before waiting for it to end."""
    tried = []
    for attempt in range(3):
        try:
            if _choose_the_kernel_if_asked(page, tried) and _started_within(page, 10_000):
                break
            page.locator(f"{FRONT} .jp-Notebook").first.focus()
            page.click(".lm-MenuBar-itemLabel:text-is('Run')", timeout=10_000)
            page.click(".lm-Menu-itemLabel:text-is('Run All Cells')", timeout=10_000)
            page.wait_for_function(f"() => ({RUN_STARTED})() || !!document.querySelector('.jp-Dialog')",
                                   timeout=30_000)
            if page.evaluate(RUN_STARTED) or (_choose_the_kernel_if_asked(page, tried)
                                              and _started_within(page, 30_000)):
                break
        except Exception as error:
            tried.append(f"attempt {attempt + 1}: {str(error).splitlines()[0]}")
        if attempt == 2:
            keep_state(page, f"failed-{name}-run-all-never-started")
            dialogs = page.locator(".jp-Dialog").all_inner_texts()
            raise AssertionError(f"Run All never started; dialogs in the way: {dialogs}; tried: {tried}")
    try:
        if while_running:
            while_running(page)
        deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
        while True:  # finished, and still so 3 s later with the kernel idle: not a pause between two queued cells
            page.wait_for_function(RUN_FINISHED, timeout=max(1, deadline - time.monotonic()) * 1000)
            page.wait_for_timeout(3_000)
            if page.evaluate(RUN_FINISHED) and page.evaluate(KERNEL_IDLE):
                break
    except Exception:
        keep_state(page, f"failed-{name}-run-all")
        raise


def _started_within(page, ms):
    try:
        page.wait_for_function(RUN_STARTED, timeout=ms)
        return True
    except Exception:
        return False


def _choose_the_kernel_if_asked(page, tried):
    """JupyterLab asks which kernel to start when the notebook's session has none (seen on a busy CI machine, once
    after the kernel had been idle and once on the first lesson of a fresh server): a student picks the course's
    kernel and goes on, and so does the test. True if it answered a dialog; what went wrong is added to ``tried``."""
    dialog = page.locator(".jp-Dialog").filter(has_text="Select Kernel").first
    if not dialog.count():
        return False
    try:
        choice = dialog.locator("select").first
        try:
            choice.select_option(label="Python 3 (ipykernel)", timeout=5_000)
        except Exception:
            choice.select_option(index=0, timeout=5_000)
        for _ in range(3):  # on a loaded machine the first click can land while the kernel list still loads
            dialog.locator("button.jp-mod-accept").first.click(timeout=10_000)
            try:
                page.wait_for_function("() => !document.querySelector('.jp-Dialog')", timeout=20_000)
                break
            except Exception:
                if not dialog.count():
                    break
        else:
            raise AssertionError("the dialog stayed after three clicks on its accept button")
        page.wait_for_function(KERNEL_IDLE, timeout=120_000)
        tried.append("answered a Select Kernel dialog")
        return True
    except Exception as error:
        tried.append(f"a Select Kernel dialog could not be answered: {str(error).splitlines()[0]}")
        page.keyboard.press("Enter")  # the dialog's default button is its accept button
        return False


def save(page, path):
    """Ctrl+S on the notebook in front, waiting until the file at ``path`` is written."""
    os.utime(path, (1, 1))  # to see the save land
    page.locator(f"{FRONT} .jp-Notebook").first.focus()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while path.stat().st_mtime == 1 and time.monotonic() < deadline:
        page.wait_for_timeout(500)
    assert path.stat().st_mtime != 1, f"{path.name} was not saved on Ctrl+S"


def shut_down_kernels(url):
    """Closing a page leaves its kernel running: stop them all, so that the next lesson has the 2 cores to itself."""
    for session in json.load(urllib.request.urlopen(f"{url}/api/sessions?token={TOKEN}", timeout=30)):
        urllib.request.urlopen(urllib.request.Request(
            f"{url}/api/sessions/{session['id']}?token={TOKEN}", method="DELETE"), timeout=60)


def keep_state(page, stem):
    """A failure's evidence: a screenshot and, for every notebook in the page, each code cell's prompt and output."""
    panels = page.evaluate("""() => [...document.querySelectorAll('.jp-NotebookPanel')].map(panel => ({
        front: !panel.classList.contains('lm-mod-hidden'),
        kernel: (panel.querySelector('.jp-Notebook-ExecutionIndicator') || {dataset: {}}).dataset.status,
        cells: [...panel.querySelectorAll('.jp-CodeCell')].map(cell => [
            (cell.querySelector('.jp-InputPrompt') || {}).textContent,
            (cell.querySelector('.jp-OutputArea') || {textContent: ''}).textContent.slice(0, 300)])}))""")
    (ARTIFACTS / f"{stem}.json").write_text(json.dumps(panels, indent=1))
    page.screenshot(path=str(ARTIFACTS / f"{stem}.png"), full_page=True)
