"""ZeRO built by hand (lesson 08): run a learner's sharded optimizer on real gloo ranks and judge what it did.

- partition: which flat ranges of the parameters each rank owns (DeepSpeed's equal shares, padded to 2N);
- model: the small fixed model, its data and the one-process torch.optim.AdamW reference;
- source: the learner's cell, taken from the kernel's history, and the libraries it may not call;
- harness / rank: start N gloo ranks on CPU that run that cell, and collect what each rank measured;
- verdict: compare the ranks with the reference and name the mistake;
- live: bytes of every tensor alive in a rank, found by the garbage collector (rank.BASELINE: what existed before
  the learner's cell ran);
- batch: the batch a ds_config trains on, as DeepSpeed's own config resolution derives it;
- deepspeed_partition: the partition a real DeepSpeed ZeRO-1/2 optimizer builds (tests compare it with partition);
- sharded: the course's own ZeRO-1 optimizer, used where an exercise needs a working one from another exercise.
- traffic: what a rank's code sends through torch.distributed, counted at the collectives;
- zero2_model, zero2_memory, zero2_rank, zero2_verdict, zero2: the ZeRO-2 exercise (gradients reduced from hooks,
  a bucket at a time), graded on numbers, the measured gradient peak and the counted traffic;
- mixed_model, mixed_rank, mixed_verdict, mixed: the mixed-precision exercise (bf16 compute, fp32 master shards,
  clipping by the global norm).
"""
