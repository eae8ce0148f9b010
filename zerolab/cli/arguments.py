"""Argument types shared by the subcommands: each turns bad input into one UserError line naming the flag."""
from zerolab.errors import UserError
from zerolab.engine.units import parse_count


def positive_int(flag):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise UserError(f"{flag}: {text!r} is not a whole number") from None
        if value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
        return value
    return parse


def positive_float(flag):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise UserError(f"{flag}: {text!r} is not a number") from None
        if not value > 0:
            raise UserError(f"{flag} must be > 0, got {text}")
        return value
    return parse


def params_count(text):
    """--params: 13B, 350M, 7.5e9 or a plain integer."""
    try:
        return parse_count(text)
    except ValueError as error:
        raise UserError(f"--params: {error}") from None
