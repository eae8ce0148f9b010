"""`zerolab fit`: which ZeRO stage, offload and recomputation make a model fit, with what micro-batch, how fast."""
import json
import sys

from zerolab.sizing import budget, fit as fitting, gpus, step_time
from zerolab.engine import models
from zerolab.engine.activations import ATTENTION
from zerolab.cli.arguments import params_count, positive_float, positive_int
from zerolab.engine.comm import bandwidth
from zerolab.errors import UserError
from zerolab.sizing.hf_models import HF_CONFIGS, load_hf_config
from zerolab.engine.units import format_count, parse_bytes

MODEL_NAMES = list(models.PRESETS) + [name for name in HF_CONFIGS if name not in models.PRESETS]
HELP = "will my model fit, and which way trains fastest? every stage, offload and recomputation, ranked by speed"
DESCRIPTION = f"""\
Will a model train on these GPUs, and which way is fastest? For every ZeRO stage x offload x activation
recomputation (none, selective, full) zerolab adds up the whole per-GPU budget at its two peaks, the backward pass
and the optimizer step (the fp32 gradients DeepSpeed makes inside step(), when activations are gone), one line each:
  model_states           what DeepSpeed 0.19.8 keeps at that moment (zerolab.engine.zero_terms; at ZeRO-3 with the
                         parameters gathered under stage3_max_live_parameters, 1e9 elements by default)
  communication_buckets  the gradient reduce bucket (500M elements): two at ZeRO-1/2 with overlap_comm, one at
                         ZeRO-3
  activations            whose code runs the model (--implementation): Hugging Face's Llama code (hf, the default
                         for Llama-family models; within 0.01% of a full-size simulation, docs/fit_ledger.md)
                         or Korthikanti et al. 2022's Megatron accounting (megatron, the GPT-3 shapes' default)
  cuda_context           an allowance of {budget.CUDA_CONTEXT_BYTES / 2**30:g} GiB for the CUDA context, cuBLAS and NCCL
  fragmentation          an allowance of {budget.FRAGMENTATION:.0%} of the lines above for the caching allocator
and finds the largest micro-batch that leaves --headroom of the GPU free. Each setup that fits gets a time per
step (zerolab.sizing.step_time): compute 6 x params x tokens (8 x with full recomputation) at --mfu of the GPU's dense
bf16 peak, DeepSpeed's real collective volumes over NVLink inside a node and --inter-node-bandwidth across nodes,
PCIe copies for offload, and CPU Adam at the throughput `--measure-host` measured (else a stated default); the
assumptions are printed under the table. Rows are ranked by tokens per second. "host/node" is the runtime host
memory per node (offloaded buffers; pinned ones rounded up to a power of two by torch's caching host allocator,
DeepSpeed's default pin path, unless DS_PIN_MEMORY_BACKEND=native); DeepSpeed's own estimate, a model-loading
peak, is shown apart. Sizes: 80GB = 80 x 10^9 bytes; write 80GiB for 80 x 2^30.

GPUs (--gpu, memory and speeds from the vendors' data sheets): {", ".join(gpus.PRESETS)}.
Models (--model): {", ".join(MODEL_NAMES)}.
--config reads a Hugging Face config.json (Llama, Mistral, GPT-2 fields). Without either, --params builds a
GPT-3-shaped decoder of that size; --layers, --hidden, --heads and --vocab override its shape.
--simulate runs row 1's training step of the real Hugging Face model under PyTorch's FakeTensorMode (no memory
allocated, no GPU; about a minute for 13B on 2 cores, then cached) and prints its activation peak next to the
formula's.

Recomputation is set in the training code, not in the ds_config (Hugging Face:
model.gradient_checkpointing_enable(), whole layers only; Megatron: --recompute-granularity selective|full).

examples:
  zerolab fit --model llama2-13b --seq-len 4096 --gpu h100-80gb --gpus-per-node 8
  zerolab fit --config path/to/config.json --seq-len 4096 --gpu h100-80gb --gpus-per-node 8 --simulate
  zerolab fit --model llama3-70b --seq-len 8192 --gpu h200 --gpus-per-node 8 --nodes 4 --inter-node-bandwidth 400Gbps
  zerolab fit --model llama2-7b --seq-len 4096 --gpu 4090 --gpus-per-node 2 --host-memory 128GB
  zerolab fit --model llama2-13b --seq-len 4096 --gpu a100-80gb --gpu-memory 79GiB --gpus-per-node 8 --headroom 0.1
  zerolab fit --params 13B --layers 40 --hidden 5120 --seq-len 2048 --gpu-memory 40GB --gpus-per-node 8
  zerolab fit --measure-host        time DeepSpeed's CPU Adam on this machine; later fits use the figure
  zerolab fit --model llama2-7b --seq-len 4096 --gpu h100-80gb --gpus-per-node 8 --master both
                                    bf16 master weights and moments as rows of their own, ranked with the rest
  zerolab fit --model llama2-7b --seq-len 4096 --gpu h100-80gb --gpus-per-node 8 --optimizer both
                                    DeepSpeed's Muon beside AdamW: 2 bytes of momentum for the matrices instead of 8,
                                    and Newton-Schulz's FLOPs in every step
  zerolab fit --model llama2-7b --seq-len 4096 --gpu h100-80gb --gpus-per-node 8 --emit-config 1 > ds_config.json
  zerolab check ds_config.json --world-size 8        the emitted config passes DeepSpeed's own validation
"""


