"""`zerolab estimate`: model-state memory per GPU and per node, for one setup or every stage and offload."""
import argparse
import json

from zerolab.engine import memory
from zerolab.cli.arguments import params_count, positive_float, positive_int
from zerolab.errors import UserError
from zerolab.engine.units import GB, GiB, format_bytes, format_count

HELP = "model-state memory per GPU and per node, for every ZeRO stage and offload"
DESCRIPTION = """\
How much memory do the model states (parameters, gradients, fp32 master weights, Adam moments) need on
each GPU and on each node's host, for a ZeRO stage, offload and GPU count? Activations, communication
buckets and the CUDA context come on top.

Two accountings:
  paper      the ZeRO paper's (2 + 2 + K) x params with K = 12: 16 bytes per parameter before partitioning.
             Figures in GB (10^9 bytes), as in the paper.
  deepspeed  exactly what DeepSpeed's estimate_zero2/zero3_model_states_mem_needs return: it also counts
             partitioned fp32 gradients (18 bytes instead of 16), the largest layer gathered under ZeRO-3,
             the fp32 model load on the host and a 1.5x host buffer. Figures in GiB (2^30 bytes), which
             DeepSpeed prints as "GB".

Without --stage, every valid stage and offload combination is printed, so you can see what each step buys.

DeepSpeed 0.18.3 and later can keep the master weights (--master bf16: bf16.bf16_master_weights_and_grads) and
Adam's moments (--moments bf16: bf16.bf16_optimizer_states) in bf16: 12 bytes of optimizer state per parameter
become 6 (paper accounting, --precision bf16, stages 1-3; checked against real runs on CPU ranks). DeepSpeed then
needs the optimizer offloaded to its CPU Adam unless both are bf16 (`zerolab check` says so).

DeepSpeed's Muon (--optimizer muon, 0.18.9 and later) keeps one momentum, in the training dtype, for the
--muon-params parameters it steps (the 2-D matrices whose names hold neither "embed" nor "lm_head") and Adam's two
fp32 moments for the rest: 14 bytes of optimizer state per parameter become 6 in bf16 (paper accounting, stages 1-3,
no offload; checked against real runs on CPU ranks). At stages 1-2 a matrix that straddles two ranks' partitions
keeps its whole momentum on both, up to one matrix more per rank, which only the shapes tell
(zerolab.engine.muon.rank_bytes). Stage 3 needs zero_optimization.reduce_scatter false (`zerolab check` says so).

examples:
  zerolab estimate --params 13B --gpus-per-node 8
  zerolab estimate --params 7.5e9 --gpus-per-node 64 --stage 3                  the paper's 1.9 GB row
  zerolab estimate --params 13B --gpus-per-node 8 --stage 2 --offload-optimizer cpu --accounting deepspeed
  zerolab estimate --params 70B --gpus-per-node 8 --nodes 4 --stage 3 --offload-param cpu --offload-optimizer cpu --json
  zerolab estimate --params 13B --gpus-per-node 8 --precision bf16 --master bf16 --moments bf16
  zerolab estimate --params 7B --gpus-per-node 8 --precision bf16 --optimizer muon --muon-params 6.5B
"""


