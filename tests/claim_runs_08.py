"""Rank side of tests/test_claims_08.py: lesson 08's claims about DeepSpeed 0.19.8 and FSDP2 that only a run shows,
watched from inside each rank (job kind "claim_runs_08:lesson08", 2 gloo ranks, DeepSpeed imported before the fork).

One function trains the six-layer model of lesson 08's ZeRO-3 exercise (zerolab.handmade.zero3.model) under each
configuration below, fp32 and torch's AdamW unless said, and records from DeepSpeed's and torch's own objects:

- ``stage1`` / ``stage2``: ZeRO-1 and ZeRO-2 with a reduce bucket of BUCKET elements (smaller than the largest
  weight): the gradient hooks the optimizer installed, each bucket reduction (inside autograd's backward or not,
  how full the bucket was, which gradient arrived, whether the parameters outside this rank's partition lost
  their ``.grad`` at once), the collectives of each backward, the gradient storage alive at every gradient hook,
  the Adam moments' and the partition's sizes;
- ``stage1_accumulating``: stage 1 with the same global batch in two micro-steps (the parameters reached);
- ``owner_reduce`` (use_multi_rank_bucket_allreduce false) and ``no_reduce_scatter`` (reduce_scatter false too):
  the collectives of a backward;
- ``bf16``: ZeRO-2 in bf16: the engine's communication dtype, the dtypes of the gradient and parameter
  collectives, the fp32 master partition and the bf16 parameters after the step;
- ``stage3_persist``: ZeRO-3 with DeepSpeed's defaults, where every parameter of this model is below the
  persistence threshold;
- ``stage3``: ZeRO-3 keeping no parameter whole (persistence threshold 0), other defaults: the module hooks, every
  fetch and release of a module's parameters and whether they were already gathered (prefetched), the elements
  all-gathered per step, the Linear forwards per step, and the fp32 partition the optimizer steps;
  ``stage3_no_prefetch`` the same with stage3_prefetch_bucket_size 0;
- ``fsdp2`` / ``fsdp2_forward`` / ``fsdp2_backward``: fully_shard on each layer and the model, by default, with
  each layer told to prefetch the next in forward, and with each layer from the third on told to prefetch the one
  two below it in backward: which prefetches FSDP2 issued, in which pass.
"""
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

BUCKET = 2500  # elements: between the weights (720-2597 elements) and the biases (23-53)
STEPS = 3
HYPER = {"lr": 1e-2, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.01}
COLLECTIVES = {"all_reduce": ("all-reduce", 0, "tensor"), "reduce": ("reduce", 0, "tensor"),
               "all_gather_into_tensor": ("all-gather", 0, "output_tensor"),
               "reduce_scatter_tensor": ("reduce-scatter", 1, "input"), "broadcast": ("broadcast", 0, "tensor"),
               "all_to_all_single": ("all-to-all", 0, "output")}
CALLS = []  # {op, numel, dtype, in_backward, dst} of every collective since the last clear


def in_backward():
    """Whether autograd is running a backward right now (a gradient hook, or code it called)."""
    return torch._C._current_graph_task_id() != -1


def watch_collectives():
    """Record each collective torch.distributed runs; before DeepSpeed's comm backend starts (it keeps references)."""
    for name, (op, position, keyword) in COLLECTIVES.items():
        original = getattr(dist, name)

        def call(*args, _original=original, _op=op, _position=position, _keyword=keyword, **kwargs):
            tensor = kwargs.get(_keyword, args[_position] if len(args) > _position else None)
            CALLS.append({"op": _op, "numel": tensor.numel(), "dtype": str(tensor.dtype).replace("torch.", ""),
                          "in_backward": in_backward(), "dst": kwargs.get("dst", args[1] if len(args) > 1 and
                                                                           _op == "reduce" else None)})
            return _original(*args, **kwargs)

        setattr(dist, name, call)
        if getattr(c10d, name, None) is original:
            setattr(c10d, name, call)


def config(stage, accumulation=1, **zero):
    from zerolab.handmade.zero3 import model as deep

    world_size = dist.get_world_size()
    return {"train_micro_batch_size_per_gpu": deep.GLOBAL_BATCH // world_size // accumulation,
            "gradient_accumulation_steps": accumulation, "gradient_clipping": 0.0,
            "optimizer": {"type": "AdamW", "params": dict(HYPER, torch_adam=True)},
            "zero_optimization": {"stage": stage, **zero}}


