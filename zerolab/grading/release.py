"""The lesson in the gradebook: nbgrader generate_assignment, which autograde and merge need first."""
from zerolab.errors import UserError


def ensure_assignment(course, lesson, force=False):
    """generate_assignment when the gradebook does not know the lesson yet (autograde needs it), or when asked."""
    from nbgrader.api import Gradebook, MissingEntry

    known = False
    if course.gradebook.exists() and not force:
        with Gradebook(f"sqlite:///{course.gradebook}") as gradebook:
            try:
                gradebook.find_assignment(lesson)
                known = bool(gradebook.find_assignment(lesson).notebooks)
            except MissingEntry:
                pass
    if known and course.release_notebook(lesson).exists():
        return
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    print(f"nbgrader generate_assignment {lesson}" + (" --force" if force else " (the gradebook does not have it yet)"))
    config = course.load_config()
    config.CourseDirectory.root = str(course.root)
    result = NbGraderAPI(CourseDirectory(config=config), config=config).generate_assignment(lesson)
    if not result["success"]:
        from zerolab.grading.report import last_error_line
        raise UserError(f"nbgrader generate_assignment {lesson} failed: {last_error_line(result)}")


def main(argv=None):
    """`python -m zerolab.grading.release COURSE LESSON...`: generate_assignment --force for several lessons in
    one process (autograder/build.py: one nbgrader start-up instead of one per lesson and edition)."""
    import sys
    from pathlib import Path

    from zerolab.grading.coursedir import Course

    root, *lessons = sys.argv[1:] if argv is None else argv
    course = Course(Path(root))
    for lesson in lessons:
        ensure_assignment(course, lesson, force=True)


if __name__ == "__main__":
    main()
