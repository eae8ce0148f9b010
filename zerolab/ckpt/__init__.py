"""DeepSpeed checkpoints without DeepSpeed's engine: what a folder holds (inspect), one state dict from it
(consolidate, a front to DeepSpeed's zero_to_fp32), and real save / resume jobs on CPU ranks (runs).

May import: zerolab.run, zerolab.lesson (its checks), zerolab.engine, zerolab.base and zerolab.errors.
"""
