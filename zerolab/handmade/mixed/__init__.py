"""Lesson 08's mixed-precision exercise (bf16 compute, fp32 master shards, clipping by the global norm): the test
cell's call (grade), the model and references (model), the rank side (rank) and the judgement (verdict).

May import: zerolab.handmade.zero2 (its ownership check), zerolab.handmade.zero1, zerolab.handmade.core and what
they may.
"""
