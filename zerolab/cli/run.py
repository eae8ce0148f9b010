"""zerolab run: train a tiny GPT with real DeepSpeed ZeRO on N ranks and compare what each rank holds to the prediction."""
import json
import sys

from zerolab.cli.arguments import positive_float, positive_int
from zerolab.errors import UserError

HELP = "train a tiny GPT with real DeepSpeed ZeRO on N ranks; measured bytes next to the prediction"
DESCRIPTION = """\
Predict, then measure. zerolab starts N rank processes itself (no deepspeed launcher needed), trains a
tiny GPT (synthetic tokens, no downloads) with deepspeed.initialize under your ds_config, and reads from
the engine's own tensors what each rank holds:

  parameters           the 16-bit (or fp32) weights: whole below stage 3, this rank's partition at stage 3
  gradients            16-bit gradients held after backward: whole at stage 0, a partition from stage 1 on
  fp32 gradients       the fp32 gradient partition the optimizer consumes (resident under offload)
  fp32 master weights  the optimizer's fp32 copy: whole at stage 0, a partition from stage 1 on
  Adam states (m, v)   exp_avg and exp_avg_sq: 8 bytes per parameter, partitioned from stage 1 on (with
                       --optimizer muon, Muon's momentum in the training dtype for the matrices it steps too)

Next to each figure: zerolab.engine.memory.estimate's prediction for the same stage, offload, precision and
world size, the difference, and a note where the two differ by design. Peak memory is the whole process
(resident memory on CPU, torch.cuda.max_memory_allocated on a GPU).

CPU ranks use gloo and bf16 by default (DeepSpeed's CPU accelerator; fp16 needs oneDNN fp16 kernels);
GPU ranks use NCCL and fp16. Offloading the optimizer makes DeepSpeed compile its CPU Adam op on first use
(1-3 minutes on 2 cores, then cached in the virtual environment's own torch_extensions folder, or
~/.cache/torch_extensions outside one; $TORCH_EXTENSIONS_DIR overrides both); the
progress lines say so.

examples:
  zerolab run --stage 2 --ranks 2 --steps 5
  zerolab run --stage 3 --offload-optimizer cpu --offload-param cpu --json
  zerolab run --config ds_config.json --ranks 2
  zerolab run --stage 2 --offload-optimizer cpu --device cuda --ranks 1
  zerolab run --stage 1 --master bf16 --moments bf16       bf16 master weights and Adam states on the device
  zerolab run --stage 2 --optimizer muon                    Muon's momentum, rank by rank"""


def add_arguments(parser):
    parser.add_argument("--config", metavar="FILE", help="a ds_config JSON file (instead of --stage/--offload-*)")
    parser.add_argument("--stage", type=int, choices=(0, 1, 2, 3), help="ZeRO stage (default 2)")
    parser.add_argument("--offload-optimizer", choices=("none", "cpu"), help="where optimizer states live")
    parser.add_argument("--offload-param", choices=("none", "cpu"), help="where parameters live (stage 3 only)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"),
                        help="default: bf16 on CPU ranks, fp16 on a GPU")
    parser.add_argument("--master", choices=("fp32", "bf16"),
                        help="master weights and gradients (bf16: DeepSpeed 0.18.3+'s bf16_master_weights_and_grads)")
    parser.add_argument("--moments", choices=("fp32", "bf16"),
                        help="Adam's moments (bf16: bf16_optimizer_states, which needs --master bf16)")
    parser.add_argument("--optimizer", choices=("adamw", "muon"),
                        help="adamw (default) or muon: DeepSpeed's Muon for the matrices, Adam for the rest (stages "
                             "1-3, no offload)")
    parser.add_argument("--ranks", type=positive_int("--ranks"), default=2, help="number of rank processes (default 2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu ranks (gloo) or GPUs (NCCL)")
    parser.add_argument("--steps", type=positive_int("--steps"), default=5, help="training steps (default 5)")
    parser.add_argument("--timeout", type=positive_float("--timeout"), default=600, help="stop every rank after this many seconds")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def run(args):
    from zerolab.run import RunFailed, run as run_ranks

    knobs = {"stage": args.stage, "offload_optimizer": args.offload_optimizer, "offload_param": args.offload_param,
             "precision": args.precision, "master": args.master, "moments": args.moments, "optimizer": args.optimizer}
    given = {name: value for name, value in knobs.items() if value is not None}
    if args.config and given:
        raise UserError(f"--config and --{next(iter(given)).replace('_', '-')} do not mix: put it in the config file")
    if given.get("offload_param", "none") != "none" and given.get("stage") != 3:
        raise UserError("--offload-param needs --stage 3: below it DeepSpeed ignores parameter offload")
    if given.get("offload_optimizer", "none") != "none" and given.get("stage", 2) == 0:
        raise UserError("--offload-optimizer needs --stage 1, 2 or 3: stage 0 has no ZeRO optimizer")
    config = _load(args.config) if args.config else None
    if config is None:
        given.setdefault("stage", 2)
        if "master" in given or "moments" in given:
            _refuse_what_initialize_refuses(given, args.device)
    try:
        result = run_ranks(config, ranks=args.ranks, device=args.device, steps=args.steps, timeout=args.timeout,
                           **({} if config is not None else given))
    except RunFailed as failure:  # the run itself failed (not the input): one line, status 1
        print(f"zerolab: run failed: {failure}", file=sys.stderr)
        return 1
    print(json.dumps(result.as_json(), indent=2) if args.json else result.table())
    return 0


def _refuse_what_initialize_refuses(given, device):
    """--master/--moments: the combinations DeepSpeed refuses, said before any rank starts (zerolab check's rules)."""
    from zerolab.config import check_config
    from zerolab.run.configs import default_precision, make_config

    if given.get("moments") == "bf16" and given.get("master") != "bf16":
        raise UserError("--moments bf16 needs --master bf16: DeepSpeed keeps bf16 optimizer states only with bf16 "
                        "master weights (bf16_optimizer_states requires bf16_master_weights_and_grads)")
    if given.get("master") == "bf16" and given.get("precision", default_precision(device)) != "bf16":
        raise UserError("--master bf16 needs --precision bf16: the bf16 block carries bf16_master_weights_and_grads")
    if given.get("master") == "bf16" and given["stage"] == 0:
        raise UserError("--master bf16 needs --stage 1, 2 or 3: DeepSpeed refuses bf16 master weights at stage 0")
    errors = check_config(make_config(**given)).errors
    if errors:
        raise UserError(f"{errors[0].path}: {errors[0].message}")


def _load(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except OSError as error:
        raise UserError(f"cannot read --config {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UserError(f"--config {path} is not valid JSON: {error.msg} at line {error.lineno}") from None
