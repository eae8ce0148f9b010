"""The `zerolab` command line: the parser and entry point (main) and one module per subcommand.

A command module has HELP, DESCRIPTION, add_arguments(parser) and run(args), and imports torch or deepspeed inside
run() only.

May import: any zerolab package (the CLI is the top of the house).
"""
