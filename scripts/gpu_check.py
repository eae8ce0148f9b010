"""Maintainer check on a GPU machine: one real ZeRO-2 run with CPU optimizer offload and fp16 on 1 GPU.

    python scripts/gpu_check.py [--layers 8 --width 1024 --steps 4]

It trains a GPT-shaped model (sized to fit a 16 GB T4 with room to spare) through zerolab.run on one GPU,
then prints the GPU memory DeepSpeed really allocated next to zerolab.memory's prediction of the model
states on the GPU (ZeRO-2 + offload keeps only the fp16 parameters there: 2 bytes per parameter), and the bytes
the traffic meter saw cross between GPU and host each direction next to zerolab.deepspeed_traffic's model.
Where there is no CUDA it says so and exits 0.
"""
import argparse
import sys

from zerolab.memory import estimate
from zerolab.run import ModelSpec, RunFailed, make_config, run
from zerolab.units import format_bytes

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
              f"predicted {predicted[key]:,} B (zerolab.deepspeed_traffic, DeepSpeed 0.19.8)")
        traffic_ok = traffic_ok and measured[key] == predicted[key]
    ok = (abs(after_init - rows[0][1]) <= 0.05 * rows[0][1] + REDUCE_BUCKET * 2 * 2 and result.loss[-1] < result.loss[0]
          and traffic_ok)
    print("gpu_check: OK" if ok else "gpu_check: CHECK BY HAND (numbers above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