def lesson08(job, namespace=None):
    import deepspeed  # noqa: F401 (imported by the launcher before the fork)

    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    watch_collectives()
    bucket = {"reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET}
    found = {"stage2": zero12(config(2, **bucket)), "stage1": zero12(config(1, **bucket)),
             "stage1_accumulating": zero12(config(1, accumulation=2, **bucket))}
    found["owner_reduce"] = zero12(config(2, use_multi_rank_bucket_allreduce=False, **bucket), steps=1)
    found["no_reduce_scatter"] = zero12(config(2, use_multi_rank_bucket_allreduce=False, reduce_scatter=False,
                                               **bucket), steps=1)
    found["bf16"] = zero12(dict(config(2, **bucket), bf16={"enabled": True}), steps=2, bf16=True)
    found["stage3_persist"] = zero3(config(3))
    found["stage3"] = zero3(config(3, stage3_param_persistence_threshold=0))
    found["stage3_no_prefetch"] = zero3(config(3, stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=0))
    found["fsdp2"], found["fsdp2_forward"] = fsdp2(), fsdp2(forward=True)
    found["fsdp2_backward"] = fsdp2(backward=True)
    return found


def _engine(cfg, bf16=False):
    import deepspeed

    from zerolab.handmade.zero3 import model as deep

    net = deep.build()
    if bf16:
        net = net.to(torch.bfloat16)
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg)
    return engine, net


def _micro_batches(engine, step, dtype=torch.float32):
    from zerolab.handmade.zero3 import model as deep

    inputs, targets = deep.local_batch(step, dist.get_rank(), dist.get_world_size())
    inputs, targets = inputs.to(dtype), targets.to(dtype)
    micro = engine.train_micro_batch_size_per_gpu()
    return [(inputs[first:first + micro], targets[first:first + micro]) for first in range(0, len(inputs), micro)]


def _storage(tensor):
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def _bucket_buffers(optimizer):
    """The flat buffers of the stage 1/2 optimizer's gradient buckets (one per dtype, two under overlap_comm)."""
    return [buffer for bucket in optimizer.ipg_buckets.values()
            for buffer in (bucket.buffer if isinstance(bucket.buffer, list) else [bucket.buffer])
            if torch.is_tensor(buffer)]