def add_arguments(parser):
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", metavar="NAME", help="a preset: " + ", ".join(MODEL_NAMES))
    which.add_argument("--params", type=params_count, metavar="N", help="parameter count: 13B, 350M, 7.5e9")
    which.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (or its folder)")
    for flag, what in (("--layers", "decoder layers"), ("--hidden", "hidden size"), ("--heads", "attention heads"),
                       ("--vocab", "vocabulary size")):
        parser.add_argument(flag, type=positive_int(flag), metavar="N", help=f"{what} (with --params)")
    parser.add_argument("--seq-len", type=positive_int("--seq-len"), default=2048, metavar="S",
                        help="tokens per sequence (default 2048)")
    parser.add_argument("--gpu", metavar="NAME", help="a GPU preset (memory and speeds): " + ", ".join(gpus.PRESETS))
    parser.add_argument("--gpu-memory", type=_size("--gpu-memory"), metavar="SIZE",
                        help="memory of one GPU: 80GB, 24GB, 80GiB (overrides --gpu's)")
    parser.add_argument("--gpus-per-node", type=positive_int("--gpus-per-node"), default=1, metavar="G",
                        help="GPUs per node (default 1)")
    parser.add_argument("--nodes", type=positive_int("--nodes"), default=1, metavar="M", help="nodes (default 1)")
    parser.add_argument("--inter-node-bandwidth", type=_rate, default=step_time.INTER_NODE_BYTES_PER_S,
                        metavar="RATE", help="per GPU, each direction, between nodes: 50GB/s, 400Gbps, ib-ndr "
                        "(default 50 GB/s: one 400 Gb/s port per GPU)")
    parser.add_argument("--host-memory", type=_size("--host-memory"), metavar="SIZE",
                        help="host RAM per node, e.g. 1TB; without it host memory is reported, not limited")
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16",
                        help="training precision (default bf16)")
    parser.add_argument("--master", choices=("fp32", "bf16", "both"), default="fp32",
                        help="master weights and Adam moments: fp32 (default), bf16 (DeepSpeed's "
                             "bf16_master_weights_and_grads with bf16_optimizer_states: stages 1-3 without offload, "
                             "1-2 with CPU optimizer offload), or both, ranked together")
    parser.add_argument("--optimizer", choices=("adamw", "muon", "both"), default="adamw",
                        help="adamw (default), muon (DeepSpeed's Muon for the 2-D matrices, Adam for the rest; "
                             "stages 1-2 without offload, with its Newton-Schulz FLOPs in each step), or both, ranked "
                             "together")
    parser.add_argument("--attention", choices=ATTENTION[:2], default="flash",
                        help="flash: a fused kernel that keeps no s x s scores (default); standard: explicit softmax")
    parser.add_argument("--mfu", type=_fraction("--mfu", low_open=True), default=step_time.MFU, metavar="F",
                        help=f"model FLOPs utilisation the compute time assumes (default {step_time.MFU})")
    parser.add_argument("--headroom", type=_fraction("--headroom"), default=fitting.HEADROOM, metavar="F",
                        help=f"fraction of GPU memory left free; rows that cannot leave it are marked ! "
                        f"(default {fitting.HEADROOM})")
    parser.add_argument("--cpu-adam-throughput", type=positive_float("--cpu-adam-throughput"), metavar="P",
                        help="parameters per second CPU Adam steps on one node (default: --measure-host's figure)")
    parser.add_argument("--measure-host", action="store_true",
                        help="time DeepSpeed's CPU Adam on this machine and store params/s for later fits")
    parser.add_argument("--implementation", choices=("hf", "megatron"),
                        help="whose activations: hf (Hugging Face's code; default for Llama-family models) or megatron "
                             "(Korthikanti et al.; default otherwise, and the only one with selective recomputation)")
    parser.add_argument("--simulate", action="store_true",
                        help="also simulate row 1's step of the real Hugging Face model (FakeTensorMode) and compare")
    parser.add_argument("--json", action="store_true", help="print the rows (fitting and not) as JSON")
    parser.add_argument("--emit-config", type=positive_int("--emit-config"), metavar="N",
                        help="print the ds_config of fitting row N (as numbered in the table)")


