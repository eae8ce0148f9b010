"""`zerolab diff`: two ds_configs, the fields that differ and what memory and traffic become."""
import json

from zerolab.cli.explain import add_model_arguments

HELP = "compare two ds_configs: changed fields and their effect on memory and traffic"
DESCRIPTION = """\
Lists every field that differs between config A and config B ("<unset>" where one of them lacks it), then
the effect of each for the same model and cluster side by side: ZeRO stage, offload, GPU memory per GPU,
host memory and NVMe per node, per-rank traffic per optimizer step and PCIe copies. Use it to predict
what a change buys before you run it, e.g. stage 2 -> 3, or adding CPU optimizer offload.

examples:
  zerolab diff zero2.json zero3.json --params 7B --gpus-per-node 8
  zerolab diff before.json after.json --params 13B --gpus-per-node 8 --nodes 2 --json
"""


def add_arguments(parser):
    parser.add_argument("config_a", metavar="A", help="path to the first ds_config")
    parser.add_argument("config_b", metavar="B", help="path to the second ds_config")
    add_model_arguments(parser)


def run(args):
    from zerolab.config import compare_configs, load_config
    from zerolab.config.text import comparison_lines

    a, b = load_config(args.config_a), load_config(args.config_b)
    comparison = compare_configs(a, b, args.params, args.gpus_per_node, args.nodes, accounting=args.accounting)
    if args.json:
        print(json.dumps(comparison.as_dict(), indent=2, default=str))
    else:
        print(f"A = {args.config_a}, B = {args.config_b}")
        print("\n".join(comparison_lines(comparison)))
    return 0
