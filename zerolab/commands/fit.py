"""`zerolab fit`: which ZeRO stage, offload and recomputation make a model fit, and with what micro-batch."""
import json
import sys

from zerolab import budget, fit as fitting, models
from zerolab.activations import ATTENTION
from zerolab.commands.arguments import params_count, positive_int
from zerolab.errors import UserError
from zerolab.units import format_count, parse_bytes

HELP = "will my model fit? every stage, offload and recomputation, with the largest micro-batch"
DESCRIPTION = f"""\
Will a model train on these GPUs, and how? For every ZeRO stage x offload x activation recomputation (none,
selective, full) zerolab adds up the whole per-GPU budget, one line each:
  model_states           DeepSpeed 0.19.8's estimator accounting (zerolab estimate --accounting deepspeed)
  communication_buckets  the gradient reduce bucket, two with overlap_comm (500M elements each by default)
  activations            Korthikanti et al. 2022's accounting for the model's shape, sequence and micro-batch
  cuda_context           an allowance of {budget.CUDA_CONTEXT_BYTES / 2**30:g} GiB for the CUDA context, cuBLAS and NCCL
  fragmentation          an allowance of {budget.FRAGMENTATION:.0%} of the lines above for the caching allocator
and finds the largest micro-batch that fits. The rows that fit are ranked: least traffic per step first (the
ZeRO paper's volumes, ring collectives), then least offload traffic, then least recomputation. Each row that
does not fit says which line overflows. Sizes: 80GB = 80 x 10^9 bytes; write 80GiB for 80 x 2^30.

Presets (--model): {", ".join(models.PRESETS)}.
Without a preset, --params builds a GPT-3-shaped decoder of that size; --layers, --hidden, --heads and
--vocab override its shape.

Recomputation is set in the training code, not in the ds_config (Hugging Face:
model.gradient_checkpointing_enable(); Megatron: --recompute-granularity selective|full).

examples:
  zerolab fit --model llama2-13b --seq-len 4096 --gpu-memory 80GB --gpus-per-node 8
  zerolab fit --model llama3-70b --seq-len 8192 --gpu-memory 80GB --gpus-per-node 8 --nodes 4 --host-memory 1TB
  zerolab fit --params 13B --layers 40 --hidden 5120 --seq-len 2048 --gpu-memory 40GB --gpus-per-node 8
  zerolab fit --model gpt3-1.3b --seq-len 2048 --gpu-memory 24GB --json
  zerolab fit --model llama2-7b --seq-len 4096 --gpu-memory 80GB --gpus-per-node 8 --emit-config 1 > ds_config.json
  zerolab check ds_config.json --world-size 8        the emitted config passes DeepSpeed's own validation
"""


def add_arguments(parser):
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", metavar="NAME", help="a preset: " + ", ".join(models.PRESETS))
    which.add_argument("--params", type=params_count, metavar="N", help="parameter count: 13B, 350M, 7.5e9")
    for flag, what in (("--layers", "decoder layers"), ("--hidden", "hidden size"), ("--heads", "attention heads"),
                       ("--vocab", "vocabulary size")):
        parser.add_argument(flag, type=positive_int(flag), metavar="N", help=f"{what} (with --params)")
    parser.add_argument("--seq-len", type=positive_int("--seq-len"), default=2048, metavar="S",
                        help="tokens per sequence (default 2048)")
    parser.add_argument("--gpu-memory", type=_size("--gpu-memory"), required=True, metavar="SIZE",
                        help="memory of one GPU: 80GB, 24GB, 80GiB")
    parser.add_argument("--gpus-per-node", type=positive_int("--gpus-per-node"), default=1, metavar="G",
                        help="GPUs per node (default 1)")
    parser.add_argument("--nodes", type=positive_int("--nodes"), default=1, metavar="M", help="nodes (default 1)")
    parser.add_argument("--host-memory", type=_size("--host-memory"), metavar="SIZE",
                        help="host RAM per node, e.g. 1TB; without it host memory is reported, not limited")
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16",
                        help="training precision (default bf16)")
    parser.add_argument("--attention", choices=ATTENTION[:2], default="flash",
                        help="flash: a fused kernel that keeps no s x s scores (default); standard: explicit softmax")
    parser.add_argument("--json", action="store_true", help="print the rows (fitting and not) as JSON")
    parser.add_argument("--emit-config", type=positive_int("--emit-config"), metavar="N",
                        help="print the ds_config of fitting row N (as numbered in the table)")