def zero12(cfg, steps=2, bf16=False):
    from zerolab.handmade.zero3 import model as deep

    engine, net = _engine(cfg, bf16)
    optimizer = engine.optimizer
    params = list(net.parameters())
    record = {"params": [p.numel() for p in params], "hooks": len(getattr(optimizer, "_grad_acc_hooks", [])),
              "partition_size": [int(n) for n in optimizer.partition_size], "flushes": [], "collectives": [],
              "grad_bytes_at_hooks": [], "held_outside_at_hooks": [], "held_grads_end_of_backward": [],
              "arrivals": [], "touched": sum(p.numel() for group in optimizer.params_in_partition for p in group)}
    in_partition = {id(p): optimizer.is_param_in_current_partition[optimizer.get_param_id(p)] for p in params}
    arriving = {"param": None}
    original_arrive, original_reduce = (optimizer.reduce_independent_p_g_buckets_and_remove_grads,
                                        optimizer.reduce_ipg_grads)

    def arrive(param, i):
        arriving["param"] = param
        try:
            return original_arrive(param, i)
        finally:
            arriving["param"] = None
            buffers = [_storage(buffer)[0] for buffer in _bucket_buffers(optimizer)]
            record["arrivals"].append([param.numel(), param.grad is not None and _storage(param.grad)[0] in buffers])

    def reduce_and_look(*args, **kwargs):
        buckets = [b for b in optimizer.ipg_buckets.values() if b.params]
        bucket_params = [optimizer.bit16_groups[g][i] for b in buckets for g, i, _ in b.params]
        elements = sum(b.elements for b in buckets)
        done = original_reduce(*args, **kwargs)
        record["flushes"].append({
            "in_backward": in_backward(), "elements": elements,
            "numels": [p.numel() for p in bucket_params],
            "arriving": arriving["param"].numel() if arriving["param"] is not None else None,
            "outside_freed": all(p.grad is None for p in bucket_params if not in_partition[id(p)]),
            "outside": sum(not in_partition[id(p)] for p in bucket_params)})
        return done

    optimizer.reduce_independent_p_g_buckets_and_remove_grads, optimizer.reduce_ipg_grads = arrive, reduce_and_look

    def look(param):  # runs after DeepSpeed's own hook on the same parameter (hooks run in the order registered)
        """The gradient storage alive now, each once: .grad, the buckets, the partition's gradients (stage 2 keeps
        whole the gradient of every parameter its partition touches, in grads_in_partition)."""
        storages = dict(_storage(p.grad) for p in params if p.grad is not None)
        storages.update(_storage(buffer) for buffer in _bucket_buffers(optimizer))
        if torch.is_tensor(getattr(optimizer, "grads_in_partition", None)):
            storages.update([_storage(optimizer.grads_in_partition)])
        for group in getattr(optimizer, "averaged_gradients", {}).values():
            storages.update(_storage(g) for g in group or () if torch.is_tensor(g))
        record["grad_bytes_at_hooks"][-1].append(sum(storages.values()))
        record["held_outside_at_hooks"][-1].append(
            sum(p.grad.numel() for p in params if p.grad is not None and not in_partition[id(p)]))

    for p in params:
        p.register_post_accumulate_grad_hook(look)
    for step in range(steps):
        for inputs, targets in _micro_batches(engine, step, params[0].dtype):
            CALLS.clear()
            record["grad_bytes_at_hooks"].append([])
            record["held_outside_at_hooks"].append([])
            engine.backward(deep.loss(engine(inputs), targets))
            record["held_grads_end_of_backward"].append(sum(p.grad.numel() for p in params if p.grad is not None))
            record["collectives"].append(list(CALLS))
            CALLS.clear()
            engine.step()
            record.setdefault("step_collectives", []).append(list(CALLS))
    inner = optimizer.optimizer
    record["moments"] = [[state[key].numel() for key in ("exp_avg", "exp_avg_sq")] for state in inner.state.values()]
    record["bytes_per_element"] = params[0].element_size()
    record["outside_numel"] = sum(p.numel() for p in params if not in_partition[id(p)])
    record["largest"] = max(p.numel() for p in params)
    record["final"] = torch.cat([p.detach().float().reshape(-1) for p in params]).tolist()
    record["communication_dtype"] = str(engine.communication_data_type).replace("torch.", "")
    masters = optimizer.single_partition_of_fp32_groups
    record["master"] = [{"dtype": str(m.dtype).replace("torch.", ""), "numel": m.numel()} for m in masters]
    rank = dist.get_rank()
    record["bit16_is_master_rounded"] = all(
        torch.equal(optimizer.parallel_partitioned_bit16_groups[i][rank], m.detach().to(params[0].dtype))
        for i, m in enumerate(masters))
    record["master_separate"] = all(_storage(m)[0] != _storage(optimizer.parallel_partitioned_bit16_groups[i][rank])[0]
                                    for i, m in enumerate(masters))
    engine.destroy()
    return record


