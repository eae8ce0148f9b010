"""comm.bucket_buffer_bytes against the buffers a real DeepSpeed ZeRO-2 optimizer allocates (one CPU rank)."""
import json
import subprocess
import sys
import textwrap

import pytest

from zerolab.engine.comm import bucket_buffer_bytes
from zerolab.base.interpreter import env_with_interpreter_bin

PROBE = textwrap.dedent("""
    import json, os, sys
    import torch, deepspeed
    from zerolab.run.launch import free_port
    from zerolab.run.op_cache import skip_shm_comm_op
    skip_shm_comm_op()  # as the course's runs: else the first probe of a fresh clone compiles it for a minute
    port = free_port()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    overlap, contiguous, bucket = json.loads(sys.argv[1])
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    config = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": 2, "overlap_comm": overlap, "contiguous_gradients": contiguous,
                                    "reduce_bucket_size": bucket}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config,
                                      dist_init_required=True)
    seen = []
    setup = engine.optimizer.setup_buckets

    def record_after_setup():  # the buffers live during backward and are released after it
        setup()
        seen.append([t.numel() * t.element_size() for b in engine.optimizer.ipg_buckets.values() for t in b.buffer])

    engine.optimizer.setup_buckets = record_after_setup
    loss = engine(torch.randn(2, 64, dtype=torch.bfloat16)).float().pow(2).mean()
    engine.backward(loss)
    print("BUCKETS", json.dumps(max(seen, key=sum)))
""")


@pytest.mark.slow
@pytest.mark.parametrize("overlap, contiguous", [(False, True), (True, True), (False, False)])
def test_bucket_buffers_match_what_deepspeed_allocates(overlap, contiguous):
    bucket = 3000
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps([overlap, contiguous, bucket])],
                            capture_output=True, text=True, timeout=300, env={**env_with_interpreter_bin(), "DS_ACCELERATOR": "cpu"})
    line = [row for row in result.stdout.splitlines() if row.startswith("BUCKETS")]
    assert line, result.stdout[-2000:] + result.stderr[-3000:]
    allocated = sum(json.loads(line[0].split(" ", 1)[1]))
    assert allocated == bucket_buffer_bytes(bucket, "bf16", overlap_comm=overlap, contiguous_gradients=contiguous)


def test_the_4_5x_claim_is_gone():
    """HF docs: overlap_comm 'uses 4.5x the allgather_bucket_size and reduce_bucket_size values ... 9GB'."""
    assert bucket_buffer_bytes(overlap_comm=True) == 2 * 500_000_000 * 2  # 2 GB at the 5e8 default, not 9 GB
