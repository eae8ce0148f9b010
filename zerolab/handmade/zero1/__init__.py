"""Lesson 08's ZeRO-1 exercises (partition, ShardedAdamW, DeepSpeed stage 1 beside it): the test cells' calls
(grade), the rank side (rank), the judgement (verdict), the batch DeepSpeed resolves (batch), the partition a real
DeepSpeed optimizer builds (deepspeed_partition) and the course's own ZeRO-1 (reference).

May import: zerolab.handmade.core and what it may.
"""
