"""Mutants of a reference solution cell: the plausible mistakes `zerolab grade validate` checks the tests kill.

Each mutant changes one thing, edited in the cell's text at the AST's positions (the operators are in
mutant_operators.py), so comments, nbgrader's markers and the layout survive and the diff line reads as the student
would have written it. Our own code rather than mutmut or cosmic-ray: mutmut 3 mutates only inside functions, into
one trampolined module run by its own pytest runner, and cosmic-ray mutates a string but brings a dozen dependencies
(sqlalchemy, stevedore, aiohttp) and neither has the course's mistakes (units, collectives, a dropped division).
"""
from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

from zerolab.grading.mutant_operators import OPERATORS

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"  # nbgrader's delimiters, found anywhere in a line


@dataclass(frozen=True)
class Mutant:
    operator: str  # one of OPERATORS
    line: int  # 1-based line of the cell source where the change starts
    before: str  # that original line, stripped
    after: str  # the mutated line, stripped ("(removed)" for a dropped multi-line statement)
    source: str  # the whole mutated cell source

    @property
    def diff(self) -> str:
        return f"line {self.line}: {self.before}  ->  {self.after}"


def solution_regions(source: str) -> list[tuple[int, int]]:
    """Each (first, last) run of lines strictly between a BEGIN and an END SOLUTION marker, in order."""
    regions, begin = [], None
    for number, text in enumerate(source.split("\n"), 1):
        if BEGIN in text:
            begin = number
        elif END in text and begin is not None:
            regions.append((begin + 1, number - 1))
            begin = None
    return regions


def solution_lines(source: str) -> tuple[int, int] | None:
    """The lines strictly between '### BEGIN SOLUTION' and '### END SOLUTION', or None when the cell has no markers.

    A cell with several solution regions (a class whose methods each have one) gives the span from the first to the
    last; mutants() leaves the lesson's given lines between them alone."""
    regions = solution_regions(source)
    return (regions[0][0], regions[-1][1]) if regions else None


def mutants(source: str, lines: tuple[int, int] | None = None) -> list[Mutant]:
    """All mutants of a notebook cell's source whose change starts inside lines (first, last; 1-based, inclusive;
    None = the whole cell). Deterministic order (by line, then column, then operator); no two with the same source;
    none equal to the original; every one compiles. In a cell with nbgrader markers only the solution regions are
    mutated: the rest is the lesson's code, which a submission cannot change. A cell that is not Python (an IPython
    magic) raises SyntaxError."""
    cell = _Cell(source)
    regions = solution_regions(source) or [(1, len(cell.lines))]
    found = []
    for rank, (name, operator) in enumerate(OPERATORS.items()):
        for node in ast.walk(cell.tree):
            for edits, after in operator(cell, node):
                start = min(edit[0] for edit in edits)
                line = cell.line_of(start)
                if lines and not lines[0] <= line <= lines[1] or not any(a <= line <= b for a, b in regions):
                    continue
                found.append(((line, start - cell.starts[line - 1], rank), name, cell.apply(edits), after))
    result, seen = [], {source}
    for (line, _, _), name, mutated, after in sorted(found, key=lambda item: item[0]):
        if mutated in seen or not _compiles(mutated):
            continue
        seen.add(mutated)
        after = after or mutated.split("\n")[line - 1].strip()
        result.append(Mutant(name, line, cell.lines[line - 1].strip(), after, mutated))
    return result


class _Cell:
    """The cell's text, its AST, and the AST's (line, UTF-8 byte column) positions as offsets into the text."""

    def __init__(self, source):
        self.text, self.tree = source, ast.parse(source)
        self.lines = source.split("\n")
        self.starts = [0]
        for text in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(text) + 1)
        self.parent = {child: node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)}

    def offset(self, line, column):
        return self.starts[line - 1] + len(self.lines[line - 1].encode()[:column].decode())

    def span(self, node):
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node):
        start, end = self.span(node)
        return self.text[start:end]

    def line_of(self, offset):
        return bisect.bisect_right(self.starts, offset)

    def token_after(self, node):
        """(start, end, text) of the operator token that follows node (past closing brackets and comments)."""
        at = _SKIP.match(self.text, self.span(node)[1]).end()
        match = _TOKEN.match(self.text, at)
        return match.start(), match.end(), re.sub(r"\s+", " ", match.group())

    def apply(self, edits):
        text = self.text
        for start, end, new in sorted(edits, reverse=True):
            text = text[:start] + new + text[end:]
        return text


_SKIP = re.compile(r"(?:\s|\\\r?\n|\)|#[^\n]*)*")  # closing brackets of the left operand, line breaks
_TOKEN = re.compile(r"\*\*=?|//=?|<<=?|>>=?|is\s+not\b|not\s+in\b|[<>=!]=|[-+*/%@<>|&^]=?|in\b|is\b|and\b|or\b")


def _compiles(text):
    try:
        compile(text, "<cell>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True
