"""Lesson 08's ZeRO-2 exercise (gradients reduced from hooks, a bucket at a time): the test cell's call (grade), the
deeper model (model), the rank side (rank), the gradient-memory sampler (memory), the judgement (verdict) and the
course's own answer for the side-by-side (reference).

May import: zerolab.handmade.zero1, zerolab.handmade.core and what they may.
"""
