"""What every lesson-08 exercise's grading stands on: the rank process and its launcher (rank, rank_launcher,
harness), the learner's cell (learner), the fixed model and its reference (model), DeepSpeed's partition (partition),
live tensors (live) and the collectives a rank calls (traffic).

May import: zerolab.lesson, zerolab.run, zerolab.engine, zerolab.base, zerolab.errors. Not the exercise folders.
"""
