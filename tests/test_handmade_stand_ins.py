"""The side-by-side's stand-ins are lesson 08's solutions: zerolab.handmade.side_by_side runs the course's ZeRO-2 and
ZeRO-3 where a learner has not answered yet, and the package keeps them as copies of the solution cells (the
engine cannot import a notebook). Compared as code, docstrings and comments aside, so that a solution changed in
the lesson without its copy (or the other way round) fails here."""
import ast
import inspect

import pytest

from handmade_cases import ZERO2, ZERO3, solution_cell
from zerolab.handmade.zero2 import reference as compare_zero2
from zerolab.handmade.zero3 import reference as zero3_reference

# The copy's names for what the notebook's earlier cells provide.
RENAMED = {ZERO2: {"partition": "flat_partition"}, ZERO3: {}}
STAND_INS = {ZERO2: compare_zero2.Zero2Gradients, ZERO3: zero3_reference.Zero3}


def code_of(tree, renamed):
    """The class's AST without docstrings, with the notebook's names mapped to the copy's."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        if isinstance(node, ast.Name) and node.id in renamed:
            node.id = renamed[node.id]
    return ast.dump(tree, include_attributes=False)


def solution_class(grade_id, name):
    tree = ast.parse(solution_cell(grade_id))
    return next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)


@pytest.mark.parametrize("grade_id", [ZERO2, ZERO3])
def test_the_stand_in_is_the_lessons_solution(grade_id):
    stand_in = STAND_INS[grade_id]
    copy = ast.parse(inspect.getsource(stand_in)).body[0]
    solution = solution_class(grade_id, stand_in.__name__)
    assert code_of(copy, {}) == code_of(solution, RENAMED[grade_id]), (
        f"{stand_in.__module__}.{stand_in.__name__} differs from lesson 08's solution of {grade_id}: copy the "
        f"solution cell into it (the engine's side-by-side runs it for learners who have not answered yet)")


def test_a_changed_line_is_seen():
    solution = solution_class(ZERO3, "Zero3")
    changed = ast.parse(solution_cell(ZERO3).replace("mine /= self.world_size", "mine /= 2")).body
    changed = next(node for node in changed if isinstance(node, ast.ClassDef))
    assert code_of(changed, {}) != code_of(solution, {})