def run(args):
    if args.measure_host:
        _measure_host()  # stored in the cache, where the fit below reads it (unless --cpu-adam-throughput)
        if args.model is None and args.params is None:
            return 0
    if args.model is None and args.params is None and args.config is None:
        raise UserError("one of --model, --config or --params is needed (or --measure-host alone)")
    if args.gpu_memory is None and args.gpu is None:
        raise UserError("--gpu or --gpu-memory is needed: the memory of one GPU")
    model, hf_source = _model(args)
    if args.simulate and hf_source is None:
        raise UserError("--simulate needs a Hugging Face model: --config config.json, or a --model preset with a "
                        f"released config ({', '.join(HF_CONFIGS)})")
    if args.master != "fp32" and args.precision != "bf16":
        raise UserError(f"--master {args.master} needs --precision bf16: DeepSpeed keeps bf16 master weights only in "
                        "bf16 training (its bf16 block)")
    if args.optimizer != "adamw" and args.precision == "fp16":
        raise UserError(f"--optimizer {args.optimizer} needs --precision bf16 or fp32: Muon is modelled in the setups "
                        "measured on CPU ranks, which train in bf16 or fp32")
    implementation = args.implementation or fitting.implementation_for(model)
    if implementation == "hf" and fitting.implementation_for(model) != "hf":
        raise UserError(f"--implementation hf: {model.name} is not a Llama-family model (SwiGLU, RMSNorm, no biases); "
                        "use --implementation megatron")
    try:
        result = fitting.fit(model, args.seq_len, args.gpu_memory, args.gpus_per_node, args.nodes, args.host_memory,
                             args.precision, args.attention, gpu=args.gpu, mfu=args.mfu,
                             inter_node=args.inter_node_bandwidth, cpu_adam_params_per_s=args.cpu_adam_throughput,
                             headroom=args.headroom, implementation=implementation,
                             masters=("fp32", "bf16") if args.master == "both" else (args.master,),
                             optimizers=("adamw", "muon") if args.optimizer == "both" else (args.optimizer,))
    except ValueError as error:
        raise UserError(f"--gpu: {error}" if "GPU" in str(error) else str(error)) from None
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
        print(json.dumps({"model": model.as_dict(), "seq_len": args.seq_len, "gpu_memory": result.gpu_memory,
                          "gpu": result.gpu.as_dict(), "host_memory": args.host_memory,
                          "gpus_per_node": args.gpus_per_node, "nodes": args.nodes, "precision": args.precision,
                          "attention": args.attention, "implementation": implementation, "master": args.master,
                          "optimizer": args.optimizer,
                          "assumptions": result.assumptions,
                          "rows": [o.as_dict() for o in result.rows],
                          "rejected": [o.as_dict() for o in result.rejected]}, indent=2))
    else:
        print(table(result))
    if args.simulate:
        print("\n" + simulated(result, hf_source), file=sys.stderr if args.json else sys.stdout)
    return 0


