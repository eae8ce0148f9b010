"""Off-limits functions: an exercise that asks for a formula cannot be answered by calling the function its test
compares with.

The scan reads the learner's cell (the last executed cell that defines the exercise's name, from the kernel's
history, as lesson 08 does) and the cells of the notebook functions it calls, and resolves every name the code
reaches to the object it means: imports under any name, attribute chains (`zerolab.engine.memory.estimate`, `m.estimate`
after `from zerolab.engine import memory as m`); from zerolab import names, `getattr(module, "name")`
`importlib.import_module(...)` and `__import__(...)`. A string naming an off-limits function counts too, so
`vars(memory)["estimate"]` does not slip by. Names the lesson offers on purpose are passed as ``allowed``.

    off_limits("pcie_seconds", ["zerolab.engine.comm.transfer_time"], allowed=["zerolab.engine.comm.traffic"],
               exercise="exercise 4", instead="divide the bytes by comm.bandwidth(link) yourself")

``forbidden`` and ``allowed`` hold dotted names (a module forbids everything in it) or bare names of the
notebook's own functions (`"optimizer_bytes"`). ``earlier`` names functions of earlier exercises whose cells are
graded on their own and are not scanned again here.
"""
import ast
import builtins
import importlib
import sys
import types

from zerolab.lesson.source import SourceMissing, _parse, cell_defining
from zerolab.base.i18n import tr


def off_limits(defines, forbidden, allowed=(), exercise="this exercise", instead="", earlier=(), history=None,
               namespace=None):
    """AssertionError naming the off-limits function the cell that defines ``defines`` uses; None when it uses none
    (or when there is no kernel to read the cell from)."""
    _refuse_stub(defines, exercise, history)
    used = used_off_limits(defines, forbidden, allowed, earlier, history, namespace)
    if used is None:
        return None
    message = tr(f"off limits: {exercise} asks you to work it out, so the cell that defines {defines} may not use "
                 f"{used}")
    raise AssertionError(message + (f"; {tr(instead)}" if instead else ""))


def _refuse_stub(defines, exercise, history):
    """AssertionError at once when the learner's cell still holds the release's stub: the test need not run first
    (lesson 09's tests save a checkpoint on real ranks before they call the learner's function)."""
    from zerolab.lesson.source import not_answered_message, unanswered

    try:
        text = cell_defining(defines, history)  # history None: the kernel's own
    except SourceMissing:
        return  # no kernel, or no cell defines it: used_off_limits says so where it must
    if unanswered(defines, text):
        raise AssertionError(not_answered_message(defines, exercise))


def used_off_limits(defines, forbidden, allowed=(), earlier=(), history=None, namespace=None):
    """The first of ``forbidden`` that the cell defining ``defines`` (or a notebook function it calls) uses, or None."""
    if history is None or namespace is None:
        shell = _shell()
        if shell is None:
            return None
        history = list(shell.history_manager.input_hist_raw) if history is None else history
        namespace = shell.user_ns if namespace is None else namespace
    rules = _Rules(forbidden, allowed)
    seen, todo = set(), [defines]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            source = cell_defining(name, history)
        except SourceMissing:
            if name == defines:
                raise
            continue
        tree = _parse(source)
        if tree is None:
            continue
        found = _Scan(tree, namespace, rules).first()
        if found is not None:
            return found
        todo += [called for called in _notebook_functions(tree, namespace) if called not in set(earlier)]
    return None


class _Rules:
    """The forbidden and allowed names, each as the dotted text and, when importable, the object it names."""

    def __init__(self, forbidden, allowed):
        self.forbidden = [(name, _lookup(name)) for name in forbidden]
        self.allowed = [(name, _lookup(name)) for name in allowed]

    def match(self, thing):
        """The forbidden name ``thing`` (an object or a dotted str) is or lies in, unless it is allowed; else None."""
        if any(_names(thing, name, obj) for name, obj in self.allowed):
            return None
        return next((name for name, obj in self.forbidden if _names(thing, name, obj)), None)

    def match_text(self, text):
        """The forbidden name a string constant spells (its last part, or a dotted path in it), or None."""
        for name, _ in self.forbidden:
            if text == name.rsplit(".", 1)[-1] or text == name or ("." in name and text.startswith(name + ".")):
                if not any(text in (allowed, allowed.rsplit(".", 1)[-1]) for allowed, _ in self.allowed):
                    return name
        return None


def _names(thing, name, obj):
    """Whether ``thing`` is what ``name`` names, or lies inside it (``name`` a module or a class)."""
    if "." not in name:  # a notebook function, by its name
        return getattr(thing, "__module__", None) == "__main__" and getattr(thing, "__name__", None) == name
    if obj is not None and thing is obj:
        return True
    dotted = thing if isinstance(thing, str) else _dotted(thing)
    if dotted is None:
        return False
    own = _dotted(obj) if obj is not None else None
    return any(dotted == full or dotted.startswith(full + ".") for full in {name, own} if full)


