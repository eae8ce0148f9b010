"""One grading process: `python -I -m zerolab.grading.worker`, driven by `zerolab grade`.

It reads a JSON job on its first stdin line, then one student name per line, and answers one JSON line per
student on its stdout. nbgrader is imported once and called through its API per student, so one student's
notebook never touches another's run; nbgrader's gradebook stays the record.
"""
import json
import os
import sys
import time
from pathlib import Path

from zerolab.base.interpreter import skip_the_slow_iri_checker

skip_the_slow_iri_checker()  # before nbgrader's import, which the next line starts
from zerolab.grading import nbgrader_ext, report, sandbox, sanitize, uids  # noqa: E402
from zerolab.grading.coursedir import Course  # noqa: E402

KERNEL_NAME = "zerolab-grading"
MAX_REPAIRS = 3


class Worker:
    def __init__(self, job):
        self.course = Course(Path(job["course"]), Path(job["submissions"]) if job.get("submissions") else None)
        self.lesson, self.mode, self.feedback = job["lesson"], job["mode"], job["feedback"]
        self.limits = self.course.limits()
        self.home = Path(job["home"])  # this worker's private folder: kernelspec, policy, sockets, state
        self.state_file = self.home / "state.json"
        # a uid no other grading worker on this machine holds, for as long as this process lives
        self.lease = uids.allocate() if self.mode == "sandbox" else None
        self.uid = self.lease.uid if self.lease else None
        self.api = self._api()

    def _api(self):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        config = self.course.load_config()
        config.CourseDirectory.root = str(self.course.root)
        config.CourseDirectory.submitted_directory = str(self.course.work.relative_to(self.course.root) / "staged")
        config.OverwriteCells.add_missing_cells = True
        config.Execute.timeout = self.limits.cell_timeout
        # nbclient waits 4 s for a cell's last output after its reply, then calls the cell hung: on a loaded
        # machine an honest big output, or the traceback of an interrupted loop, takes longer than that.
        config.Execute.iopub_timeout = max(4, self.limits.cell_timeout // 2)
        config.Autograde.autograde_preprocessors = _autograde_preprocessors()
        config.GenerateFeedback.preprocessors = [nbgrader_ext.HideHiddenTests, "nbgrader.preprocessors.GetGrades",
                                                 "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]
        config.HideHiddenTests.private_paths = {str(self.course.root): "<course>", str(self.home): "<grader>",
                                                str(self.course.submitted_root): "<submitted>"}
        config.HideHiddenTests.student_folders = [str(where("{student}", "{assignment}")) for where in (
            self.course.autograded, self.course.staged, self.course.submitted)]
        if self.mode == "off":
            config.Execute.kernel_name = "python3"
        else:
            config.Execute.kernel_name = KERNEL_NAME
            config.KernelManager.transport = "ipc"  # sockets as files: reachable from a kernel without network
            config.KernelManager.ip = str(self._prepare_kernel() / "k")
        coursedir = CourseDirectory(config=config)
        return NbGraderAPI(coursedir, config=config)

    def _prepare_kernel(self):
        ipc = self.home / "ipc"
        scratch = self.home / "scratch"
        for folder in (ipc, scratch):
            folder.mkdir(parents=True, exist_ok=True)
            if self.mode == "sandbox":
                os.chown(folder, self.uid, self.uid)
        policy = {"mode": self.mode, "uid": self.uid, "ipc_dir": str(ipc), "scratch_root": str(scratch),
                  "state_file": str(self.state_file), "memory_limit": self.limits.memory_limit,
                  "notebook_timeout": self.limits.notebook_timeout, "max_processes": self.limits.max_processes,
                  "disk_limit": self.limits.disk_limit,
                  "read_only": [str(p) for p in sandbox.python_paths(exclude=[self.course.root, self.home])]}
        (self.home / "policy.json").write_text(json.dumps(policy))
        spec = self.home / "kernels" / "kernels" / KERNEL_NAME
        spec.mkdir(parents=True, exist_ok=True)
        (spec / "kernel.json").write_text(json.dumps({
            # -I: the launcher runs in the student's folder; it must not import a student's json.py
            "argv": [sys.executable, "-I", "-m", "zerolab.grading.kernel", str(self.home / "policy.json"),
                     "{connection_file}"],
            "display_name": "Python 3 (zerolab grading)", "language": "python"}))
        os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(spec.parent.parent),
                                                                   os.environ.get("JUPYTER_PATH")]))
        return ipc

    def grade(self, student):
        started = time.perf_counter()
        staged = sanitize.stage(self.course, student, self.lesson)
        outcome = report.Outcome(student, self.lesson, notes=list(staged.reasons), review=list(staged.review))
        if staged.status:
            outcome.status = staged.status
        else:
            self._autograde(student, outcome)
        outcome.seconds = time.perf_counter() - started
        return outcome

    def _autograde(self, student, outcome):
        log = self.course.log(student, self.lesson)
        log.parent.mkdir(parents=True, exist_ok=True)
        notebook = self.course.staged(student, self.lesson) / f"{self.lesson}.ipynb"
        attempts = []  # every attempt's log: a repaired notebook's first run says why it was repaired
        for attempt in range(MAX_REPAIRS + 1):
            self.state_file.unlink(missing_ok=True)
            nbgrader_ext.running.clear()
            result = self.api.autograde(self.lesson, student, force=True, create=True)
            self._reclaim(student)
            attempts.append(f"--- attempt {attempt + 1}\n{result.get('log', '')}\n{result.get('error', '')}")
            log.write_text("\n".join(attempts))
            if result["success"]:
                break
            state = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
            trouble = self._trouble(result, state)
            if trouble is None or attempt == MAX_REPAIRS or not _neutralise(notebook, nbgrader_ext.running, trouble):
                outcome.status = "failed"
                outcome.notes.append(_failure_reason(result, trouble, nbgrader_ext.running, state, log, self.limits))
                return
            outcome.review.append(f"cell {_label(nbgrader_ext.running)} {trouble}; it was replaced by an error "
                                  "and the rest was graded")
        report.read_scores(self.course, student, self.lesson, outcome, self.limits)
        if self.feedback:
            result = self.api.generate_feedback(self.lesson, student)
            if not result["success"]:
                outcome.notes.append(f"no feedback: {report.last_error_line(result)}")

    def _trouble(self, result, state):
        """What went wrong in a way a repair can get past, or None."""
        text = f"{result.get('log', '')}\n{result.get('error', '')}"
        if state.get("event") == "notebook_timeout" or "kernel_info" in text or not nbgrader_ext.running:
            return None  # the notebook cap, or a kernel that never started: no single cell to blame
        if "DeadKernelError" in text or "Kernel died" in text:
            status = state.get("status")
            return f"ended the kernel (exit status {status})" if status not in (None, 0) else "ended the kernel"
        if "CellTimeoutError" in text or "Timeout waiting for IOPub" in text:
            return f"ignored the interrupt at the {self.limits.cell_timeout} s per-cell cap"
        return None

    def _reclaim(self, student):
        """Take the autograded folder back from the grading uid; drop links and special files it left."""
        if self.mode != "sandbox":
            return
        folder = self.course.autograded(student, self.lesson)
        for root, dirs, files in os.walk(folder):
            for name in dirs + files:
                path = os.path.join(root, name)
                if os.path.islink(path) or not (os.path.isfile(path) or os.path.isdir(path)):
                    os.unlink(path)
                else:
                    os.lchown(path, 0, 0)
        if folder.exists():
            os.lchown(folder, 0, 0)


