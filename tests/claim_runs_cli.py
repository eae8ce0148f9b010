"""Rank probe of tests/test_claims_cli.py (what `zerolab explain` and `zerolab check` say DeepSpeed does, where only
a run shows it): one job, six engines on the fixed model of zerolab.handmade.core.model (Linear 16->61, Tanh,
Linear 61->23: parameters of 976, 61, 1403 and 23 elements), each watched from inside.

- "stage2": bf16, 2 micro-steps a step, 4 steps, with a DeepSpeed data loader, a WarmupLR scheduler,
  steps_per_print 2, wall_clock_breakdown, reduce_bucket_size 1500, allgather_bucket_size 512 and
  allgather_partitions false: per micro-step the collectives of backward and step, the learning rate, whether the
  parameters changed; the progress reports; the wall-clock timers; the loss scaler; the dtypes of parameters and
  gradients; whether each gradient sits in the reduce bucket when the bucket is reduced;
- "stage2_reduce": reduce_scatter true, use_multi_rank_bucket_allreduce false, contiguous_gradients false;
  "stage2_allreduce": reduce_scatter false: the collectives of one backward, and where the gradients sit;
- "stage2_nvme": offload_optimizer "nvme" without nvme_path and contiguous_gradients false at stage 2;
- "stage3" (param_persistence_threshold 61, sub_group_size 500, DeepSpeed's prefetch and reuse defaults) and
  "stage3_lean" (threshold 0, prefetch 0, reuse distance 0, reduce_scatter false), 3 steps each: which parameters
  are gathered while the Tanh between the two Linears runs and after the forward, the collectives of backward,
  each parameter's shard, and the optimizer's fp32 sub-groups.
"""
import os

from claim_runs_05 import _watch_collectives


def cli_claims(job, namespace):
    import deepspeed

    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    calls = _watch_collectives()
    return {"stage2": _stage2(deepspeed, calls),
            "stage2_reduce": _stage2_backward(deepspeed, calls, use_multi_rank_bucket_allreduce=False),
            "stage2_allreduce": _stage2_backward(deepspeed, calls, reduce_scatter=False),
            "stage2_scattered": _stage2_backward(deepspeed, calls, contiguous_gradients=False),
            "stage2_nvme": _stage2_nvme(deepspeed),
            "stage3": _stage3(deepspeed, calls, stage3_param_persistence_threshold=61, sub_group_size=500),
            "stage3_no_prefetch": _stage3(deepspeed, calls, stage3_param_persistence_threshold=0,
                                          stage3_prefetch_bucket_size=0),
            "stage3_lean": _stage3(deepspeed, calls, stage3_param_persistence_threshold=0,
                                   stage3_prefetch_bucket_size=0, stage3_max_reuse_distance=0, reduce_scatter=False)}


def _config(stage, accumulation=1, **zero):
    return {"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": accumulation,
            "steps_per_print": 10**9, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
            "zero_optimization": {"stage": stage, **zero}}


def _stage2(deepspeed, calls):
    import torch

    from zerolab.handmade.core import model as fixed

    config = _config(2, accumulation=2, reduce_bucket_size=1500, allgather_bucket_size=512,
                     allgather_partitions=False)
    config.update(bf16={"enabled": True}, steps_per_print=2, wall_clock_breakdown=True,
                  scheduler={"type": "WarmupLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3,
                                                            "warmup_num_steps": 100}})
    net = fixed.build()
    rows = fixed.GLOBAL_BATCH * 4
    data = torch.utils.data.TensorDataset(torch.randn(rows, fixed.IN), torch.randn(rows, fixed.OUT))
    engine, _, loader, scheduler = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config,
                                                        training_data=data)
    optimizer = engine.optimizer
    reports, in_bucket, grad_dtypes = [], [], set()
    report = engine._report_progress
    engine._report_progress = lambda step: reports.append(step) or report(step)
    reduce = optimizer.reduce_ipg_grads

    def reduce_and_look(*args, **kwargs):
        for bucket in optimizer.ipg_buckets.values():
            if not bucket.params:
                continue
            buffer = bucket.buffer[bucket.index]
            start, end = buffer.data_ptr(), buffer.data_ptr() + buffer.numel() * buffer.element_size()
            for group, index, _ in bucket.params:
                grad = optimizer.bit16_groups[group][index].grad
                in_bucket.append(grad is not None and start <= grad.data_ptr() < end)
        return reduce(*args, **kwargs)

    optimizer.reduce_ipg_grads = reduce_and_look
    for p in net.parameters():
        p.register_hook(lambda grad: grad_dtypes.add(str(grad.dtype)))
    micro_steps = []
    batches = iter(loader)
    for _ in range(8):
        inputs, targets = next(batches)
        before = fixed.flat(engine.module)
        calls.clear()
        engine.backward(fixed.loss(engine, inputs.to(torch.bfloat16), targets.to(torch.bfloat16)))
        backward = list(calls)
        calls.clear()
        engine.step()
        micro_steps.append({"rows": len(inputs), "backward": backward, "step": list(calls),
                            "changed": fixed.flat(engine.module) != before, "global_steps": engine.global_steps,
                            "lr": scheduler.get_last_lr()[0], "scheduler_steps": scheduler.last_batch_iteration + 1})
    return {"micro_steps": micro_steps, "reports": reports, "in_bucket": in_bucket, "grad_dtypes": sorted(grad_dtypes),
            "param_dtypes": sorted({str(p.dtype) for p in net.parameters()}),
            "timers": {name: seconds for name, seconds in engine.get_wall_clock_timers().items()},
            "loss_scaler": type(optimizer.loss_scaler).__name__, "loss_scale": float(optimizer.loss_scale),
            "dynamic_loss_scale": bool(optimizer.dynamic_loss_scale), "loader_batch": loader.batch_size,
            "optimizer": type(engine.basic_optimizer).__name__}