def add_arguments(parser):
    parser.add_argument("--params", required=True, type=params_count, metavar="N",
                        help="parameter count: 13B, 350M, 7.5e9 or a plain integer")
    parser.add_argument("--gpus-per-node", type=positive_int("--gpus-per-node"), default=1, metavar="G", help="GPUs per node (default 1)")
    parser.add_argument("--nodes", type=positive_int("--nodes"), default=1, metavar="M", help="nodes (default 1)")
    parser.add_argument("--stage", type=int, choices=memory.STAGES,
                        help="ZeRO stage 0-3; without it every stage and offload is listed")
    parser.add_argument("--offload-optimizer", choices=memory.DEVICES, default="none",
                        help="where the optimizer states live: none (GPU), cpu, nvme (stage 3 only)")
    parser.add_argument("--offload-param", choices=memory.DEVICES, default="none",
                        help="where the 16-bit parameters live between uses: stage 3 only")
    parser.add_argument("--precision", choices=memory.PRECISIONS, default="fp16",
                        help="fp16 or bf16 mixed precision (2-byte params) or fp32 training (default fp16)")
    parser.add_argument("--master", choices=tuple(memory.MASTER_BYTES), default="fp32",
                        help="dtype of the master weights (and of the gradients the optimizer reads): bf16 is "
                             "DeepSpeed's bf16_master_weights_and_grads (needs --precision bf16; default fp32)")
    parser.add_argument("--moments", choices=tuple(memory.MOMENT_BYTES), default="fp32",
                        help="dtype of Adam's two moments: bf16 is DeepSpeed's bf16_optimizer_states (needs "
                             "--master bf16; default fp32)")
    parser.add_argument("--optimizer", choices=memory.OPTIMIZERS, default="adamw",
                        help="adamw (default) or muon: DeepSpeed's Muon for --muon-params parameters, Adam for the "
                             "rest (paper accounting, stages 1-3, no offload)")
    parser.add_argument("--muon-params", type=params_count, metavar="N",
                        help="with --optimizer muon: the parameters of the 2-D matrices Muon steps (all but the "
                             "embeddings, the output head, the norms and the biases)")
    parser.add_argument("--accounting", choices=memory.ACCOUNTINGS, default="paper",
                        help="paper (ZeRO paper, GB) or deepspeed (DeepSpeed's estimator, GiB); default paper")
    parser.add_argument("--largest-layer-params", type=params_count, metavar="N",
                        help="parameters of the largest layer (deepspeed accounting, stage 3); default: a "
                             "GPT-style embedding of 50257 tokens x the hidden size the model would have")
    parser.add_argument("--zero-init", action=argparse.BooleanOptionalAction, default=True,
                        help="model built under deepspeed.zero.Init, so no full fp32 copy per process on the "
                             "host (deepspeed accounting, stage 3; default on)")
    parser.add_argument("--buffer-factor", type=positive_float("--buffer-factor"), default=memory.DEFAULT_BUFFER_FACTOR, metavar="F",
                        help="DeepSpeed's additional_buffer_factor on host memory (default 1.5)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of rows instead of a table")


def run(args):
    options = dict(precision=args.precision, accounting=args.accounting,
                   largest_layer_params=args.largest_layer_params, zero_init=args.zero_init,
                   buffer_factor=args.buffer_factor, master=args.master, moments=args.moments,
                   optimizer=args.optimizer, muon_params=args.muon_params)
    if args.optimizer == "muon" and args.muon_params is None:
        raise UserError("--optimizer muon needs --muon-params N: how many of the parameters Muon steps (the 2-D "
                        "matrices; DeepSpeed gives the embeddings, the output head, the norms and the biases to Adam)")
    if args.optimizer == "adamw" and args.muon_params is not None:
        raise UserError("--muon-params goes with --optimizer muon")
    try:
        if args.stage is None:
            if args.offload_optimizer != "none" or args.offload_param != "none":
                raise UserError("--offload-optimizer and --offload-param need --stage; "
                                "without --stage every combination is listed")
            rows = memory.estimate_all(args.params, args.gpus_per_node, args.nodes, **options)
        else:
            rows = [memory.estimate(args.params, args.stage, args.gpus_per_node, args.nodes,
                                    offload_optimizer=args.offload_optimizer, offload_param=args.offload_param,
                                    **options)]
    except ValueError as error:
        raise UserError(str(error)) from None
    if args.json:
        print(json.dumps([row.as_dict() for row in rows], indent=2))
    else:
        print(table(rows))
    return 0


def table(rows):
    """A plain-text table of estimates: one line per stage and offload combination."""
    first = rows[0]
    unit = "GB" if first.accounting == "paper" else "GiB"
    size = GB if unit == "GB" else GiB
    lines = [
        f"{format_count(first.params)} parameters, {first.precision}, {first.nodes} node(s) x "
        f"{first.gpus_per_node} GPU(s), {first.accounting} accounting (1 {unit} = {size:,} bytes)"
        + (f"; {first.master} master weights, {first.moments} Adam moments" if first.master != "fp32" else "")
        + (f"; Muon for {format_count(first.muon_params)} of them, Adam for the rest" if first.optimizer == "muon"
           else ""),
        "",
        f"{'stage':>5}  {'offload_optimizer':<17}  {'offload_param':<13}  {'per GPU':>12}  {'host/node':>12}  "
        f"{'NVMe/node':>12}",
    ]
    for row in rows:
        nvme = format_bytes(row.nvme_bytes, unit) if row.nvme_bytes else "-"
        lines.append(f"{row.stage:>5}  {row.offload_optimizer:<17}  {row.offload_param:<13}  "
                     f"{format_bytes(row.gpu_bytes, unit):>12}  {format_bytes(row.cpu_bytes, unit):>12}  {nvme:>12}")
    lines += ["", "Model states only: activations, communication buckets and the CUDA context come on top."]
    if first.accounting == "paper":
        lines.append("Host figures of the paper accounting count only what is offloaded there.")
    return "\n".join(lines)