def zero3(cfg, steps=STEPS):
    from deepspeed.runtime.zero import partitioned_param_coordinator as coordinator
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    from zerolab.handmade.zero3 import model as deep

    engine, net = _engine(cfg)
    optimizer, module = engine.optimizer, engine.module
    layers = deep.layers(module)
    index = {id(layer): position for position, layer in enumerate(layers)}
    record = {"persist": [bool(p.ds_persist) for p in module.parameters()], "events": [], "all_gathered": [],
              "linear_forwards": [], "between_steps_numel": [],
              "shards": [p.ds_tensor.ds_numel for p in module.parameters()],
              "hooks": sorted({_name(hook) for layer in layers for hooks in (layer._forward_pre_hooks,
                                                                               layer._forward_hooks)
                               for hook in hooks.values()}), "output_grad_fns": []}
    fetch, release = (coordinator.PartitionedParameterCoordinator.fetch_sub_module,
                      coordinator.PartitionedParameterCoordinator.release_sub_module)
    events = []

    def fetching(self, submodule, forward):
        if id(submodule) in index:
            ready = [p.ds_status != ZeroParamStatus.NOT_AVAILABLE for p in submodule.parameters(recurse=False)]
            events.append(["fetch", index[id(submodule)], forward, all(ready)])
        return fetch(self, submodule, forward)

    def releasing(self, submodule, forward=False):
        done = release(self, submodule, forward)
        if id(submodule) in index:
            events.append(["release", index[id(submodule)], forward,
                           all(p.ds_status == ZeroParamStatus.NOT_AVAILABLE
                               for p in submodule.parameters(recurse=False))])
        return done

    forwards = {"count": 0}

    def counted(layer, inputs, output):  # after DeepSpeed's forward hooks: sees the output they return
        forwards["count"] += 1
        record["output_grad_fns"].append(type(output.grad_fn).__name__)

    counters = [layer.register_forward_hook(counted) for layer in layers]
    coordinator.PartitionedParameterCoordinator.fetch_sub_module = fetching
    coordinator.PartitionedParameterCoordinator.release_sub_module = releasing
    try:
        for step in range(steps):
            events.clear()
            CALLS.clear()
            forwards["count"] = 0
            for inputs, targets in _micro_batches(engine, step):
                engine.backward(deep.loss(engine(inputs), targets))
                engine.step()
            record["events"].append(list(events))
            record["all_gathered"].append(sum(c["numel"] for c in CALLS if c["op"] == "all-gather"))
            record["linear_forwards"].append(forwards["count"])
            record["between_steps_numel"].append([p.data.numel() for p in module.parameters()])
    finally:
        coordinator.PartitionedParameterCoordinator.fetch_sub_module = fetch
        coordinator.PartitionedParameterCoordinator.release_sub_module = release
        for handle in counters:
            handle.remove()
    record["padded"] = [p.ds_tensor.ds_numel * dist.get_world_size() for p in module.parameters()]
    record["numels"] = [p.ds_numel for p in module.parameters()]
    record["master_separate"] = [_storage(m)[0] != _storage(p)[0] and m.dtype == torch.float32 and p.dtype ==
                                 torch.float32 for m, p in zip(optimizer.fp32_partitioned_groups_flat,
                                                               optimizer.fp16_partitioned_groups_flat)]
    record["layers"] = len(layers)
    engine.destroy()
    return record


def _name(hook):
    """A hook's function name, through DeepSpeed's instrument_w_nvtx wrapper (which keeps no __wrapped__)."""
    for cell in getattr(hook, "__closure__", None) or ():
        inner = cell.cell_contents
        if hook.__name__ == "wrapped_fn" and callable(inner):
            return _name(inner)
    return hook.__name__


def fsdp2(forward=False, backward=False):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    from zerolab.handmade.zero3 import model as deep

    net = deep.build()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    layers = deep.layers(net)
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    if forward:  # each layer fetches the next one ahead in forward
        for layer, following in zip(layers, layers[1:]):
            layer.set_modules_to_forward_prefetch([following])
    if backward:  # each layer fetches the one two below it ahead in backward, instead of the next
        for layer, lower in zip(layers[2:], layers):
            layer.set_modules_to_backward_prefetch([lower])
    groups = {}
    for position, layer in enumerate(layers):
        groups[id(layer._get_fsdp_state()._fsdp_param_group)] = position
    prefetches = []
    raw = FSDPParamGroup.__dict__["_prefetch_unshard"]  # a staticmethod

    def prefetch(target, pass_type):
        prefetches.append([pass_type, groups.get(id(target))])
        return raw.__func__(target, pass_type)

    FSDPParamGroup._prefetch_unshard = staticmethod(prefetch)
    try:
        optimizer = torch.optim.AdamW(net.parameters(), lr=HYPER["lr"])
        for step in range(2):
            inputs, targets = deep.local_batch(step, dist.get_rank(), dist.get_world_size())
            optimizer.zero_grad()
            deep.loss(net(inputs), targets).backward()
            optimizer.step()
    finally:
        FSDPParamGroup._prefetch_unshard = raw
    return {"prefetches": prefetches, "layers": len(layers)}
