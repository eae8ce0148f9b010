"""One module per `zerolab` subcommand; see zerolab/cli.py for the protocol."""