def _stage2_backward(deepspeed, calls, **zero):
    """One backward at stage 2 (fp32): its collectives, and whether a gradient sits in a reduce bucket buffer."""
    from zerolab.handmade.core import model as fixed

    net = fixed.build()
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=_config(2, **zero))
    optimizer, in_bucket = engine.optimizer, []
    reduce = optimizer.reduce_ipg_grads

    def reduce_and_look(*args, **kwargs):
        buffers = [b for bucket in optimizer.ipg_buckets.values() for b in bucket.buffer]
        for group in optimizer.bit16_groups:
            for p in group:
                if p.grad is not None:
                    in_bucket.append(any(b.data_ptr() <= p.grad.data_ptr() < b.data_ptr() + b.numel() * b.element_size()
                                         for b in buffers))
        return reduce(*args, **kwargs)

    optimizer.reduce_ipg_grads = reduce_and_look
    inputs, targets = (rows[fixed.rows(int(os.environ["RANK"]), 2)] for rows in fixed.batch(0))
    calls.clear()
    engine.backward(fixed.loss(engine, inputs[:3], targets[:3]))
    backward = list(calls)
    engine.step()
    return {"backward": backward, "in_bucket": in_bucket}


def _stage2_nvme(deepspeed):
    from zerolab.handmade.core import model as fixed

    net = fixed.build()
    config = _config(2, offload_optimizer={"device": "nvme"}, contiguous_gradients=False)
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    before = fixed.flat(engine.module)
    inputs, targets = (rows[fixed.rows(int(os.environ["RANK"]), 2)] for rows in fixed.batch(0))
    engine.backward(fixed.loss(engine, inputs[:3], targets[:3]))
    engine.step()
    optimizer = engine.optimizer
    return {"cpu_offload": bool(optimizer.cpu_offload), "contiguous_gradients": bool(optimizer.contiguous_gradients),
            "swappers": sorted(name for name in vars(optimizer) if "swap" in name.lower() and getattr(optimizer, name)),
            "trained": fixed.flat(engine.module) != before}


def _stage3(deepspeed, calls, **zero):
    from zerolab.handmade.core import model as fixed

    net = fixed.build()
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=_config(3, **zero))
    first, second = net[0], net[2]
    seen = {"before_forward": [], "in_first": [], "at_tanh": [], "after_forward": []}

    def status():
        return {"first": {name: p.ds_status.name for name, p in first.named_parameters()},
                "second": {name: p.ds_status.name for name, p in second.named_parameters()}}

    forward = first.forward

    def forward_and_look(*args, **kwargs):
        seen["in_first"].append(status())
        return forward(*args, **kwargs)

    first.forward = forward_and_look
    net[1].register_forward_pre_hook(lambda module, args: seen["at_tanh"].append(status()))
    backward = []
    for step in range(3):
        inputs, targets = (rows[fixed.rows(int(os.environ["RANK"]), 2)] for rows in fixed.batch(step))
        seen["before_forward"].append(status())
        loss = fixed.loss(engine, inputs[:3], targets[:3])
        seen["after_forward"].append(status())
        calls.clear()
        engine.backward(loss)
        backward.append(list(calls))
        engine.step()
    optimizer = engine.optimizer
    return {**seen, "backward": backward,
            "persist": {name: bool(p.ds_persist) for name, p in net.named_parameters()},
            "numel": {name: p.ds_numel for name, p in net.named_parameters()},
            "shard": {name: p.ds_tensor.numel() for name, p in net.named_parameters()},
            "sub_groups": [g.numel() for g in optimizer.fp32_partitioned_groups_flat],
            "partition": sum(p.ds_tensor.numel() for p in net.parameters() if not p.ds_persist)}
