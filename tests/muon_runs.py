"""Rank side of tests/test_muon_measured.py (job kind "muon_runs:states"): DeepSpeed 0.19.8's Muon trains a small
model on each rank at several ZeRO stages and precisions; each rank reports, per case, the shapes it trained and the
bytes of its master weights, of Muon's momentum and of Adam's moments, read from DeepSpeed's own tensors."""
import os

SHAPES_NOTE = "three matrices of different shapes (Muon sorts them, and on 2 ranks one straddles the partitions)"


def build():
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 96), torch.nn.ReLU(),
                              torch.nn.Linear(96, 64))
    return net  # deepspeed.initialize tags the matrices use_muon itself; the biases go to Muon's Adam half


def states(job, namespace):
    import deepspeed
    import torch

    from zerolab.run.measure import master_tensors, inner_optimizer, union_bytes, parameter_tensors
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    # DeepSpeed's Muon runs Newton-Schulz through torch.compile: a fresh venv compiles it on CPU for over a minute.
    # Eager, the same optimizer allocates the same state tensors, which is all this run reads.
    torch._dynamo.config.disable = True
    rank, found = int(os.environ["RANK"]), []
    for stage, precision in job["cases"]:
        net = build()
        zero = {"stage": stage, **({"reduce_scatter": False} if stage == 3 else {})}
        config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                  "optimizer": {"type": "Muon", "params": {"lr": 1e-3, "torch_adam": True}}, "zero_optimization": zero,
                  **({"bf16": {"enabled": True}} if precision == "bf16" else {})}
        engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        generator = torch.Generator().manual_seed(rank)
        for _ in range(2 * 2):  # two optimizer steps of two micro-steps
            inputs = torch.randn(2, 64, generator=generator).to(dtype)
            engine.backward(engine(inputs).float().pow(2).mean())
            engine.step()
        state = [(key, value) for entry in inner_optimizer(engine).state.values() for key, value in entry.items()
                 if torch.is_tensor(value)]
        found.append({"stage": stage, "precision": precision, "optimizer": type(inner_optimizer(engine)).__name__,
                      "shapes": [list(p.shape) for p in net.parameters()],
                      "use_muon": [p.use_muon for p in net.parameters()],
                      "master_weights": union_bytes(master_tensors(engine), exclude=parameter_tensors(engine)),
                      "momentum": union_bytes([v for k, v in state if k == "momentum_buffer"]),
                      "momentum_dtypes": sorted({str(v.dtype) for k, v in state if k == "momentum_buffer"}),
                      "adam_moments": union_bytes([v for k, v in state if k in ("exp_avg", "exp_avg_sq")]),
                      "other_state": sorted({k for k, _ in state} - {"momentum_buffer", "exp_avg", "exp_avg_sq",
                                                                       "step"})})
    return found
