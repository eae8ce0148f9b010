"""Three small nbgrader preprocessors, set up by the worker through nbgrader's own config.

TrackedExecute     nbgrader's Execute, remembering which cell is running (to name the cell that killed a kernel)
LimitOutputChars   nbgrader's LimitOutput, which counts lines only, plus a cap on characters per output
HideHiddenTests    for feedback: nbgrader's ClearHiddenTests, plus hidden-test lines removed from error outputs
"""
import re

from nbgrader.preprocessors import ClearHiddenTests, Execute, LimitOutput
from traitlets import Integer

running = {}  # the cell TrackedExecute is executing now: {"index", "grade_id", "source"}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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
    """The feedback shows visible tests and their results, never the source of a hidden test, tracebacks included."""

    min_line = 4  # shorter hidden lines (")", "else:") tell nothing and would match everywhere

    def preprocess_cell(self, cell, resources, cell_index):
        hidden = hidden_lines(cell.source, self.begin_test_delimeter, self.end_test_delimeter)
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if hidden and cell.cell_type == "code":
            for output in cell.outputs:
                if output.output_type == "error":
                    output.traceback = scrub(output.traceback, hidden)
                    if any(line in output.evalue for line in hidden):
                        output.evalue = "(a hidden test failed; its source is not shown)"
        return cell, resources


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
    kept = []
    for entry in traceback:
        lines = []
        for line in _ANSI.sub("", entry).split("\n"):
            lines.append("    (hidden test line)" if any(h in line for h in hidden) else line)
        kept.append("\n".join(lines))
    return kept
