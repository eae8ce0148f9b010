"""`zerolab ckpt inspect DIR` and `zerolab ckpt consolidate DIR OUT`: DeepSpeed checkpoints, read and merged."""
import json

from zerolab.errors import UserError

HELP = "inspect a DeepSpeed checkpoint folder, or consolidate it into one state dict"
DESCRIPTION = """\
inspect DIR      what a checkpoint folder holds, read from the files' headers (no tensor is loaded, so a 70B
                 checkpoint takes seconds): tag, ZeRO stage, data-parallel world size, dtypes, bytes per rank,
                 universal or not, complete or not, and the exact command that consolidates or converts it.
                 A missing rank file, a truncated file or a `latest` naming no folder: one line, exit 2.
consolidate DIR OUT
                 one state dict from a ZeRO stage 1-3 checkpoint, written into folder OUT by DeepSpeed's own
                 zero_to_fp32 (fp32, or --dtype bf16/fp16; --safetensors for model.safetensors).
The checkpoint folder is never written to.

examples:
  zerolab ckpt inspect checkpoints/
  zerolab ckpt inspect checkpoints/global_step1000 --json
  zerolab ckpt consolidate checkpoints/ hf_model/ --dtype bf16 --safetensors
"""


def add_arguments(parser):
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    inspect = actions.add_parser("inspect", help="what a checkpoint folder holds")
    inspect.add_argument("folder", metavar="DIR", help="the save_dir given to save_checkpoint, or one tag folder")
    inspect.add_argument("--tag", help="the tag folder to read (default: the one `latest` names)")
    inspect.add_argument("--json", action="store_true", help="print the description as JSON")
    merge = actions.add_parser("consolidate", help="one state dict from a ZeRO checkpoint (DeepSpeed's zero_to_fp32)")
    merge.add_argument("folder", metavar="DIR", help="the save_dir given to save_checkpoint")
    merge.add_argument("output", metavar="OUT", help="folder to write pytorch_model.bin (or model.safetensors) into")
    merge.add_argument("--tag", help="the tag folder to read (default: the one `latest` names)")
    merge.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"), help="output dtype (fp32)")
    merge.add_argument("--safetensors", action="store_true", help="write model.safetensors instead of a pickle")
    merge.add_argument("--max-shard-size", default="5GB", help="split the output into shards of this size (5GB)")


def run(args):
    if args.action == "inspect":
        from zerolab.ckpt.inspect import inspect_checkpoint

        checkpoint = inspect_checkpoint(args.folder, args.tag)
        print(json.dumps(checkpoint.as_dict(), indent=2) if args.json else "\n".join(checkpoint.lines()))
        return 0
    if args.action == "consolidate":
        from zerolab.ckpt.consolidate import consolidate

        consolidate(args.folder, args.output, dtype=args.dtype, safetensors=args.safetensors, tag=args.tag,
                    max_shard_size=args.max_shard_size)
        return 0
    raise UserError("say what to do: zerolab ckpt inspect DIR, or zerolab ckpt consolidate DIR OUT")
