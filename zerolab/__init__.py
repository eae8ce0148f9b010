"""ZeRO Lab: the engine under the course. Importing it loads no torch and no deepspeed."""
__version__ = "0.1.0"