def simulated(result, source):
    """Row 1's activation peak simulated on the real Hugging Face model, next to the formulas."""
    from zerolab.engine.activations import HF_ATTENTION, activation_memory
    from zerolab.sizing.simulate import simulate

    if not result.rows:
        raise UserError("--simulate compares row 1, and nothing fits")
    row = result.rows[0]
    recompute = "full" if row.recompute == "full" else "none"
    attention = HF_ATTENTION[result.attention]
    sim = simulate(source, result.seq_len, row.micro_batch, attention, recompute, result.precision)
    where = "from the cache" if sim.cached else f"in {sim.seconds:.0f} s"
    lines = [f"Simulated (FakeTensorMode, {where}): row 1's step, micro-batch {row.micro_batch}, {attention}, "
             f"recompute {recompute}: activation peak {_gb(sim.activation_peak_bytes)} ({sim.activation_peak_phase})"]
    for name in ("hf", "megatron"):
        try:
            counted = activation_memory(result.model, result.seq_len, row.micro_batch, result.precision,
                                        result.attention, recompute, implementation=name).total_bytes
        except ValueError:
            continue
        error = counted / sim.activation_peak_bytes - 1
        lines.append(f"  formula {name:<8} {_gb(counted):>9}  {error:+.1%}"
                     + ("  (the table's)" if name == result.implementation else ""))
    return "\n".join(lines)


WHOSE = {"hf": "Hugging Face's code keeps them (--implementation hf)",
         "megatron": "Korthikanti et al. count them (--implementation megatron)"}


def table(result):
    m = result.model
    lines = [f"{m.name}: {format_count(m.params())} parameters ({m.layers} layers, hidden {m.hidden}, {m.heads} "
             f"heads, MLP {m.ffn}, vocab {m.vocab}), sequence {result.seq_len}, {result.precision}, "
             f"{result.attention} attention, activations as {WHOSE[result.implementation]}",
             f"{result.nodes} node(s) x {result.gpus_per_node} GPU(s) of {_gb(result.gpu_memory)}, host memory "
             + (f"{_gb(result.host_memory)} per node" if result.host_memory else "not limited")
             + "  (1 GB = 10^9 bytes)", ""]
    masters = result.masters != ("fp32",)  # a column for the master weights' dtype
    optimizers = result.optimizers != ("adamw",)  # and one for the optimizer
    if result.rows:
        lines.append(f"{'#':>3}  {'stage':>5}  {'offload opt/param':<17}  " + (f"{'master':<6}  " if masters else "")
                     + (f"{'optimizer':<9}  " if optimizers else "")
                     + f"{'recompute':<9}  {'micro':>5}  {'GPU peak':>10}  {'host/node':>9}  {'time/step':>9}  "
                     f"{'tokens/s':>9}")
        for number, o in enumerate(result.rows, 1):
            mark = "!" if o.tight else " "
            lines.append(f"{number:>3}  {o.stage:>5}  {o.offload_optimizer + '/' + o.offload_param:<17}  "
                         + (f"{o.master:<6}  " if masters else "") + (f"{o.optimizer:<9}  " if optimizers else "")
                         + f"{o.recompute:<9}  {o.micro_batch:>5}  {_gb(o.budget.gpu_bytes):>9}{mark}  "
                         f"{_gb(o.budget.host_bytes):>9}  {_seconds(o.time.total_s):>9}  "
                         f"{o.time.tokens_per_s * result.world_size:>9,.0f}")
        lines += [""] + why_first(result) + [""] + row_budget(result.rows[0])
    else:
        lines.append("Nothing fits: more GPUs, a shorter sequence, or a larger GPU (the reasons are below).")
    lines += ["", "Assumptions:"] + assumptions(result)
    if result.rejected:
        lines += ["", "Does not fit:"]
        for o in result.rejected:
            lines.append(f"  stage {o.stage} {o.offload_optimizer}/{o.offload_param}"
                         + (f", {o.master} master" if masters else "") + (f", {o.optimizer}" if optimizers else "")
                         + f", recompute {o.recompute}: {o.reason}")
    lines.append("`--emit-config N` prints row N's ds_config.")
    return "\n".join(lines)


PARTS = (("compute", "compute_s"), ("communication and PCIe copies the GPU waits for", "exposed_s"),
         ("CPU Adam", "cpu_adam_s"), ("NVMe swaps", "nvme_s"), ("Muon's Newton-Schulz", "optimizer_s"))


