"""A release notebook filled in with the instructor's solutions: the correct student of tests and benchmarks."""
import copy


def with_solutions(release, source, only=None):
    """A copy of `release` whose solution cells hold the solutions from `source` (every one, or the grade ids in `only`)."""
    answers = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in source.cells
               if cell.metadata.get("nbgrader", {}).get("solution")}
    if only is not None:
        answers = {grade_id: text for grade_id, text in answers.items() if grade_id in set(only)}
    return with_answers(release, answers)


def with_answers(release, answers):
    """A copy of `release` whose cells named in `answers` ({grade_id: source}) hold those sources."""
    filled = copy.deepcopy(release)
    for cell in filled.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return filled