def _autograde_preprocessors():
    return [nbgrader_ext.TrackedExecute, "nbgrader.preprocessors.IgnorePattern",
            "nbconvert.preprocessors.ClearMetadataPreprocessor", nbgrader_ext.LimitOutputChars,
            "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
            "nbgrader.preprocessors.CheckCellMetadata"]


def _label(cell):
    return cell.get("grade_id") or f"#{cell.get('index', -1) + 1}"


def _neutralise(path, running, trouble):
    """Replace the cell that broke the kernel (or the student cell its test called) by an error; True if done."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    index = _find(notebook, running)
    if index is None:
        return False
    meta = notebook.cells[index].metadata.get("nbgrader", {})
    while index >= 0 and (notebook.cells[index].cell_type != "code" or meta.get("locked")):
        index -= 1  # a test cell died calling the student's code: blame the student's cell above it
        meta = notebook.cells[index].metadata.get("nbgrader", {}) if index >= 0 else {}
    if index < 0 or "zerolab: not run" in notebook.cells[index].source:
        return False
    notebook.cells[index].source = f"raise RuntimeError('zerolab: not run: when graded this cell {trouble}')"
    nbformat.write(notebook, path)
    return True


def _find(notebook, running):
    for index, cell in enumerate(notebook.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if (running.get("grade_id") and grade_id == running["grade_id"]) or (
                not running.get("grade_id") and cell.source == running.get("source")):
            return index
    return None


def _failure_reason(result, trouble, running, state, log, limits):
    where = f" (in cell {_label(running)})" if running else ""
    if state.get("event") == "notebook_timeout":
        return (f"the notebook ran past the {limits.notebook_timeout} s per-notebook cap{where}; raise "
                f"ZeroLab.notebook_timeout in nbgrader_config.py if the work is honest; log: {log}")
    if trouble:
        return f"cell {_label(running)} {trouble}, again after repairs; log: {log}"
    text = f"{result.get('log', '')}\n{result.get('error', '')}"
    if "kernel_info" in text:
        return f"the grading kernel did not start; log: {log}"
    return f"nbgrader: {report.last_error_line(result)}{where}; log: {log}"


def main():
    results = os.fdopen(os.dup(1), "w", buffering=1)
    job = json.loads(sys.stdin.readline())
    log = open(Path(job["home"]) / "worker.log", "a")
    os.dup2(log.fileno(), 1)  # kernels and nbgrader print; only results go to the real stdout
    os.dup2(log.fileno(), 2)
    worker = Worker(job)
    for line in sys.stdin:
        student = line.strip()
        if student:
            results.write(json.dumps(worker.grade(student).as_dict()) + "\n")


if __name__ == "__main__":
    main()
