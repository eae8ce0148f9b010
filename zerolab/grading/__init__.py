"""Grading that holds: nbgrader underneath, with pre-sanitized submissions, a sandboxed kernel and a clear CSV.

coursedir  where things are in an nbgrader course, and the grading limits read from its nbgrader_config.py
sanitize   repair a submission before nbgrader sees it (duplicates, flags, names, JSON), in a staged copy
scan       static look at the student's cells for cheating (builtins, helpers, sys.modules, outside files)
sandbox    what isolation this machine offers, and the bubblewrap command that gives it
kernel     the kernel launcher nbgrader starts: limits, sandbox, per-notebook deadline
nbgrader_ext  small nbgrader preprocessors: cell tracking, output caps, hidden tests out of feedback
worker     one grading process: grades students one by one with nbgrader's API, repairs dead kernels
report     the status/reason of each student and grades.csv
"""
