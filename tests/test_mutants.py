"""The mutant generator behind `zerolab grade validate` (zerolab/grading/mutants.py): what each operator makes of
small snippets, that the rest of the cell survives untouched, and what it makes of the lessons' real solution cells.
Python itself is the oracle where it can be: the mutants compile, and a mutant of a function computes another value."""
import re
from pathlib import Path

import nbformat
import pytest

from zerolab.grading.mutants import OPERATORS, mutants, solution_lines, solution_regions

SOURCE = Path(__file__).resolve().parent.parent / "autograder" / "source"


def afters(source, operator):
    return {m.after for m in mutants(source) if m.operator == operator}


EXPECTED = [
    ("arithmetic", "x = a + b", {"x = a - b"}),
    ("arithmetic", "x = a - b", {"x = a + b"}),
    ("arithmetic", "x = a * b", {"x = a / b"}),
    ("arithmetic", "x = a / b", {"x = a * b", "x = a // b"}),
    ("arithmetic", "x = a // b", {"x = a / b"}),
    ("arithmetic", "x = a ** b", {"x = a * b"}),
    ("arithmetic", "x = a % b", {"x = a // b"}),
    ("arithmetic", "x += b", {"x -= b"}),
    ("arithmetic", "x /= b", {"x *= b", "x //= b"}),
    ("comparison", "ok = a < b", {"ok = a <= b", "ok = a > b"}),
    ("comparison", "ok = a >= b", {"ok = a > b"}),
    ("comparison", "ok = a == b", {"ok = a != b"}),
    ("comparison", "ok = a in b", {"ok = a not in b"}),
    ("comparison", "ok = a not  in b", {"ok = a in b"}),
    ("comparison", "ok = a is None", {"ok = a is not None"}),
    ("comparison", "ok = a is not None", {"ok = a is None"}),
    ("boolean", "ok = a and b", {"ok = a or b"}),
    ("boolean", "ok = a or b", {"ok = a and b"}),
    ("boolean", "ok = not a", {"ok = a"}),
    ("boolean", "ok = not (a or b) and c",
     {"ok = (a or b) and c", "ok = not (a or b) or c", "ok = not (a and b) and c"}),
    ("constant", "x = 16", {"x = 17", "x = 15", "x = 32", "x = 8"}),
    ("constant", "x = 7", {"x = 8", "x = 6", "x = 14", "x = 3"}),  # an int stays an int: 7 // 2
    ("constant", "x = 0.5", {"x = 1.5", "x = (-0.5)", "x = 1.0", "x = 0.25"}),
    ("constant", "x = 0", {"x = 1"}),
    ("constant", "x = 4096", {"x = 8192", "x = 2048"}),  # 4097 is under any grader's tolerance
    ("constant", "x = True", {"x = False"}),
    ("constant", "x = None", set()),
    ("constant", "y = t.view(-1)", set()),  # view(-1) means "whatever size fits"
    ("unit", "b = n / 2**30", {"b = n / 10**9"}),
    ("unit", "b = n / 10 ** 9", {"b = n / 2 ** 30"}),
    ("unit", "b = n / 2**20", {"b = n / 10**6"}),
    ("unit", "b = n / 1024**3", {"b = n / 1000**3"}),
    ("unit", "b = n / 1000**3", {"b = n / 1024**3"}),
    ("unit", "b = n / 1e9", {"b = n / 2**30"}),
    ("unit", "b = n / 1_000_000_000", {"b = n / 2**30"}),
    ("unit", "b = n / 1e6", {"b = n / 2**20"}),
    ("unit", "b = n / 1024", {"b = n / 1000"}),
    ("unit", "b = n / GiB", {"b = n / GB"}),
    ("unit", "b = n / units.GB", {"b = n / units.GiB"}),
    ("string", 'c = {"stage": 3, "device": "cpu"}', {'c = {"Stage": 3, "device": "cpu"}',
                                                     'c = {"stage": 3, "Device": "cpu"}',
                                                     'c = {"stage": 3, "device": "Cpu"}'}),
    ("string", "zero['stage'] = 2", {"zero['Stage'] = 2"}),
    ("string", 'PATH = "/local_nvme"', {'PATH = "/Local_nvme"'}),
    ("string", 'Q02 = "D"', {'Q02 = "E"'}),
    ("string", 'Q02 = "E"', {'Q02 = "A"'}),
    ("string", 'x = zero["stage"]', set()),  # a key only read fails loudly: not a mutant worth a run
    ("string", 'x = f"zero{stage}"', set()),
    ("string", 'print("stage")', set()),
    ("string", 'c = {"a": """long"""}', {'c = {"A": """long"""}'}),  # triple-quoted strings are left alone
    ("drop_term", "y = a + b", {"y = a", "y = b"}),
    ("drop_term", "y = a - b", {"y = a"}),
    ("drop_term", "y = a * b", {"y = a", "y = b"}),
    ("drop_term", "y = grad / world_size", {"y = grad"}),
    ("drop_term", "y = (a + b) * c", {"y = (a + b)", "y = c", "y = (a) * c", "y = (b) * c"}),
    ("drop_term", "y = a * 1", {"y = 1"}),  # a * 1 -> a changes nothing: no mutant
    ("arithmetic", "y = a * 1", set()),
    ("swap_arguments", "y = f(a, b, c)", {"y = f(b, a, c)"}),
    ("swap_arguments", "y = f(a)", set()),
    ("swap_arguments", "y = f(a, a)", set()),
    ("swap_arguments", "y = f(a, k=b)", set()),
    ("swap_arguments", "y = min(a, b) + max(a, b)", set()),
    ("return_none", "def f(a):\n    return a + 1", {"return None"}),
    ("return_none", "def f(a):\n    return None", set()),
    ("return_none", "def f(a):\n    return", set()),
    ("collective", "dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)",
     {"dist.all_reduce(inp, op=dist.ReduceOp.AVG)", "dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM)",
      "dist.reduce_scatter_tensor(out, inp)"}),
    ("collective", "dist.all_gather_into_tensor(out, inp)", {"dist.broadcast(inp, 0)"}),
    ("collective", "w = torch.distributed.all_gather(outs, x, async_op=True)",
     {"w = torch.distributed.broadcast(x, 0, async_op=True)"}),
    ("collective", "dist.all_reduce(x)", {"dist.reduce(x, 0)"}),
    ("collective", "dist.reduce(x, dst=owner)", {"dist.all_reduce(x)"}),
    ("collective", "total = reduce(add, xs)", set()),  # functools' reduce
]


