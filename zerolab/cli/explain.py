"""`zerolab explain`: every field of a ds_config in plain words, its findings, and what it costs."""
import json

from zerolab.cli.arguments import params_count, positive_int
from zerolab.errors import UserError

HELP = "explain every field of a ds_config and what it costs in memory and traffic"
DESCRIPTION = """\
For each field set in the config: what it does, DeepSpeed 0.19.8's default (read from DeepSpeed's own
config classes) and what the chosen value means. Then the findings of `zerolab check` for the world size
nodes x GPUs per node, and the effect of the config on a model of --params parameters:
GPU memory per GPU and host memory / NVMe per node (model states, DeepSpeed's estimator accounting by
default), and per-rank traffic per optimizer step (collective volume, bytes sent, PCIe copies of offload).

examples:
  zerolab explain ds_config.json --params 7B --gpus-per-node 8
  zerolab explain ds_config.json --params 13B --gpus-per-node 8 --nodes 2 --accounting paper
  zerolab explain ds_config.json --params 1.3B --gpus-per-node 1 --json
"""


def add_model_arguments(parser):
    parser.add_argument("--params", required=True, type=params_count, metavar="N",
                        help="parameter count of the model: 7B, 350M, 7.5e9 or a plain integer")
    parser.add_argument("--gpus-per-node", required=True, type=positive_int("--gpus-per-node"), metavar="G",
                        help="GPUs per node")
    parser.add_argument("--nodes", type=positive_int("--nodes"), default=1, metavar="M", help="nodes (default 1)")
    parser.add_argument("--accounting", choices=("deepspeed", "paper"), default="deepspeed",
                        help="memory accounting: deepspeed (its estimator, GiB; default) or paper (GB)")
    parser.add_argument("--json", action="store_true", help="print everything as JSON")


def add_arguments(parser):
    parser.add_argument("config", metavar="CONFIG", help="path to a ds_config JSON file")
    add_model_arguments(parser)


def run(args):
    from zerolab.config import check_config, config_effect, explain_config, load_config
    from zerolab.config import text

    config = load_config(args.config)
    world = args.gpus_per_node * args.nodes
    explanations = explain_config(config)
    report = check_config(config, world_size=world)
    effect, why_not = _effect(config, args)
    if args.json:
        print(json.dumps({
            "fields": [{"path": e.path, "value": e.value, "default": _jsonable(e.default), "text": e.text}
                       for e in explanations],
            "check": report.as_dict(),
            "notes": [f.as_dict() for f in report.findings if f.severity == "note"],
            "effect": effect.as_dict() if effect else None, "effect_error": why_not}, indent=2))
    else:
        print("fields:")
        print("\n".join(f"  {line}" for line in text.explanation_lines(explanations)))
        print("findings:")
        print("\n".join(f"  {line}" for line in text.findings_lines(report)) or "  (none)")
        print(f"  {text.verdict(report)}")
        print(f"effect for {args.params:,} parameters on {args.nodes} node(s) x {args.gpus_per_node} GPU(s):")
        print("\n".join(text.effect_lines(effect)) if effect else f"  not computed: {why_not}")
    return 0 if report.valid else 1


def _effect(config, args):
    from zerolab.config import config_effect
    try:
        return config_effect(config, args.params, args.gpus_per_node, args.nodes, accounting=args.accounting), None
    except UserError as error:
        return None, str(error)


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