def why_first(result):
    """Row 1's time per step by part, and for the best row of every other stage/offload, what costs it most."""
    best = result.rows[0]
    lines = [f"Why row 1: {_seconds(best.time.total_s)} per step of {best.time.tokens:,} tokens per GPU: "
             + ", ".join(f"{name} {_seconds(getattr(best.time, field))}" for name, field in PARTS
                         if getattr(best.time, field) or field == "compute_s")]
    if best.tight:
        roomy = next((n for n, o in enumerate(result.rows, 1) if not o.tight), None)
        lines.append(f"  row 1 leaves less than the {result.assumptions['headroom']:.0%} headroom free (!)"
                     + (f"; the fastest row that leaves it is row {roomy}" if roomy else ""))
    seen = {(best.stage, best.offload_optimizer, best.offload_param, best.master, best.optimizer)}
    for number, o in enumerate(result.rows[1:], 2):
        kind = (o.stage, o.offload_optimizer, o.offload_param, o.master, o.optimizer)
        if kind in seen:
            continue
        seen.add(kind)
        per_token = {name: getattr(o.time, field) / o.time.tokens - getattr(best.time, field) / best.time.tokens
                     for name, field in PARTS}
        name, extra = max(per_token.items(), key=lambda item: item[1])
        cause = {"compute": "more compute per token" + (f" ({o.recompute} recomputation)" if o.recompute == "full"
                                                        else ""),
                 "communication and PCIe copies the GPU waits for": "communication and PCIe copies that nothing hides",
                 "CPU Adam": f"CPU Adam, {_seconds(o.time.cpu_adam_s)} per step that nothing overlaps",
                 "NVMe swaps": f"NVMe swaps, {_seconds(o.time.nvme_s)} per step",
                 "Muon's Newton-Schulz": f"Muon's Newton-Schulz, {_seconds(o.time.optimizer_s)} per step"}[name]
        lines.append(f"  vs row {number} (stage {o.stage} {o.offload_optimizer}/{o.offload_param}"
                     + (f", {o.master} master" if result.masters != ("fp32",) else "")
                     + (f", {o.optimizer}" if result.optimizers != ("adamw",) else "") + ", recompute "
                     f"{o.recompute}, micro {o.micro_batch}): {o.time.tokens_per_s / best.time.tokens_per_s:.0%} "
                     f"of row 1's speed, mostly {cause}")
    return lines


def row_budget(o):
    lines = [f"Row 1 per GPU at micro-batch {o.micro_batch}, the larger peak ({o.budget.peak}) counts:"]
    for peak in budget.PEAKS:
        lines.append(f"  {peak + ' peak:':<15}" + ", ".join(f"{name} {_gb(nbytes)}"
                                                         for name, nbytes in getattr(o.budget, peak).items() if nbytes))
    host = ", ".join(f"{name} {_gb(nbytes)}" for name, nbytes in o.budget.host.items()) or "nothing offloaded"
    lines.append(f"  host/node:     runtime {_gb(o.budget.host_bytes)} ({host}); DeepSpeed's model-loading estimate "
                 f"(estimate_zero2/3_model_states_mem_needs) {_gb(o.budget.host_loading_bytes)}, a load-time peak")
    return lines


def assumptions(result):
    a, gpu = result.assumptions, result.gpu
    link = f"NVLink {gpu.nvlink / 1e9:g} GB/s" if gpu.nvlink else f"PCIe {gpu.pcie / 1e9:g} GB/s (no NVLink)"
    lines = [f"  speeds of {a['speeds_of']}: {gpu.bf16_flops / 1e12:g} TFLOP/s dense bf16, {link} per direction, "
             f"PCIe {gpu.pcie / 1e9:g} GB/s to the host ({gpu.source})",
             f"  compute: 6 x params x tokens FLOPs (8 x with full recomputation) at MFU {a['mfu']:.0%}",
             "  collectives: DeepSpeed 0.19.8's volumes, ring, at the link rate"
             + ("" if result.nodes == 1 else f"; across nodes {a['inter_node_bytes_per_s'] / 1e9:g} GB/s per GPU"),
             "  overlapped: gradient reduction and copies to the host behind backward, ZeRO-3 gathers behind "
             "forward and backward (prefetch); not: the ZeRO-1/2 parameter all-gather, copies back after CPU Adam, "
             "CPU Adam, NVMe",
             f"  CPU Adam: {a['cpu_adam_params_per_s'] / 1e9:.3g}e9 params/s per node ({a['cpu_adam_source']}; "
             "`zerolab fit --measure-host` measures this machine)",
             f"  one micro-step per optimizer step; '!' marks a row within the {a['headroom']:.0%} headroom; "
             "tokens/s is for all GPUs together"]
    if "bf16" in result.masters:
        lines.append(BF16_MASTER_TRADE_OFF)
    if "muon" in result.optimizers:
        lines.append(muon_trade_off(result))
    return lines


