"""A static look at the cells a student wrote, for what honest solutions do not need.

It flags (for a human to review, it does not change the score): rebinding a builtin or a test helper, changing
attributes of imported modules (builtins.abs = ..., checks.plain = ...), touching sys.modules, get_ipython,
tracing hooks, ctypes, paths outside the submission folder (in a cell that can reach files), starting or ending processes, network access.
Simple rules, said plainly in the reason, rather than a clever detector with surprising answers.
"""
import ast
import builtins

BUILTIN_NAMES = {name for name in dir(builtins) if not name.startswith("_")}
PROCESS_CALLS = {("os", "fork"), ("os", "_exit"), ("os", "kill"), ("os", "killpg"), ("os", "system"),
                 ("os", "popen"), ("os", "execv"), ("os", "execvp"), ("os", "chdir"), ("sys", "settrace"),
                 ("sys", "setprofile"), ("threading", "settrace")}
FLAGGED_MODULES = {"subprocess": "starts processes", "multiprocessing": "starts processes", "ctypes": "uses ctypes",
                   "socket": "opens network connections", "urllib": "opens network connections",
                   "requests": "opens network connections", "http": "opens network connections",
                   "gc": "inspects the interpreter's objects", "inspect": "inspects the interpreter's frames"}


def scan_cell(source, helpers=()):
    """Findings for one cell's source: a list of 'line N: what' strings (empty when nothing stands out)."""
    try:
        tree = ast.parse(_without_magics(source))
    except SyntaxError:
        return []  # it fails when it runs; nothing to flag here
    protected = BUILTIN_NAMES | set(helpers)
    imported = _imported_names(tree)
    findings = []

    def flag(node, what):
        findings.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    for node in tree.body:  # top-level bindings shadow names the test cells use
        if isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom)
                                            and (node.module or "").split(".")[0] == "zerolab"):
            continue  # importing a real module or the real helper is fine
        for name in _bound_names(node):
            if name in protected:
                flag(node, f"rebinds {name!r}, which the tests use")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                reason = FLAGGED_MODULES.get(module.split(".")[0])
                if reason:
                    flag(node, f"imports {module} ({reason})")
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root_name(node)
            if root in ("builtins", "__builtins__") or root in imported or root in helpers:
                flag(node, f"changes {ast.unparse(node)} (an attribute of a module the tests may use)")
        elif isinstance(node, ast.Attribute) and _dotted(node) == "sys.modules":
            flag(node, "touches sys.modules")
        elif isinstance(node, ast.Name) and node.id in ("get_ipython", "__builtins__", "__import__"):
            flag(node, f"uses {node.id}")
        elif isinstance(node, ast.Call):
            called = _dotted(node.func)
            parts = tuple(called.split(".")[-2:]) if called else ()
            if parts in PROCESS_CALLS:
                flag(node, f"calls {called}")
            if called in ("setattr", "delattr") and node.args and _root_name(node.args[0]) in (
                    "builtins", "__builtins__", *imported, *helpers):
                flag(node, f"calls {called} on {ast.unparse(node.args[0])}")
        elif _outside_path(node) and _touches_files(tree):
            flag(node, f"uses the path {_outside_path(node)!r}, outside its own folder")
    # by line, and on one line in the order found: a set's order changes from process to process (hash seeds)
    return sorted(dict.fromkeys(findings), key=lambda text: int(text.split()[1].rstrip(":"))
                  if text.split()[1][0].isdigit() else 0)


def _without_magics(source):
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _imported_names(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _bound_names(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(alias.asname or alias.name).split(".")[0] for alias in node.names]
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    names = []
    for target in targets:
        names += [n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    return names


def _root_name(node):
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return ""


FILE_MODULES = {"os", "pathlib", "glob", "shutil", "sqlite3", "io", "tempfile"}
FILE_CALLS = {"open", "Path", "read_text", "read_bytes", "write_text", "write_bytes", "listdir", "scandir", "walk",
              "glob", "iglob", "connect", "copy", "copyfile", "copytree", "rmtree", "remove", "unlink", "rename"}


def _touches_files(tree):
    """Whether a cell can reach files at all: a path in a config dict (nvme_path) is only text without this."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in FILE_MODULES for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FILE_MODULES:
            return True
        if isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] in FILE_CALLS:
            return True
    return False


def _outside_path(node):
    if isinstance(node, ast.JoinedStr):
        node = next((v for v in node.values if isinstance(v, ast.Constant)), None)
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    text = node.value
    if text.startswith("~") or text == ".." or text.startswith("../") or "/../" in text:
        return text
    if len(text) > 1 and text.startswith("/") and (text[1].isalpha() or text[1] in "._"):
        return text
    return None