def run(args):
    model = _model(args)
    result = fitting.fit(model, args.seq_len, args.gpu_memory, args.gpus_per_node, args.nodes, args.host_memory,
                         args.precision, args.attention)
    if args.emit_config is not None:
        if args.emit_config > len(result.rows):
            raise UserError(f"--emit-config {args.emit_config}: there are {len(result.rows)} fitting rows"
                            + ("" if result.rows else "; nothing fits, so there is no config to emit"))
        option = result.rows[args.emit_config - 1]
        print(json.dumps(fitting.ds_config(option, result.world_size, args.precision), indent=2))
        if option.recompute != "none":
            print(f"zerolab: row {args.emit_config} needs {option.recompute} activation recomputation, which is "
                  "set in the training code, not in the ds_config", file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps({"model": model.as_dict(), "seq_len": args.seq_len, "gpu_memory": args.gpu_memory,
                          "host_memory": args.host_memory, "gpus_per_node": args.gpus_per_node,
                          "nodes": args.nodes, "precision": args.precision, "attention": args.attention,
                          "rows": [o.as_dict() for o in result.rows],
                          "rejected": [o.as_dict() for o in result.rejected]}, indent=2))
    else:
        print(table(result))
    return 0


def table(result):
    m = result.model
    lines = [f"{m.name}: {format_count(m.params())} parameters ({m.layers} layers, hidden {m.hidden}, {m.heads} "
             f"heads, MLP {m.ffn}, vocab {m.vocab}), sequence {result.seq_len}, {result.precision}, "
             f"{result.attention} attention",
             f"{result.nodes} node(s) x {result.gpus_per_node} GPU(s) of {_gb(result.gpu_memory)}, host memory "
             + (f"{_gb(result.host_memory)} per node" if result.host_memory else "not limited") + "  (1 GB = 10^9 bytes)",
             ""]
    if result.rows:
        lines.append(f"{'#':>3}  {'stage':>5}  {'offload opt/param':<17}  {'recompute':<9}  {'micro':>5}  "
                     f"{'GPU used':>9}  {'host/node':>9}  {'wire/step':>9}  {'PCIe/step':>9}")
        for number, o in enumerate(result.rows, 1):
            lines.append(f"{number:>3}  {o.stage:>5}  {o.offload_optimizer + '/' + o.offload_param:<17}  "
                         f"{o.recompute:<9}  {o.micro_batch:>5}  {_gb(o.budget.gpu_bytes):>9}  "
                         f"{_gb(o.budget.host_bytes):>9}  {_gb(o.traffic.wire_bytes):>9}  {_gb(o.pcie_bytes):>9}")
        best = result.rows[0]
        lines += ["", f"Row 1's budget per GPU at micro-batch {best.micro_batch}: "
                  + ", ".join(f"{name} {_gb(nbytes)}" for name, nbytes in best.budget.gpu.items())]
    else:
        lines.append("Nothing fits: more GPUs, a shorter sequence, or a larger GPU (the reasons are below).")
    lines += ["", "wire/step: bytes each GPU sends per optimizer step (ZeRO paper volumes, ring collectives, "
              "1 micro-step); PCIe/step: offload copies per GPU (zerolab.comm)."]
    if result.rejected:
        lines += ["", "Does not fit:"]
        for o in result.rejected:
            lines.append(f"  stage {o.stage} {o.offload_optimizer}/{o.offload_param}, recompute {o.recompute}: "
                         f"{o.reason}")
    lines.append("`--emit-config N` prints row N's ds_config.")
    return "\n".join(lines)


def _model(args):
    shape = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "vocab": args.vocab}
    try:
        if args.model is not None:
            if any(value is not None for value in shape.values()):
                raise UserError("--layers, --hidden, --heads and --vocab go with --params; a --model preset has "
                                "its own shape")
            return models.preset(args.model)
        return models.from_params(args.params, **shape)
    except ValueError as error:
        flag = "--model" if args.model is not None else "--params"
        raise UserError(f"{flag}: {error}") from None


def _size(flag):
    def parse(text):
        try:
            return parse_bytes(text)
        except ValueError as error:
            raise UserError(f"{flag}: {error}") from None
    return parse


def _gb(nbytes):
    return f"{nbytes / 1e9:.1f} GB"
