"""Maintainer check on a GPU machine: one real ZeRO-2 run with CPU optimizer offload and fp16 on 1 GPU.

    python scripts/gpu_check.py [--layers 8 --width 1024 --steps 4]

It trains a GPT-shaped model (sized to fit a 16 GB T4 with room to spare) through zerolab.run on one GPU,
then prints the GPU memory DeepSpeed really allocated next to zerolab.engine.memory's prediction of the model
states on the GPU (ZeRO-2 + offload keeps only the fp16 parameters there: 2 bytes per parameter), and the bytes
the traffic meter saw cross between GPU and host each direction next to zerolab.engine.deepspeed_traffic's model.
Before that it measures the activation peak of a stack of the paper's GPT blocks (zerolab.run.blocks, bf16,
explicit attention with dropout): torch.cuda.max_memory_allocated during the forward pass, minus what was
allocated before it, next to zerolab.engine.activations (on CUDA, dropout keeps 1-byte masks, as the paper counts).
Where there is no CUDA it says so and exits 0.
"""
import argparse
import sys

from zerolab.engine.memory import estimate
from zerolab.run import ModelSpec, RunFailed, make_config, run
from zerolab.engine.units import format_bytes

REDUCE_BUCKET = 50_000_000  # elements; DeepSpeed's 5e8 default would hold 1 GB of fp16 bucket on a small card


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); nothing to check.")
        return 0
    print(f"gpu_check: {torch.cuda.get_device_name(0)}, "
          f"{format_bytes(torch.cuda.get_device_properties(0).total_memory, 'GiB')}")
    activation_ok = activation_peak(torch, layers=4, hidden=1024, heads=16, seq_len=1024, micro_batch=4)
    spec = ModelSpec(layers=args.layers, width=args.width, heads=max(1, args.width // 64), vocab=args.vocab,
                     seq_len=args.seq_len)
    config = make_config(stage=2, offload_optimizer="cpu", precision="fp16", micro_batch=args.micro_batch)
    config["zero_optimization"].update(reduce_bucket_size=REDUCE_BUCKET, allgather_bucket_size=REDUCE_BUCKET)
    try:
        result = run(config, ranks=1, device="cuda", steps=args.steps, model=spec, timeout=540)
    except RunFailed as failure:
        print(f"gpu_check: FAILED: {failure}")
        return 1

    params, rank = result.setup["params"], result.ranks[0]
    rows = []
    for accounting in ("paper", "deepspeed"):
        predicted = estimate(params, 2, offload_optimizer="cpu", precision="fp16", accounting=accounting)
        rows.append((f"model states on the GPU, {accounting} accounting", predicted.gpu_bytes))
    after_init, peak = rank["memory_after_initialize_bytes"], rank["peak_memory_bytes"]
    print(result.table())
    print()
    print(f"{params:,} parameters; ZeRO-2, offload_optimizer=cpu, fp16, 1 GPU, micro batch {args.micro_batch}, "
          f"sequence {args.seq_len}")
    for label, predicted in rows:
        print(f"  predicted {label}: {format_bytes(predicted, 'GB')}")
    print(f"  measured torch.cuda.memory_allocated() after deepspeed.initialize: {format_bytes(after_init, 'GB')} "
          f"({100 * (after_init - rows[0][1]) / rows[0][1]:+.1f}% against the prediction)")
    print(f"  measured torch.cuda.max_memory_allocated() over the run: {format_bytes(peak, 'GB')} "
          f"(the rest is activations, the fp16 gradient buckets of {REDUCE_BUCKET:,} elements, and workspace)")
    print(f"  optimizer states {rank['optimizer_state_bytes']:,} B and master weights {rank['master_weight_bytes']:,} B "
          f"live on the host (predicted {result.predicted['optimizer_state_bytes']:,} B and "
          f"{result.predicted['master_weight_bytes']:,} B); loss {result.loss[0]:.3f} -> {result.loss[-1]:.3f}")
    measured, predicted = result.measured_traffic(0), result.predicted_traffic[0]
    traffic_ok = True
    for key in ("device_to_host_bytes", "host_to_device_bytes"):
        print(f"  {key} per optimizer step: measured {measured[key]:,} B (zerolab.run.meter, real PCIe copies), "
              f"predicted {predicted[key]:,} B (zerolab.engine.deepspeed_traffic, DeepSpeed 0.19.8)")
        traffic_ok = traffic_ok and measured[key] == predicted[key]
    ok = (abs(after_init - rows[0][1]) <= 0.05 * rows[0][1] + REDUCE_BUCKET * 2 * 2 and result.loss[-1] < result.loss[0]
          and traffic_ok and activation_ok)
    print("gpu_check: OK" if ok else "gpu_check: CHECK BY HAND (numbers above)")
    return 0 if ok else 1


def activation_peak(torch, layers, hidden, heads, seq_len, micro_batch):
    """Forward peak of a block stack on the GPU against the paper's and the CPU-measured (real_block) accountings."""
    from zerolab.engine.activations import activation_memory
    from zerolab.engine.models import Decoder
    from zerolab.run.blocks import GPTBlock

    model = Decoder("check", layers, hidden, heads, 4 * hidden, 1000)
    blocks = torch.nn.ModuleList(GPTBlock(model, "standard") for _ in range(layers)).to("cuda", torch.bfloat16)
    x = torch.randn(micro_batch, seq_len, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device="cuda"), diagonal=1)
    blocks[0](x, mask).float().sum().backward()  # warm-up: cuBLAS workspace and kernels allocated before measuring
    x.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = x
    for block in blocks:
        y = block(y, mask)
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - before - y.numel() * y.element_size()
    peak = torch.cuda.max_memory_allocated() - before
    y.float().sum().backward()
    print(f"activations of {layers} GPT blocks (h={hidden}, a={heads}, s={seq_len}, b={micro_batch}, bf16, dropout):")
    for accounting in ("paper", "real_block"):
        predicted = activation_memory(model, seq_len, micro_batch, "bf16", "standard", "none", accounting).blocks_bytes
        print(f"  predicted, {accounting:10} accounting: {format_bytes(predicted, 'GB')} "
              f"(measured / predicted = {kept / predicted:.3f})")
    print(f"  measured kept after forward (memory_allocated): {format_bytes(kept, 'GB')}; "
          f"forward peak (max_memory_allocated): {format_bytes(peak, 'GB')}")
    paper = activation_memory(model, seq_len, micro_batch, "bf16", "standard", "none", "paper").blocks_bytes
    return abs(kept - paper) <= 0.1 * paper


if __name__ == "__main__":
    sys.exit(main())
