"""Grading that holds: nbgrader underneath, with pre-sanitized submissions, a sandboxed kernel and a clear CSV.

coursedir  where things are in an nbgrader course, and the grading limits read from its nbgrader_config.py
sanitize   repair a submission before nbgrader sees it (duplicates, flags, names, JSON), in a staged copy
scan       static look at the student's cells for cheating (builtins, helpers, sys.modules, outside files)
sandbox    what isolation this machine offers, and the bubblewrap command that gives it
kernel     the kernel launcher nbgrader starts: limits, sandbox, per-notebook deadline
nbgrader_ext  small nbgrader preprocessors: cell tracking, output caps, hidden tests out of feedback
feedback   what a feedback file shows of an error: the notebook's cells, no hidden test, no grader's path
worker     one grading process: grades students one by one with nbgrader's API, repairs dead kernels
report     the status/reason of each student and grades.csv
diskcap    the disk cap: the submission's folder and /tmp on one size-limited tmpfs per kernel
uids       grading uids leased by lock files, so concurrent runs never share one
release    the lesson in the gradebook (nbgrader generate_assignment)
shards     one part of the class graded into a folder of its own (--shard K/N)
merge      shard folders folded into the course's gradebook (zerolab grade merge)
export     the gradebook's scores for an LMS: Canvas or plain CSV (zerolab grade export)

May import: zerolab.lesson (its checks), zerolab.base and zerolab.errors.
"""
