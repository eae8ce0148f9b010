"""ZeRO built by hand (lesson 08): run a learner's ZeRO on real gloo ranks and judge what it did and what it held.

One folder per exercise, each with its test cell's call (grade), its rank side (rank), its judgement (verdict) and,
where it has them, its own model and memory checks, over a shared core:
- core: the rank process and launcher, the learner's cell, the fixed model, DeepSpeed's partition, live tensors,
  the collective counter; `core.harness.run_checked(job, ranks, verdict)` is every test cell's one shape;
- zero1: partition, ShardedAdamW and DeepSpeed stage 1 beside it;
- zero2: gradients reduced from hooks, a bucket at a time;
- zero3: parameters gathered per layer;
- mixed: bf16 compute with fp32 master shards;
- side_by_side: the learner's ZeRO-1/2/3, DeepSpeed stages 1-3 and FSDP2 on one model, measured.
Imports run down: side_by_side -> the exercise folders -> core; among the folders, zero2 uses zero1's reference
(the course's ZeRO-1 optimizer) and mixed uses zero2's ownership check.
"""
