"""ZeRO Lab: the engine under the course. Importing it loads no torch and no deepspeed.

It does set one thing: DeepSpeed's JIT ops are cached per virtual environment (zerolab.tools.own_extensions_root),
so two checkouts on one machine never rebuild or lock each other's."""
from zerolab.tools import keep_ops_per_environment

__version__ = "0.1.0"
keep_ops_per_environment()
