"""Rank side of a check of zerolab.handmade.core.partition against DeepSpeed: the partition a real ZeRO-1/2 optimizer
builds (job kind "zerolab.handmade.zero1.deepspeed_partition:run", with "preimport_deepspeed").

Each rank builds the course's model plus a 7-element parameter, in three groups (weights, biases, the small one:
fewer elements than 2N, so some ranks own none of it), initializes DeepSpeed with ``job["stage"]`` and reads back,
per group, what DeepSpeedZeroOptimizer recorded for this rank: ``partition_size``, ``params_in_partition``,
``first_offset`` and the size of its fp32 partition. No step is taken.
"""
import os


def groups_of(net):
    named = list(net.named_parameters())
    return [[p for name, p in named if name.endswith("weight")], [p for name, p in named if name.endswith("bias")],
            [net.small]]


def run(job, namespace):
    import deepspeed
    import torch

    from zerolab.handmade.core import model as fixed
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    net = fixed.build()
    net.small = torch.nn.Parameter(torch.zeros(7))
    groups = groups_of(net)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": job["stage"]},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
    engine, optimizer, _, _ = deepspeed.initialize(model=net, model_parameters=[{"params": g} for g in groups],
                                                   config=config)
    rank = int(os.environ["RANK"])
    found = []
    for index, group in enumerate(groups):
        size, first_offset = optimizer.partition_size[index], optimizer.first_offset[index]
        inside = {id(p) for p in optimizer.params_in_partition[index]}
        ranges, flat_start = [], 0
        for position, p in enumerate(group):
            if id(p) in inside:
                start = max(0, rank * size - flat_start)
                end = min(p.numel(), (rank + 1) * size - flat_start)
                ranges.append([position, start, end])
            flat_start += p.numel()
        if ranges and ranges[0][1] != first_offset:
            raise AssertionError(f"first_offset {first_offset} but the first range starts at {ranges[0][1]}")
        found.append({"numels": [p.numel() for p in group], "partition_size": size, "ranges": ranges,
                      "fp32_partition": optimizer.single_partition_of_fp32_groups[index].numel(),
                      "padding": optimizer.groups_padding[index], "optimizer": type(optimizer).__name__})
    return found
