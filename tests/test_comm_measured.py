"""comm.traffic(bucket_allreduce=True) against the collectives a real DeepSpeed ZeRO-1/2 run calls on 2 CPU ranks.

Every deepspeed.comm collective is wrapped to record how many elements it moves; one optimizer step of two
micro-steps is recorded on rank 0. Scalars (the gradient norm, the overflow flag) are left out.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from zerolab.engine.comm import traffic
from zerolab.run.launch import free_port
from zerolab.base.interpreter import env_with_interpreter_bin

GAS = 2
PROBE = textwrap.dedent("""
    import json, os, sys
    import torch, deepspeed
    import deepspeed.comm as dist
    from zerolab.run.op_cache import skip_shm_comm_op
    skip_shm_comm_op()  # as the course's runs: else the first probe of a fresh clone compiles it for a minute
    calls = []
    for name in ("all_reduce", "reduce_scatter_fn", "allgather_fn", "all_gather_into_tensor", "reduce", "broadcast"):
        original = getattr(dist, name)
        def record(tensor, *args, _name=name, _original=original, **kwargs):
            calls.append((_name, tensor.numel()))
            return _original(tensor, *args, **kwargs)
        setattr(dist, name, record)
    stage, gas = int(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": stage}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    calls.clear()
    for _ in range(gas):
        loss = engine(torch.randn(2, 64, dtype=torch.bfloat16)).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
    if os.environ["RANK"] == "0":
        print("CALLS", sum(p.numel() for p in model.parameters()), json.dumps(calls))
""")


def record_one_step(stage):
    port = str(free_port())
    ranks = []
    for rank in (0, 1):
        env = {**env_with_interpreter_bin(), "DS_ACCELERATOR": "cpu", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
               "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
        ranks.append(subprocess.Popen([sys.executable, "-c", PROBE, str(stage), str(GAS)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        outputs = [rank.communicate(timeout=300)[0] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    line = [row for row in outputs[0].splitlines() if row.startswith("CALLS")]
    assert line, outputs[0][-3000:]
    _, params, calls = line[0].split(" ", 2)
    return int(params), json.loads(calls)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2])
def test_deepspeed_all_reduces_gradient_buckets_in_zero_1_and_2(stage):
    params, calls = record_one_step(stage)
    moved = {}
    for name, elements in calls:
        if elements > 1:
            moved[name] = moved.get(name, 0) + elements
    predicted = traffic(params, stage, 2, grad_accum=GAS, bucket_allreduce=True).collectives
    expected = {"all_reduce": sum(c.elements * c.times for c in predicted if c.op == "all-reduce"),
                "all_gather_into_tensor": sum(c.elements * c.times for c in predicted if c.op == "all-gather")}
    assert moved == expected
