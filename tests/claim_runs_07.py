"""Rank functions for tests/test_claims_07.py (lesson 07's claims that need real ranks): one job, run by
zerolab.handmade.core.harness on 2 gloo CPU ranks, kind "claim_runs_07:drill".

Each part returns plain data that the tests compare with what the lesson says:
- zero2, zero3: DeepSpeed ZeRO-2 and ZeRO-3 (bf16, torch's AdamW, 2 micro-steps a step; at stage 3 every parameter
  partitioned): what the optimizer inside DeepSpeed holds (its parameters, Adam's moments) right after
  deepspeed.initialize and after the first step.
- fsdp: torch FSDP's FULL_SHARD, SHARD_GRAD_OP and NO_SHARD on two inner units: the local and the gathered size
  of each flat parameter after forward and after backward, the gradients' and Adam's states' sizes, the
  collectives of forward and of backward; and the node groups HYBRID_SHARD gets.
- fsdp2: fully_shard with reshard_after_forward True and False: whether the module's parameters are sharded
  DTensors after forward and after backward.
- zero_redundancy: torch's ZeroRedundancyOptimizer: the parameters, gradients and Adam states each rank holds.
"""
import os

import torch
import torch.distributed as dist

WORLD = 2


def drill(job, namespace):
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    return {"zero2": _zero2(), "zero3": _zero3(), "fsdp": _fsdp(), "fsdp2": _fsdp2(),
            "zero_redundancy": _zero_redundancy()}


def _adam(**zero):
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
            "zero_optimization": zero, "steps_per_print": 10**9}


def _inputs(step, width=20, dtype=torch.bfloat16):
    generator = torch.Generator().manual_seed(100 * step + int(os.environ["RANK"]))
    return torch.randn(2, width, generator=generator).to(dtype)


def _zero2():
    import deepspeed

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(), torch.nn.Linear(30, 20))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=_adam(stage=2))
    optimizer = engine.optimizer
    fp32 = optimizer.single_partition_of_fp32_groups
    at_initialize = _held(optimizer.optimizer, fp32)
    for step in range(2):
        engine.backward(engine(_inputs(step)).float().pow(2).mean())
        engine.step()
    return {"params": sum(p.numel() for p in model.parameters()), "at_initialize": at_initialize,
            "after_first_step": _held(optimizer.optimizer, fp32)}


def _held(optimizer, partitions):
    """What the optimizer inside DeepSpeed holds: its parameters' sizes, whether each is one of the rank's
    partitions, and Adam's moments."""
    return {"optimizer_params": [[p.numel() for p in group["params"]] for group in optimizer.param_groups],
            "are_partitions": all(any(p is q for q in partitions) for group in optimizer.param_groups
                                  for p in group["params"]),
            "partitions": [p.numel() for p in partitions], "moments": _moments(optimizer, partitions)}


def _moments(optimizer, partitions):
    """Elements of Adam's exp_avg and exp_avg_sq for each partition (0 where Adam has made none yet)."""
    states = [optimizer.state.get(partition, {}) for partition in partitions]
    return [[s[key].numel() if key in s else 0 for key in ("exp_avg", "exp_avg_sq")] for s in states]


def _zero3():
    import deepspeed

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(), torch.nn.Linear(30, 20), torch.nn.Tanh(),
                                torch.nn.Linear(20, 30))
    config = _adam(stage=3, stage3_param_persistence_threshold=0)  # every parameter partitioned
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    optimizer = engine.optimizer
    flat = optimizer.fp32_partitioned_groups_flat
    at_initialize = _held(optimizer.optimizer, flat)
    for step in range(2):
        engine.backward(engine(_inputs(step)).float().pow(2).mean())
        engine.step()
    return {"params": {name: p.ds_numel for name, p in model.named_parameters()}, "at_initialize": at_initialize,
            "after_first_step": _held(optimizer.optimizer, flat)}


def _watch_torch_collectives(calls):
    """Record the name of every torch.distributed collective FSDP calls into ``calls``; a function that undoes it."""
    import torch.distributed.distributed_c10d as c10d

    names = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_gather", "reduce_scatter",
             "_all_gather_base", "_reduce_scatter_base")
    originals = {(module, name): getattr(module, name) for module in (dist, c10d) for name in names
                 if hasattr(module, name)}

    def wrap(name, original):
        def record(*args, **kwargs):
            calls.append(name)
            return original(*args, **kwargs)
        return record

    for (module, name), original in originals.items():
        setattr(module, name, wrap(name, original))
    return lambda: [setattr(module, name, original) for (module, name), original in originals.items()]