def muon_trade_off(result):
    """One line: what Muon saves and what it costs, for this model and GPU count (the fit's assumptions)."""
    from zerolab.engine import muon

    matrices, flops = (result.assumptions[key] for key in ("muon_matrix_params", "muon_newton_schulz_flops_per_gpu"))
    momentum = muon.ELEMENT[result.precision]
    return (f"  muon: DeepSpeed's Muon keeps one {result.precision} momentum ({momentum} bytes) for the "
            f"{format_count(matrices)} parameters of the 2-D matrices instead of Adam's two fp32 moments (8 bytes), "
            f"each matrix whole on every GPU whose partition it touches; the price is compute: the busiest GPU "
            f"orthogonalizes its matrices with Newton-Schulz, {flops / 1e12:.3g} TFLOP per step (DeepSpeed's Gram "
            f"iteration, 5 steps), at the MFU above. Muon rows are stages 1-2 without offload (at stage 3 Muon "
            f"changes the collectives, not timed yet); not counted: a straddling matrix's whole gradient on both "
            f"ranks and Newton-Schulz's temporaries")


# DeepSpeed's own figures: its blog on the 0.18.3 core API update (blogs/core_api_update in the DeepSpeed repository).
BF16_MASTER_TRADE_OFF = (  # claim: bf16-master-and-moments-make-k-6 # claim: bf16-master-step-makes-no-fp32-gradient
    "  bf16 master: master weights and Adam moments in bf16 take 6 bytes a parameter instead of 12, and no fp32 "
    "gradient is made in step(); the price is precision: in DeepSpeed's own measurement (0.18.3 release blog) peak "
    "memory fell from 31.38 to 18.93 GB and the final loss rose from 3.09 to 3.12. With offload, bf16 rows are "
    "stages 1-2 with the optimizer in CPU memory (host buffers halve; CPU Adam's speed on bf16 masters is taken as "
    "fp32's, not measured); on a tie in speed the fp32 row ranks first")


def _measure_host():
    from zerolab.sizing import host_speed

    print("zerolab: timing DeepSpeed's CPU Adam on this machine (it compiles the op first if it is not cached)...",
          file=sys.stderr)
    measured = host_speed.measure_cpu_adam()
    path = host_speed.save(measured)
    print(f"CPU Adam: {measured['params_per_s'] / 1e9:.3g}e9 params/s ({measured['params']:,} parameters, "
          f"{measured['seconds']:.3f} s a step, {measured['threads']} threads; the op loaded in "
          f"{measured['op_load_s']:.1f} s); stored in {path}")


def _model(args):
    """(the Decoder, the Hugging Face source to simulate or None)."""
    shape = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "vocab": args.vocab}
    flag = "--model" if args.model is not None else "--config" if args.config is not None else "--params"
    try:
        if args.params is None and any(value is not None for value in shape.values()):
            raise UserError("--layers, --hidden, --heads and --vocab go with --params; a --model preset or a --config "
                            "has its own shape")
        if args.config is not None:
            name, config = load_hf_config(args.config)
            return models.from_hf_config(config, name), args.config
        if args.model is not None:
            key = args.model.strip().lower()
            if key in models.PRESETS:
                return models.preset(key), key if key in HF_CONFIGS else None
            if key in HF_CONFIGS:
                return models.from_hf_config(HF_CONFIGS[key], key), key
            raise ValueError(f"unknown model {args.model!r}: use one of {', '.join(MODEL_NAMES)}")
        return models.from_params(args.params, **shape), None
    except ValueError as error:
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


def _seconds(value):
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.0f} ms"


def _rate(text):
    try:
        return bandwidth(text)
    except ValueError as error:
        raise UserError(f"--inter-node-bandwidth: {error}") from None


def _fraction(flag, low_open=False):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise UserError(f"{flag}: {text!r} is not a number") from None
        if not (0 < value <= 1 if low_open else 0 <= value < 1):
            raise UserError(f"{flag} must be in {'(0, 1]' if low_open else '[0, 1)'}, got {text}")
        return value
    return parse
