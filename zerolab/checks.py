"""Helpers for the hidden tests of graded cells: compare plain values only.

An answer goes through a JSON round trip after an exact-type check, so what the test compares is a fresh
int, float, str, bool, None, list or dict built by the json module. An object with a rigged ``__eq__``,
a subclass of int, a numpy scalar or NaN fails with a message that says what to return instead.
"""
import json

PLAIN_TYPES = (bool, int, float, str, type(None), list, tuple, dict)


def plain(value, name="your answer"):
    """``value`` as fresh plain Python data; AssertionError (with what to return instead) when it is not plain."""
    _check_plain(value, name)
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except ValueError:
        raise AssertionError(f"{name} contains NaN or infinity; return a finite number") from None


def exact_type(value, expected, name="your answer"):
    """AssertionError unless type(value) is exactly ``expected`` (a type or a tuple of types); subclasses fail."""
    allowed = expected if isinstance(expected, tuple) else (expected,)
    if type(value) not in allowed:
        wanted = " or ".join(t.__name__ for t in allowed)
        raise AssertionError(f"{name} should be a plain {wanted}, got {type(value).__name__}: {value!r:.80}")
    return value


def _check_plain(value, name):
    kind = type(value)
    if kind not in PLAIN_TYPES:
        raise AssertionError(f"{name} should be plain Python data (int, float, str, bool, None, list, dict), "
                             f"got {kind.__module__}.{kind.__qualname__}; convert it, e.g. int(x) or float(x)")
    if kind in (list, tuple):
        for index, item in enumerate(value):
            _check_plain(item, f"{name}[{index}]")
    elif kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise AssertionError(f"{name} should have str keys, got key {key!r} of type {type(key).__name__}")
            _check_plain(item, f"{name}[{key!r}]")
