"""`zerolab check`: would DeepSpeed 0.19.8 accept this ds_config, and what does it silently ignore?"""
import json

from zerolab.cli.arguments import positive_int

HELP = "would DeepSpeed accept this ds_config? what would it silently ignore?"
DESCRIPTION = """\
Validates a ds_config with DeepSpeed 0.19.8's own config classes (DeepSpeedConfig and its ZeRO, offload,
fp16 and bf16 models) for a data-parallel world size, then looks for what DeepSpeed lets through silently:
  - unknown top-level keys (a typo like "zero_optimisation" leaves ZeRO off without a word);
  - offload_param or stage3_* settings below stage 3 (ignored), NVMe offload below stage 3 (it is CPU
    offload there), nvme without nvme_path;
  - "auto" values outside the Hugging Face Trainer / Accelerate (dropped or kept as a string);
  - batch fields that do not multiply out for the world size, including DeepSpeed's floor-division trap;
  - fp16 and bf16 both on, features removed from DeepSpeed (amp, mics_*, ...).
Notes point at defaults worth knowing (pin_memory is true in 0.19.8; overlap_comm depends on the stage).

Exit status: 0 DeepSpeed would accept it (warnings allowed), 1 it has errors, 2 the file cannot be read.

examples:
  zerolab check ds_config.json                      as DeepSpeed sees it on one GPU
  zerolab check ds_config.json --world-size 8       train_batch_size must equal micro x accumulation x 8
  zerolab check ds_config.json --json               {"valid": ..., "errors": [...], "warnings": [...]}
"""


def add_arguments(parser):
    parser.add_argument("config", metavar="CONFIG", help="path to a ds_config JSON file")
    parser.add_argument("--world-size", type=positive_int("--world-size"), default=1, metavar="N",
                        help="data-parallel GPUs in total (nodes x GPUs per node; default 1)")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")


def run(args):
    from zerolab.config import check_config
    from zerolab.config.text import findings_lines, verdict

    report = check_config(args.config, world_size=args.world_size)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        for line in findings_lines(report):
            print(line)
        print(verdict(report))
    return 0 if report.valid else 1
