"""The `zerolab` command line: each subcommand lives in zerolab/cli/<name>.py.

A command module has HELP (one line), DESCRIPTION (what it teaches, shown by --help), add_arguments(parser)
and run(args) -> exit status. Modules import heavy packages (torch, deepspeed) inside run() only.
"""
import argparse
import importlib
import os
import sys

from zerolab.errors import UserError
from zerolab.base.interpreter import env_with_interpreter_bin, skip_the_slow_iri_checker

COMMANDS = ("estimate", "fit", "check", "explain", "diff", "run", "grade", "ckpt")

EPILOG = """examples:
  zerolab estimate --params 13B --gpus-per-node 8            every stage and offload, as a table
  zerolab estimate --params 13B --gpus-per-node 8 --stage 2 --offload-optimizer cpu --accounting deepspeed
  zerolab fit --model llama2-13b --seq-len 4096 --gpu-memory 80GB --gpus-per-node 8   what fits, with what micro-batch
  zerolab check ds_config.json --world-size 8                would DeepSpeed accept it? what does it silently ignore?
  zerolab explain ds_config.json --params 7B --gpus-per-node 8
  zerolab diff a.json b.json --params 7B --gpus-per-node 8
  zerolab run --stage 2 --ranks 2 --steps 5                  train a tiny GPT for real on 2 CPU ranks
  zerolab ckpt inspect checkpoints/                          what a DeepSpeed checkpoint folder holds, per rank
  zerolab grade 04_writing_the_config                        grade every submission (instructors)
  zerolab grade 04_writing_the_config --shard 1/4           one shard of the class; then `zerolab grade merge`

`zerolab COMMAND --help` explains each command and its options."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UserError(f"{message} (see `{self.prog} --help`)")


def build_parser():
    parser = _Parser(prog="zerolab", description="ZeRO Lab: memory, traffic and config checks for DeepSpeed ZeRO.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"zerolab.cli.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"zerolab.cli.{name}":
                raise
            continue
        command = sub.add_parser(name, help=module.HELP, description=module.DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
        command.set_defaults(handler=module.run)
    return parser


def main(argv=None):
    # `.venv/bin/zerolab` without an activated venv: what we start, and what nbgrader (alembic) and DeepSpeed
    # (ninja) start by name, must still come from this interpreter's folder.
    os.environ["PATH"] = env_with_interpreter_bin()["PATH"]
    skip_the_slow_iri_checker()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "handler", None):
            parser.print_help()
            return 2
        return args.handler(args)
    except UserError as error:
        print(f"zerolab: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("zerolab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `zerolab estimate ... | head`: the reader left; nothing to report
        sys.stderr.close()
        return 0
