"""Lesson 08's ZeRO-3 exercise (parameters gathered per layer): the test cell's call (grade), the deeper model
(model), the rank side (rank), what the grader watches in a rank (probe), the judgement (verdict) and the course's own
answer (reference).

May import: zerolab.handmade.core and what it may.
"""
