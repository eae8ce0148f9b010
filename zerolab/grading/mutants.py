"""Mutants of a reference solution cell: the plausible mistakes `zerolab grade validate` checks the tests kill.

Each mutant changes one thing, edited in the cell's text at the AST's positions, so comments, nbgrader's markers
and the layout survive and the diff line reads as the student would have written it. Our own code rather than
mutmut or cosmic-ray: mutmut 3 mutates only inside functions, into one trampolined module run by its own pytest
runner, and cosmic-ray mutates a string but brings a dozen dependencies (sqlalchemy, stevedore, aiohttp) and
neither has the course's mistakes (units, collectives, a dropped division by the world size).
"""
from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

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
    mutated: the rest is the lesson's code, which a submission cannot change."""
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


def _one(start, end, new, after=None):
    return [(start, end, new)], after


# --- the operators: each takes (cell, node) and yields (edits, after) for the mutants of that node -----------------

ARITHMETIC = {"+": ["-"], "-": ["+"], "*": ["/"], "/": ["*", "//"], "//": ["/"], "**": ["*"], "%": ["//"]}
COMPARISON = {"<": ["<=", ">"], "<=": ["<"], ">": [">=", "<"], ">=": [">"], "==": ["!="], "!=": ["=="],
              "in": ["not in"], "not in": ["in"], "is": ["is not"], "is not": ["is"]}


def _neutral(operand, op):
    """Whether a BinOp loses nothing without this operand (x * 1, x / 1, x + 0, x - 0): its mutants equal it."""
    value = 1 if isinstance(op, (ast.Mult, ast.Div)) else 0 if isinstance(op, (ast.Add, ast.Sub)) else None
    return _number(operand) and operand.value == value


def arithmetic(cell, node):
    if isinstance(node, (ast.BinOp, ast.AugAssign)):
        start, end, token = cell.token_after(node.left if isinstance(node, ast.BinOp) else node.target)
        suffix = "=" if isinstance(node, ast.AugAssign) else ""
        for new in ARITHMETIC.get(token.removesuffix(suffix), []):
            if not (_neutral(node.right if isinstance(node, ast.BinOp) else node.value, node.op) and new in "+-*/"):
                yield _one(start, end, new + suffix)


def comparison(cell, node):
    if isinstance(node, ast.Compare):
        for before in [node.left] + node.comparators[:-1]:
            start, end, token = cell.token_after(before)
            for new in COMPARISON[token]:
                yield _one(start, end, new)


def boolean(cell, node):
    if isinstance(node, ast.BoolOp):
        for value in node.values[:-1]:
            start, end, token = cell.token_after(value)
            yield _one(start, end, {"and": "or", "or": "and"}[token])
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        start = cell.span(node)[0]
        yield _one(start, re.compile(r"not\s*").match(cell.text, start).end(), "")


def _number(node):
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _shape_argument(cell, node):
    """The -1 of x.view(-1) or x.reshape(-1): "whatever size fits", not a number a student gets wrong."""
    parent = cell.parent.get(node)
    call = cell.parent.get(parent) if isinstance(parent, ast.UnaryOp) else parent
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("view", "reshape")


def constant(cell, node):
    if isinstance(node, ast.Constant) and type(node.value) is bool:
        yield _one(*cell.span(node), str(not node.value))
    elif _number(node) and not _shape_argument(cell, node):
        n = node.value
        halved = n // 2 if type(n) is int else n / 2
        # n +- 1 only where it is a real change (1 % or more): a nudge under a grader's tolerance is not a mistake
        values = [1] if n == 0 else ([n + 1, n - 1] if abs(n) <= 100 else []) + [n * 2, halved]
        for value in dict.fromkeys(v for v in values if v != n):
            yield _one(*cell.span(node), f"({value!r})" if value < 0 else repr(value))


UNIT_POWERS = {(2, 30): (10, 9), (10, 9): (2, 30), (2, 20): (10, 6), (10, 6): (2, 20)}
UNIT_LITERALS = {10**9: "2**30", 10**6: "2**20", 2**30: "10**9", 2**20: "10**6", 1024: "1000", 1000: "1024"}
UNIT_NAMES = {"GiB": "GB", "GB": "GiB", "MiB": "MB", "MB": "MiB"}


def unit(cell, node):
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and _number(node.left) and _number(node.right):
        base, exponent = UNIT_POWERS.get((node.left.value, node.right.value), (None, None))
        if base:
            yield [(*cell.span(node.left), str(base)), (*cell.span(node.right), str(exponent))], None
    elif _number(node) and node.value in UNIT_LITERALS:
        new = UNIT_LITERALS[node.value]
        parent = cell.parent.get(node)
        if "*" in new and isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Pow):
            new = f"({new})"
        yield _one(*cell.span(node), new)
    elif isinstance(node, ast.Name) and node.id in UNIT_NAMES and isinstance(node.ctx, ast.Load):
        yield _one(*cell.span(node), UNIT_NAMES[node.id])
    elif isinstance(node, ast.Attribute) and node.attr in UNIT_NAMES:
        end = cell.span(node)[1]
        yield _one(end - len(node.attr), end, UNIT_NAMES[node.attr])


