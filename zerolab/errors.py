"""The one error type the CLI turns into a single clear line (exit status 2) instead of a traceback."""


class UserError(Exception):
    """Bad input from the person at the keyboard: a missing file, invalid JSON, a number like '13Q'."""
