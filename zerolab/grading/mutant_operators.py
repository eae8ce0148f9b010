"""The mutation operators of zerolab.grading.mutants: each takes (cell, node) and yields (edits, after) for the
mutants of that AST node, edits being [(start, end, new text)] in the cell's text and after the mutated line to show
when it is not simply the edited line (None). cell is mutants._Cell: its text, AST positions as offsets, parents."""
import ast
import re


def _one(start, end, new, after=None):
    return [(start, end, new)], after


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
            if not (_neutral(node.right if isinstance(node, ast.BinOp) else node.value, node.op) and new != "//"):
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
    """f(a, b) -> f(b, a); not min or max, which give the same either way."""
    if isinstance(node, ast.Call) and len(node.args) >= 2 and getattr(node.func, "id", None) not in ("min", "max") \
            and not any(isinstance(arg, ast.Starred) for arg in node.args[:2]):
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