@pytest.mark.parametrize("operator, source, expected", EXPECTED)
def test_each_operator_makes_the_expected_lines(operator, source, expected):
    assert afters(source, operator) == expected


def test_every_operator_is_tested():
    assert {operator for operator, _, _ in EXPECTED} | {"drop_statement"} == set(OPERATORS)


DROP = '''def f(a, b):
    import math
    x = a + 1
    y = (a +
         b)
    return x * y
'''


def test_drop_statement_leaves_defs_returns_imports_and_lone_statements():
    dropped = [m for m in mutants(DROP) if m.operator == "drop_statement"]
    assert [(m.line, m.after) for m in dropped] == [(3, "pass"), (4, "(removed)")]
    assert dropped[1].source.split("\n")[3] == "    pass"
    assert dropped[1].diff == "line 4: y = (a +  ->  (removed)"
    assert not [m for m in mutants("def f(a):\n    x = a\n") if m.operator == "drop_statement"]


CELL = '''def per_gpu(params, gpus, stage):
    """Bytes per GPU."""
    ### BEGIN SOLUTION
    grads = 2 * params  # fp16 gradients: 2 bytes, K = 12
    if stage >= 2:
        grads /= gpus
    return 2 * params + grads + 12 * params / gpus
    ### END SOLUTION
'''


def per_gpu(source, *args):
    """What the cell's function returns, or the exception it raises."""
    namespace = {}
    exec(source, namespace)
    try:
        return namespace["per_gpu"](*args)
    except Exception as error:  # a mutant that raises computes something else too
        return type(error)


def test_a_mutant_changes_one_line_and_keeps_comments_markers_and_layout():
    found = mutants(CELL)
    assert found
    for mutant in found:
        before, after = CELL.split("\n"), mutant.source.split("\n")
        assert len(after) == len(before), mutant.diff
        assert [i + 1 for i, (a, b) in enumerate(zip(before, after)) if a != b] == [mutant.line], mutant.diff
        assert mutant.before == before[mutant.line - 1].strip()
        assert mutant.after == after[mutant.line - 1].strip()
        assert "# fp16 gradients: 2 bytes, K = 12" in mutant.source
        assert "    ### BEGIN SOLUTION\n" in mutant.source and "    ### END SOLUTION\n" in mutant.source
        assert mutant.diff == f"line {mutant.line}: {mutant.before}  ->  {mutant.after}"