_PLAIN_STRING = re.compile(r"""([rRuU]?)(['"])([^'"\\\n]*)\2""")


def string(cell, node):
    """A dict's key or value (written as {...} or as d["key"] = ...) or an assigned answer: one letter's case
    swapped, or a multiple-choice letter's next letter. Keys only read (d["key"]) fail loudly; they are left out."""
    parent = cell.parent.get(node)
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or not (
            isinstance(parent, ast.Dict) or isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node
            or isinstance(parent, ast.Subscript) and parent.slice is node and isinstance(parent.ctx, ast.Store)):
        return  # docstrings (Expr), f-string parts (JoinedStr) and call arguments fall out here
    match = _PLAIN_STRING.fullmatch(cell.segment(node))
    if not match:
        return  # triple-quoted, escaped, concatenated: left alone
    prefix, quote, body = match.groups()
    if len(body) == 1 and body in "ABCDE":
        new = "ABCDE"[("ABCDE".index(body) + 1) % 5]
    else:
        letter = next((i for i, char in enumerate(body) if char.isalpha()), None)
        if letter is None:
            return
        new = body[:letter] + body[letter].swapcase() + body[letter + 1:]
    yield _one(*cell.span(node), prefix + quote + new + quote)


DROPPABLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Assert, ast.Delete)


def drop_statement(cell, node):
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if not isinstance(block, list) or len(block) < 2:
            continue
        for statement in block:
            docstring = isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            if isinstance(statement, DROPPABLE) and not docstring:
                multiline = statement.end_lineno > statement.lineno
                yield _one(*cell.span(statement), "pass", "(removed)" if multiline else None)


_BLANK = " \t\r\n\\"  # spaces and line continuations around an operator


def drop_term(cell, node):
    """a + b -> a and b; a - b -> a; a * b -> a and b; a / b -> a (the division by the world size forgotten)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        start, end = cell.span(node)
        operator_start, operator_end, _ = cell.token_after(node.left)
        if not _neutral(node.right, node.op):
            yield _one(len(cell.text[:operator_start].rstrip(_BLANK)), end, "")
        if isinstance(node.op, (ast.Add, ast.Mult)) and not _neutral(node.left, node.op):
            yield _one(start, end - len(cell.text[operator_end:end].lstrip(_BLANK)), "")


def swap_arguments(cell, node):
    if isinstance(node, ast.Call) and len(node.args) >= 2 and not any(
            isinstance(arg, ast.Starred) for arg in node.args[:2]):
        first, second = node.args[:2]
        if cell.segment(first) != cell.segment(second):
            yield [(*cell.span(first), cell.segment(second)), (*cell.span(second), cell.segment(first))], None


def return_none(cell, node):
    if isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        yield _one(*cell.span(node.value), "None")


# torch.distributed calls a student could confuse: (new name, which positional argument it keeps, extra argument)
COLLECTIVES = {"all_reduce": ("reduce", 0, "0"), "reduce": ("all_reduce", 0, None),
               **{name: ("all_reduce", 1, None) for name in
                  ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single")},
               **{name: ("broadcast", 1, "0") for name in
                  ("all_gather", "all_gather_into_tensor", "all_gather_single")}}


def collective(cell, node):
    """reduce <-> all_reduce, reduce-scatter -> all_reduce of its input, all-gather -> broadcast of its input
    from rank 0, ReduceOp.AVG <-> SUM, and an op=...AVG left out."""
    if isinstance(node, ast.Attribute) and node.attr in ("AVG", "SUM") and "ReduceOp" in cell.segment(node.value):
        end = cell.span(node)[1]
        yield _one(end - 3, end, {"AVG": "SUM", "SUM": "AVG"}[node.attr])
    if not isinstance(node, ast.Call):
        return
    func = node.func
    if isinstance(func, ast.Attribute) and cell.segment(func.value) in ("dist", "torch.distributed"):
        name = func.attr
    else:  # a bare all_reduce(...) imported from torch.distributed; a bare reduce is functools'
        name = func.id if isinstance(func, ast.Name) and func.id != "reduce" else None
    if name in COLLECTIVES and len(node.args) > COLLECTIVES[name][1]:
        new, kept, extra = COLLECTIVES[name]
        keywords = [cell.segment(k) for k in node.keywords if k.arg not in ("dst", "src", "group_dst", "group_src")]
        arguments = [cell.segment(node.args[kept])] + ([extra] if extra else []) + keywords
        callee = cell.segment(func)
        yield _one(*cell.span(node), f"{callee[:len(callee) - len(name)]}{new}({', '.join(arguments)})")
    for keyword in node.keywords:
        if keyword.arg == "op" and cell.segment(keyword.value).endswith("AVG"):
            others = [cell.segment(a) for a in node.args] + [cell.segment(k) for k in node.keywords if k is not keyword]
            yield _one(*cell.span(node), f"{cell.segment(node.func)}({', '.join(others)})")


OPERATORS = {operator.__name__: operator for operator in (
    arithmetic, comparison, boolean, constant, unit, string, drop_statement, drop_term, swap_arguments, return_none,
    collective)}
