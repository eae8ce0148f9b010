"""ZeRO Lab: the engine under the course. Importing it loads no torch and no deepspeed.

The house, top to bottom (a package imports only those below it):
    cli                       the `zerolab` command and its subcommands
    grading                   `zerolab grade` over nbgrader, sandboxed; validation by mutants
    handmade, ckpt            lesson 08's graders on real ranks; checkpoints (lesson 09, `zerolab ckpt`)
    run, config               real DeepSpeed runs on CPU ranks; the config doctor
    lesson                    what the lessons' cells call: checks, source scans, plots, widgets
    sizing                    will it fit: budget, ranked setups, simulation, ledger
    engine                    bytes and traffic by formula: memory, comm, activations, models, units
    base                      messages in both editions, fonts, the interpreter's tools
The root holds only this face, the entry point (__main__) and errors.

It does set one thing: DeepSpeed's JIT ops are cached per virtual environment
(zerolab.base.interpreter.own_extensions_root), so two checkouts on one machine never rebuild or lock each other's."""
from zerolab.base.interpreter import keep_ops_per_environment

__version__ = "0.1.0"
keep_ops_per_environment()
