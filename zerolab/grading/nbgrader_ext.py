"""Three small nbgrader preprocessors, set up by the worker through nbgrader's own config.

TrackedExecute     nbgrader's Execute, remembering which cell is running (to name the cell that killed a kernel)
LimitOutputChars   nbgrader's LimitOutput, which counts lines only, plus a cap on characters per output
HideHiddenTests    for feedback: nbgrader's ClearHiddenTests, plus outputs cleaned (zerolab.grading.feedback)
"""
from pathlib import Path

from nbgrader.preprocessors import ClearHiddenTests, Execute, LimitOutput
from traitlets import Dict, Integer, List, Unicode

from zerolab.grading import feedback
from zerolab.base.i18n import notebook_language, translate

running = {}  # the cell TrackedExecute is executing now: {"index", "grade_id", "source"}


class TrackedExecute(Execute):
    def preprocess_cell(self, cell, resources, index):
        running.clear()
        running.update(index=index, grade_id=cell.metadata.get("nbgrader", {}).get("grade_id"), source=cell.source)
        return super().preprocess_cell(cell, resources, index)


class LimitOutputChars(LimitOutput):
    max_chars = Integer(100_000, help="maximum characters kept of one output (-1 means no limit)").tag(config=True)

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.cell_type != "code" or self.max_chars < 0:
            return cell, resources
        for output in cell.outputs:
            if output.output_type == "stream" and len(output.text) > self.max_chars:
                output.text = output.text[: self.max_chars] + f"\n... Output truncated ({len(output.text)} characters) ..."
            for kind, value in output.get("data", {}).items():
                if isinstance(value, str) and len(value) > self.max_chars:
                    output.data[kind] = value[: self.max_chars] + "\n... Output truncated ..."
        return cell, resources


class HideHiddenTests(ClearHiddenTests):
    """The feedback shows visible tests and every result, never a hidden test's source or the grader's files.

    nbgrader's ClearHiddenTests takes the hidden tests out of the cells' source; the outputs get the rest
    (zerolab.grading.feedback): tracebacks keep the frames of the notebook's cells minus their hidden lines, frames
    in files are left out, and the grading machine's paths are shortened in every text output."""

    min_line = 4  # shorter hidden lines (")", "else:") tell nothing and would match everywhere
    private_paths = Dict(help="{absolute path: what the feedback shows instead}, e.g. the course folder"
                         ).tag(config=True)
    student_folders = List(Unicode(), help="a submission's folders, with {student} and {assignment}: shown as "
                                           "paths relative to them").tag(config=True)

    def preprocess(self, nb, resources):
        sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
        self._hidden_by_cell = {cell.execution_count: feedback.hidden_line_numbers(
            cell.source, self.begin_test_delimeter, self.end_test_delimeter)
            for cell in nb.cells if cell.cell_type == "code" and cell.get("execution_count")}
        self._hidden_text = [line for source in sources
                             for line in hidden_lines(source, self.begin_test_delimeter, self.end_test_delimeter)]
        names = resources.get("nbgrader", {})
        labels = {**feedback.python_paths(), str(Path.home()): "~", **self.private_paths}
        for folder in self.student_folders:
            labels[folder.replace("{student}", names.get("student", "?"))
                   .replace("{assignment}", names.get("assignment", "?"))] = ""
        self._paths = feedback.Paths(labels)
        self._lang = notebook_language(nb)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, cell_index):
        hidden = hidden_lines(cell.source, self.begin_test_delimeter, self.end_test_delimeter)
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.cell_type != "code":
            return cell, resources
        for output in cell.outputs:
            if output.output_type == "error":
                output.traceback = feedback.clean_traceback(output.traceback, self._hidden_by_cell, self._paths,
                                                            self._hidden_text, self._lang)
                if any(line in output.evalue for line in hidden if len(line) >= feedback.MESSAGE_MATCH):
                    output.evalue = translate("(a hidden test failed; its source is not shown)", self._lang)
                output.evalue = self._paths.shorten(output.evalue)
            elif output.output_type == "stream":
                output.text = self._clean_text(output.text)
            elif "text/plain" in output.get("data", {}):
                output.data["text/plain"] = self._clean_text(output.data["text/plain"])
        return cell, resources

    def _clean_text(self, text):
        """Printed text: paths shortened, hidden tests left out (printed from the kernel's input history, say):
        a marker and what follows it up to the end marker, and any line that is a hidden test's source."""
        hidden, kept, inside = set(self._hidden_text), [], False
        for line in self._paths.shorten(text).split("\n"):
            if self.begin_test_delimeter in line:
                inside = True
            elif self.end_test_delimeter in line:
                inside = False
            elif not inside and line.strip() not in hidden:
                kept.append(line)
        return "\n".join(kept)


def hidden_lines(source, begin="BEGIN HIDDEN TESTS", end="END HIDDEN TESTS"):
    lines, inside = [], False
    for line in source.splitlines():
        if begin in line:
            inside = True
        elif end in line:
            inside = False
        elif inside and len(line.strip()) >= HideHiddenTests.min_line:
            lines.append(line.strip())
    return lines


def scrub(traceback, hidden):
    """Traceback entries with every line that shows hidden-test source replaced by a placeholder."""
    return [feedback.scrub(entry, hidden) for entry in traceback]