def test_mutants_compile_differ_from_the_cell_and_from_each_other_and_come_in_order():
    found = mutants(CELL)
    sources = [m.source for m in found]
    assert len(set(sources)) == len(sources) and CELL not in sources
    for source in sources:
        compile(source, "<mutant>", "exec")
    assert [(m.line, m.source) for m in found] == [(m.line, m.source) for m in mutants(CELL)]  # deterministic
    assert [m.line for m in found] == sorted(m.line for m in found)


def test_every_mutant_of_a_function_computes_something_else():
    """No operator makes a mutant that Python evaluates to the same numbers (x * 1, dropped neutral terms)."""
    inputs = [(1_000_000_007, 8, 3), (1_000_000_007, 8, 2), (1_000_000_007, 8, 1), (7e9, 4, 0)]
    reference = [per_gpu(CELL, *args) for args in inputs]
    for mutant in mutants(CELL.replace("2 * params +", "2 * params * 1 + 0 +")):
        assert [per_gpu(mutant.source, *args) for args in inputs] != reference, mutant.diff


def test_only_the_given_lines_are_touched():
    everything = mutants(CELL)
    some = mutants(CELL, (5, 6))
    assert {m.line for m in some} == {5, 6}
    assert [m.source for m in some] == [m.source for m in everything if 5 <= m.line <= 6]


def test_only_the_solution_regions_of_a_marked_cell_are_mutated():
    """The docstring line and the def are the lesson's: a submission cannot change them."""
    assert {m.line for m in mutants(CELL)} <= set(range(4, 8))
    two_regions = CELL + "\n\ndef given():\n    return 1 + 1\n\n\ndef second(a):\n" \
        "    ### BEGIN SOLUTION\n    return a - 1\n    ### END SOLUTION\n"
    second = two_regions.split("\n").index("    return a - 1") + 1
    assert solution_lines(two_regions) == (4, second)
    lines = {m.line for m in mutants(two_regions, solution_lines(two_regions))}
    assert lines == set(range(4, 8)) | {second}


def test_columns_count_characters_where_a_line_holds_chinese():
    source = 's = {"名字": 1}; y = a + b  # 中文注释\n'
    assert "s = {\"名字\": 1}; y = a - b  # 中文注释" in {m.after for m in mutants(source)}


def test_solution_lines_of_snippets():
    assert solution_lines("x = 1\n") is None
    assert solution_lines("### BEGIN SOLUTION\nx = 1\n### END SOLUTION") == (2, 2)
    assert solution_lines(CELL) == (4, 7)


def solution_cells():
    for path in sorted(SOURCE.glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                yield path.stem, cell.metadata["nbgrader"]["grade_id"], cell.source


CELLS = list(solution_cells())


def test_the_course_has_graded_solution_cells_to_mutate():
    assert len({lesson for lesson, _, _ in CELLS}) >= 9 and len(CELLS) >= 50


@pytest.mark.parametrize("lesson, grade_id, source", [c for c in CELLS if "### BEGIN SOLUTION" in c[2]],
                         ids=[f"{c[0]}:{c[1]}" for c in CELLS if "### BEGIN SOLUTION" in c[2]])
def test_every_real_solution_cell_has_its_region_found_and_mutants_inside_it(lesson, grade_id, source):
    lines = source.split("\n")
    first, last = solution_lines(source)
    assert "### BEGIN SOLUTION" in lines[first - 2] and "### END SOLUTION" in lines[last]
    found = mutants(source, (first, last))
    assert found, f"{lesson} {grade_id}: no mutant"
    inside = {n for a, b in solution_regions(source) for n in range(a, b + 1)}
    assert {m.line for m in found} <= inside
    for mutant in found:
        compile(mutant.source, grade_id, "exec")


def test_every_collective_call_of_lesson_08_has_a_collective_mutant():
    calls = 0
    for lesson, grade_id, source in CELLS:
        if lesson.startswith("08_"):
            collective_lines = {m.line for m in mutants(source, solution_lines(source)) if m.operator == "collective"}
            for number, text in enumerate(source.split("\n"), 1):
                if re.search(r"\bdist\.(all_reduce|reduce|all_gather\w*|reduce_scatter\w*)\(", text):
                    calls += 1
                    assert number in collective_lines, f"{grade_id} line {number}: {text.strip()}"
    assert calls >= 6
