"""The learner's code as the ranks will run it: the cell that defines a name, and what it may not use.

The ranks are fresh processes, so they cannot see the kernel's objects. They get the text of the last cell the
kernel ran that defines the name (IPython keeps every input in its history), and run it after a preamble that
gives them torch, torch.distributed as dist, math and a correct partition().
"""
import ast

# Libraries that already implement what the exercises ask for: a solution that calls them scores 0.
FORBIDDEN = {
    "deepspeed": "DeepSpeed",
    "torch.distributed.optim": "torch's ZeroRedundancyOptimizer",
    "torch.distributed.fsdp": "torch's FSDP",
    "torch.distributed._composable": "torch's fully_shard",
    "zerolab.handmade": "the course's own reference implementation",
}
FORBIDDEN_NAMES = {"ZeroRedundancyOptimizer": "torch's ZeroRedundancyOptimizer", "deepspeed": "DeepSpeed",
                   "FullyShardedDataParallel": "torch's FSDP", "fully_shard": "torch's fully_shard"}


# The course's reference answers, reachable in the kernel (zerolab.handmade's modules import them): a cell that
# names one of these, or zerolab.handmade itself, uses the reference. Names the cell defines itself are its own.
# The grading modules (grade, verdict) and zerolab itself have no use in an answer and lead to the reference.
REFERENCE_NAMES = ("flat_partition", "share_size", "handmade", "sharded", "verdict", "grade", "zerolab")


class SourceMissing(AssertionError):
    pass


def cell_defining(name, history=None):
    """Source of the last executed cell that defines `name` at top level (def, class or assignment)."""
    if history is None:
        history = _kernel_history()
    for source in reversed(history):
        tree = _parse(source)
        if tree is not None and any(name in _defined(node) for node in tree.body):
            return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    raise SourceMissing(f"no executed cell defines {name}; run the cell where you wrote it, then this test again")


def forbidden_use(source):
    """What the source uses that does the exercise for it (a library name), or None."""
    tree = _parse(source)
    if tree is None:
        return None
    for node in ast.walk(tree):
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            modules = [node.value]  # importlib.import_module("deepspeed"), __import__(...)
        for module in modules:
            for prefix, what in FORBIDDEN.items():
                if module == prefix or module.startswith(prefix + "."):
                    return what
        if isinstance(node, (ast.Name, ast.Attribute)):
            word = node.id if isinstance(node, ast.Name) else node.attr
            if word in FORBIDDEN_NAMES:
                return FORBIDDEN_NAMES[word]
    return None


def reference_use(source):
    """Which of the course's reference answers the source reaches (import, attribute, name or string): its name
    ("flat_partition", "share_size", or "zerolab.handmade" for the rest), or None.

    An AST scan, so a renamed import (``import ... as p``), ``getattr(module, "flat_partition")`` and
    ``importlib.import_module("zerolab.handmade.core.partition")`` are all found."""
    tree = _parse(source)
    if tree is None:
        return None
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
    for node in ast.walk(tree):
        words = []
        if isinstance(node, ast.Import):
            words = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            words = [node.module or ""] + [alias.name for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = [node.value]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.Name) and node.id not in own:
            words = [node.id]
        parts = [part for word in words for part in word.split(".")]
        if any(name in parts for name in REFERENCE_NAMES):
            return next((name for name in ("flat_partition", "share_size") if name in parts), "zerolab.handmade")
    return None


def _kernel_history():
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython else None
    if shell is None:
        raise SourceMissing("the ranks run your code from the notebook's history: run this test in the notebook")
    return list(shell.history_manager.input_hist_raw)


def unanswered(name, text):
    """Whether the cell ``text`` still holds the release's stub for ``name``: a function that ends in
    `raise NotImplementedError()` and returns nowhere, or a class whose body or __init__ does. Calling either
    always raises, so a test can say so at once instead of first starting ranks or saving a checkpoint."""
    tree = _parse(text or "")
    nodes = [node for node in (tree.body if tree else []) if name in _defined(node)]
    if not nodes or not isinstance(nodes[-1], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    node = nodes[-1]
    if isinstance(node, ast.ClassDef):
        init = [item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"]
        return _ends_in_stub(node.body) or any(_always_raises_stub(method) for method in init)
    return _always_raises_stub(node)


def _always_raises_stub(function):
    returns = any(isinstance(inner, (ast.Return, ast.Yield, ast.YieldFrom)) for inner in ast.walk(function))
    return _ends_in_stub(function.body) and not returns


def _ends_in_stub(body):
    last = body[-1] if body else None
    if not isinstance(last, ast.Raise) or last.cause is not None:
        return False
    exc = last.exc.func if isinstance(last.exc, ast.Call) and not last.exc.args and not last.exc.keywords \
        else last.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def not_answered_message(name, exercise):
    from zerolab.base.i18n import tr

    return tr(f"not answered yet: {name} still ends in raise NotImplementedError(), the line the release left "
              f"there; write your answer ({exercise}) in its cell, run that cell, then this test")


def _parse(source):
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _defined(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    return set()
