"""The messages a learner reads in a lesson's code cells, as catalog keys (zerolab/base/i18n.py): every assert's
message and every literal passed to tr(), an f-string's values written `{}`."""
import ast


def template(node):
    """The catalog key of a message expression, or None when it is not a literal (a name, a call...)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(value.value)
            else:
                parts.append("{}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template(node.left), template(node.right)
        return None if left is None or right is None else left + right
    return None


def _nodes(source):
    """Every AST node of a code cell's source (IPython magics and shell lines skipped); none if it does not parse."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        return list(ast.walk(ast.parse("\n".join(lines))))
    except SyntaxError:
        return []


def messages(source):
    """[(line, key)] of the messages in one code cell's source (IPython magics and shell lines skipped)."""
    found = []
    for node in _nodes(source):
        if isinstance(node, ast.Assert) and node.msg is not None:
            found.append((node.lineno, template(node.msg)))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "tr" and node.args:
            found.append((node.lineno, template(node.args[0])))
    return [(line, key) for line, key in found if key]


FEEDBACK_ARGUMENTS = ("hint", "slips")  # zerolab.lesson.checks' helpers put these into their messages (and tr() them)


def feedback_arguments(source):
    """[(line, key)] of the literal hints and slip messages a code cell passes to zerolab.lesson.checks' helpers
    (``hint="..."``, ``slips={ratio: "..."}``): the learner reads them inside the helper's message, so each needs
    a catalog entry like an assert's message."""
    found = []
    for node in _nodes(source):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "hint":
                found.append((keyword.value.lineno, template(keyword.value)))
            elif keyword.arg == "slips" and isinstance(keyword.value, ast.Dict):
                found += [(value.lineno, template(value)) for value in keyword.value.values]
    return [(line, key) for line, key in found if key]
