"""zerolab's house: a folder per concern, imports only downward, nothing but the face, the entry point and errors at
the root (zerolab/__init__.py draws the map). Read from the code's own import statements, function-level ones too."""
import ast
from pathlib import Path

import zerolab

PACKAGE = Path(zerolab.__file__).resolve().parent

# A package may import the packages on lower floors (and itself), never one on its own floor or above.
FLOORS = {"errors": 0, "base": 0, "engine": 1, "sizing": 2, "lesson": 3, "config": 4, "run": 4, "handmade": 5,
          "ckpt": 5, "grading": 6, "cli": 7}
# Inside handmade: the shared core, then the exercise folders, then the side-by-side over all of them.
HANDMADE = {"core": 0, "zero1": 1, "zero2": 2, "mixed": 3, "zero3": 2, "side_by_side": 4}


def imports(path):
    """(imported module, line) of every `import zerolab...` and `from zerolab... import` in a file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names if alias.name.startswith("zerolab."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("zerolab."):
            yield node.module, node.lineno


def where(dotted):
    """('base', None) for zerolab.base.i18n; ('handmade', 'zero2') for zerolab.handmade.zero2.verdict."""
    parts = dotted.split(".")
    return parts[1], (parts[2] if parts[1] == "handmade" and len(parts) > 2 else None)


def module_name(path):
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def test_the_root_holds_only_the_face_the_entry_point_and_errors():
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py", "errors.py"]
    folders = sorted(path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists())
    assert folders == sorted(set(FLOORS) - {"errors"})


def test_every_package_says_what_it_holds_and_what_it_may_import():
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if init.parent != PACKAGE:
            assert "May import" in doc or "imports run down" in doc.lower(), f"{init}: say what it may import"


def test_imports_only_go_down():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if name.count(".") < 1 or name in ("zerolab.__main__", "zerolab.errors"):
            continue
        mine, my_room = where(name + ".")
        for target, line in imports(path):
            theirs, their_room = where(target)
            if theirs == mine:
                if mine == "handmade" and my_room != their_room and their_room is not None \
                        and HANDMADE[their_room] >= HANDMADE[my_room]:
                    upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
            elif FLOORS[theirs] >= FLOORS[mine]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not upward, "imports that run up or sideways:\n" + "\n".join(upward)


def test_the_check_sees_an_upward_import(tmp_path):
    # The walk above reads function-level imports too: the engine importing the CLI inside a function is caught.
    sample = tmp_path / "memory.py"
    sample.write_text("def f():\n    from zerolab.cli import main\n    return main\n")
    (target, _line), = imports(sample)
    assert FLOORS[where(target)[0]] > FLOORS["engine"]