def _fsdp():
    """Each strategy on two inner FSDP units (the root's own parameters are never freed after forward)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

    def held(unit):
        flat = unit._handle.flat_param
        gathered = getattr(flat, "_full_param_padded", None)  # the unsharded buffer; its storage is freed to 0
        return {"local": flat.data.numel(),
                "gathered": 0 if gathered is None else gathered.untyped_storage().nbytes() // flat.element_size()}

    found = {}
    for strategy in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(), torch.nn.Linear(30, 20))
        whole = [sum(p.numel() for p in net[i].parameters()) for i in (0, 2)]
        options = {"sharding_strategy": getattr(ShardingStrategy, strategy), "device_id": torch.device("cpu")}
        net[0], net[2] = FSDP(net[0], **options), FSDP(net[2], **options)
        root, units = FSDP(net, **options), [net[0], net[2]]
        optimizer = torch.optim.AdamW(root.parameters(), lr=1e-3)
        calls = []
        undo = _watch_torch_collectives(calls)
        try:
            out = root(_inputs(0, dtype=torch.float32))
            after_forward, forward = [held(u) for u in units], len(calls)
            out.pow(2).mean().backward()
            after_backward = [held(u) for u in units]
            optimizer.step()
        finally:
            undo()
        found[strategy] = {"whole": whole, "after_forward": after_forward, "after_backward": after_backward,
                           "grads": [u._handle.flat_param.grad.numel() for u in units],
                           "exp_avg": sorted(s["exp_avg"].numel() for s in optimizer.state.values()),
                           "forward_calls": calls[:forward], "backward_calls": calls[forward:]}
    found["HYBRID_SHARD"] = _hybrid_shard(FSDP, ShardingStrategy, held)
    return found


def _hybrid_shard(FSDP, ShardingStrategy, held):
    """The node groups torch makes for HYBRID_SHARD (_init_intra_and_inter_node_groups, which it calls with the
    devices per node when given no groups) for 2 ranks as one node of 2 and as 2 nodes of 1, and HYBRID_SHARD on
    the first: it shards within the node."""
    from torch.distributed.fsdp._init_utils import _init_intra_and_inter_node_groups

    found = {"groups": {}}
    for per_node in (2, 1):
        intra, inter = _init_intra_and_inter_node_groups(dist.distributed_c10d._get_default_group(), per_node)
        found["groups"][str(per_node)] = [dist.get_world_size(intra), dist.get_world_size(inter)]
        if per_node == 2:
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(), torch.nn.Linear(30, 20))
            found["whole"] = [sum(p.numel() for p in net[i].parameters()) for i in (0, 2)]
            options = {"sharding_strategy": ShardingStrategy.HYBRID_SHARD, "device_id": torch.device("cpu"),
                       "process_group": (intra, inter)}
            net[0], net[2] = FSDP(net[0], **options), FSDP(net[2], **options)
            FSDP(net, **options)(_inputs(0, dtype=torch.float32)).pow(2).mean().backward()
            found["local"] = [held(u)["local"] for u in (net[0], net[2])]
    return found


def _fsdp2():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    mesh = init_device_mesh("cpu", (WORLD,))
    found = {}
    for reshard in (True, False):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(), torch.nn.Linear(30, 20))
        layers = [net[0], net[2]]
        for layer in layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(net, mesh=mesh, reshard_after_forward=reshard)

        def sharded():
            return [isinstance(p, DTensor) for layer in layers for p in layer.parameters()]

        out = net(_inputs(0, dtype=torch.float32))
        after_forward = sharded()
        out.pow(2).mean().backward()
        found[str(reshard)] = {"after_forward": after_forward, "after_backward": sharded()}
    return found


def _zero_redundancy():
    from torch.distributed.optim import ZeroRedundancyOptimizer

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(), torch.nn.Linear(30, 20), torch.nn.Tanh(),
                              torch.nn.Linear(20, 30))
    optimizer = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
    net(_inputs(0, dtype=torch.float32)).pow(2).mean().backward()
    optimizer.step()
    states = [s for s in optimizer.optim.state.values()]
    return {"params": sum(p.numel() for p in net.parameters()),
            "held_params": sum(p.numel() for p in net.parameters()),
            "grads": sum(p.grad.numel() for p in net.parameters() if p.grad is not None),
            "exp_avg": sum(s["exp_avg"].numel() for s in states),
            "exp_avg_sq": sum(s["exp_avg_sq"].numel() for s in states)}
