"""Rank functions for tests/test_claims_01.py (lesson 01's claims that only a run on 2 CPU ranks shows).

Job kind "claim_runs_01:zero_on_two_ranks", run by zerolab.handmade.core.harness (the gloo group is up). Each rank
trains small models with real DeepSpeed engines (bf16, torch's AdamW) and reports, from DeepSpeed's own objects:
- "gradients": at stages 1 and 2 with 2 micro-steps a step, the elements of every gradient tensor the rank holds
  after each micro-step's backward (the parameters' .grad and the optimizer's partitions, each byte once);
- "activations": at stages 1, 2 and 3, the bytes the engine's forward saves for backward that are not parameters,
  next to the same bytes of a plain copy of the model on the same micro-batch;
- "gathers": at stage 3, the elements all-gathered in each forward and each backward of 3 steps, with DeepSpeed's
  defaults and with stage3_max_live_parameters and stage3_max_reuse_distance at 0.
"""
import os

LAYERS, WIDTH, MICRO = 4, 64, 4  # 4 x 4096-element weights: a rank's partition at N = 2 is exactly two of them
WIDE = 512  # 262,144-element weights: above stage3_param_persistence_threshold (1e5), so stage 3 partitions them


def _net(width):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(LAYERS)])


def _engine(net, stage, accumulation=1, **zero):
    import deepspeed

    config = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": accumulation,
              "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": stage, **zero}}
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    return engine


def _batch(width, seed):
    import torch

    generator = torch.Generator().manual_seed(seed * 10 + int(os.environ["RANK"]))
    return torch.randn(MICRO, width, generator=generator).to(torch.bfloat16)


def _gradient_elements(engine):
    """Elements of the gradient tensors this rank holds: .grad (and grad_accum) of the module's parameters, the
    optimizer's averaged_gradients and its accumulated partition (all_grad_tensors), each element once."""
    import torch

    tensors = []
    for param in engine.module.parameters():
        tensors += [param.grad, getattr(param, "grad_accum", None)]
    optimizer = engine.optimizer
    for held in (getattr(optimizer, "averaged_gradients", None) or {},
                 getattr(optimizer, "all_grad_tensors", None) or {}):
        for value in held.values():
            tensors += [value] if torch.is_tensor(value) else list(value or [])
    tensors.append(getattr(optimizer, "grads_in_partition", None))
    return _elements([t for t in tensors if torch.is_tensor(t)])


def _elements(tensors):
    """Elements covered by the tensors' memory, each once (a tensor's bytes over its element size, by dtype)."""
    from zerolab.run.measure import union_bytes

    by_size = {}
    for tensor in tensors:
        by_size.setdefault(tensor.element_size(), []).append(tensor)
    return sum(union_bytes(group) // size for size, group in by_size.items())


def _saved_activation_bytes(forward, params):
    """Bytes autograd saves for backward during forward() that are not parameters (nor views of one)."""
    import torch

    storages = {p.untyped_storage().data_ptr() for p in params if p.numel() > 0}
    saved = []

    def pack(tensor):
        is_param = isinstance(tensor, torch.nn.Parameter) or tensor.untyped_storage().data_ptr() in storages
        saved.append(0 if is_param else tensor.numel() * tensor.element_size())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = forward()
    return out, sum(saved)


def _watch_all_gathers(phase, gathered):
    """Count the elements every all-gather of deepspeed.comm brings in, under the current phase's name."""
    import deepspeed.comm as dist

    for name in ("allgather_fn", "all_gather_into_tensor", "all_gather"):
        original = getattr(dist, name)

        def counted(output, *args, _original=original, **kwargs):
            numel = sum(t.numel() for t in output) if isinstance(output, (list, tuple)) else output.numel()
            gathered[phase[0]] = gathered.get(phase[0], 0) + numel
            return _original(output, *args, **kwargs)

        setattr(dist, name, counted)


def zero_on_two_ranks(job, namespace):
    import torch

    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    result = {"params": LAYERS * WIDTH * WIDTH, "wide_params": LAYERS * WIDE * WIDE, "gradients": {},
              "activations": {}, "gathers": {}}
    for stage in (1, 2):
        engine = _engine(_net(WIDTH), stage, accumulation=2)
        held = []
        for micro in range(4):
            engine.backward(engine(_batch(WIDTH, micro)).float().pow(2).mean())
            held.append(_gradient_elements(engine))
            engine.step()
        result["gradients"][stage] = held
    for stage in (1, 2, 3):
        engine, plain = _engine(_net(WIDTH), stage), _net(WIDTH).to(torch.bfloat16)
        x = _batch(WIDTH, 0)
        out, zero_bytes = _saved_activation_bytes(lambda: engine(x), list(engine.module.parameters()))
        engine.backward(out.float().pow(2).mean())
        engine.step()
        _, plain_bytes = _saved_activation_bytes(lambda: plain(x), list(plain.parameters()))
        result["activations"][stage] = {"zero": zero_bytes, "plain": plain_bytes}
    phase, gathered = ["none"], {}
    _watch_all_gathers(phase, gathered)
    for label, zero in (("defaults", {}),
                        ("live 0 reuse 0", {"stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0})):
        engine, steps = _engine(_net(WIDE), 3, **zero), []
        for step in range(3):
            gathered.clear()
            phase[0] = "forward"
            out = engine(_batch(WIDE, step))
            phase[0] = "backward"
            engine.backward(out.float().pow(2).mean())
            phase[0] = "step"
            engine.step()
            steps.append({"forward": gathered.get("forward", 0), "backward": gathered.get("backward", 0)})
        result["gathers"][label] = steps
    return result
