"""What the lessons' cells call besides the engine: the course's catalogue (course), test-cell helpers that name a
mistake (checks, checks_cascade), the scan of a learner's cell (source, checks_source), reveals and drills
(reveal, drill), figures and widgets (plots, widgets).

May import: zerolab.sizing, zerolab.engine, zerolab.base and zerolab.errors.
"""