def _dotted(obj):
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if isinstance(module, str) and isinstance(qualname, str) else None


def _lookup(name):
    """The object a dotted name names, or None. A package nobody has imported yet is not imported here: nothing in
    the learner's namespace can come from it (importing any of its modules imports the package first), and the
    dotted text still matches (importing DeepSpeed to look cost every graded lesson-01 notebook 1.7 s)."""
    if "." not in name or name.split(".", 1)[0] not in sys.modules:
        return None
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # not a module (or not importable here): try a shorter prefix
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part, None)
        return obj
    return None


class _Scan:
    """Resolve the names a cell's code reaches; report the first off-limits one."""

    def __init__(self, tree, namespace, rules):
        self.tree, self.namespace, self.rules = tree, namespace, rules
        self.aliases = {}
        self.local = _local_names(tree)  # a name the cell binds itself is not the notebook's object of that name
        self._bind_imports()
        for _ in range(3):  # a = memory; b = a; ... resolved in a few rounds, in any order
            self._bind_assignments()

    def first(self):
        # `comm` in `comm.bandwidth` is judged as part of the whole chain (a module may be off limits but one of
        # its functions offered)
        self.bases = {id(node.value) for node in ast.walk(self.tree) if isinstance(node, ast.Attribute)}
        for node in ast.walk(self.tree):
            found = self._node(node)
            if found is not None:
                return found
        return None

    def _node(self, node):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return self.rules.match(f"{node.module}.*") or next(
                (name for name, _ in self.rules.forbidden if name.rsplit(".", 1)[0] == node.module), None)
        if isinstance(node, ast.Import):
            return next(filter(None, (self.rules.match(sys.modules.get(alias.name) or alias.name)
                                      for alias in node.names)), None)
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            base = sys.modules.get(node.module) or node.module
            return next(filter(None, (self.rules.match(_attribute(base, alias.name)) for alias in node.names)), None)
        if isinstance(node, ast.Name) and node.id not in self.local:
            bare = next((name for name, _ in self.rules.forbidden if name == node.id), None)
            if bare and not isinstance(node.ctx, ast.Store):
                return bare
        if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and id(node) not in self.bases:
            thing = self.resolve(node)
            if thing is not None:
                return self.rules.match(thing)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self.rules.match_text(node.value)
        return None

    def resolve(self, node):
        """The object (or dotted str) an expression names, or None when it is not a name the scan can follow."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id in self.local:
                return None
            if node.id in self.namespace:
                return self.namespace[node.id]
            return getattr(builtins, node.id, None)
        if isinstance(node, ast.Attribute):
            return _attribute(self.resolve(node.value), node.attr)
        if isinstance(node, ast.Call) and node.args:
            func = self.resolve(node.func)
            text = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
            if func in (importlib.import_module, builtins.__import__) and isinstance(text, str):
                return sys.modules.get(text) or text
            if func is builtins.getattr and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and isinstance(node.args[1].value, str):
                return _attribute(self.resolve(node.args[0]), node.args[1].value)
            if func is builtins.vars:
                return self.resolve(node.args[0])
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr == "__dict__":
                base = base.value
            return _attribute(self.resolve(base), node.slice.value)
        return None

    def _bind_imports(self):
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = sys.modules.get(alias.name) or alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases[top] = sys.modules.get(top) or top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                base = sys.modules.get(node.module) or node.module
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = _attribute(base, alias.name)

    def _bind_assignments(self):
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                thing = self.resolve(node.value)
                if thing is not None and isinstance(node.value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
                    self.aliases[node.targets[0].id] = thing


def _local_names(tree):
    """Names the cell binds by assignment, loop, argument, def or class (imports are followed as aliases)."""
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    names |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    names |= {node.name for node in ast.walk(tree)
              if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return names


def _attribute(base, attr):
    if base is None:
        return None
    if isinstance(base, str):
        return f"{base}.{attr}"
    if isinstance(base, types.ModuleType):
        found = getattr(base, attr, None)
        if found is None:
            found = sys.modules.get(f"{base.__name__}.{attr}")
        if found is None or _dotted(found) is None:  # missing, or data (a dict, a number): known by its path
            return f"{base.__name__}.{attr}"
        return found
    if isinstance(base, type):
        return base.__dict__.get(attr)
    return None


def _notebook_functions(tree, namespace):
    """Names in the cell that are functions or classes defined in the notebook: their cells are scanned too."""
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return sorted(name for name in names if isinstance(namespace.get(name), (types.FunctionType, type))
                  and getattr(namespace[name], "__module__", None) == "__main__")


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()
