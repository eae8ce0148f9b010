"""Helpers for the hidden tests of graded cells: compare plain values only.

An answer goes through a JSON round trip after an exact-type check, so what the test compares is a fresh
int, float, str, bool, None, list or dict built by the json module. An object with a rigged ``__eq__``,
a subclass of int, a numpy scalar or NaN fails with a message that says what to return instead.
"""
import json

from zerolab.base.i18n import tr

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


# --- Feedback helpers: name the mistake class (type, unit, case, missing key) before the concept. ---------------
import math  # noqa: E402

BYTE_UNITS = {"bytes": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
TIME_UNITS = {"seconds": 1, "milliseconds": 1e-3, "microseconds": 1e-6, "minutes": 60, "hours": 3600}


def number(value, name="your answer", unit=""):
    """``value`` when it is a plain, finite int or float; AssertionError naming the wrong type otherwise."""
    kind = type(value)
    if kind in (int, float) and math.isfinite(value):
        return value
    wanted = tr(f"a number of {unit}") if unit else tr("a number")
    if kind is str:
        advice = tr("write the number itself, without quotes or a unit")
    elif kind in (int, float):
        advice = tr("return a finite number")
    elif kind is bool:
        advice = tr("True/False is not a number")
    else:
        advice = tr("convert it with float(...) or int(...)")
    raise AssertionError(f"wrong type: {name} should be a plain int or float ({wanted}), "
                         f"got {kind.__name__} {_short(value)}; {advice}")


def whole(value, name="your answer", what="a whole number"):
    """``value`` when it is a plain int; a float with a whole value gets 'wrong type ... int'."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        raise AssertionError(f"wrong type: {name} should be an int ({what}), got the float {value!r}; "
                             f"write it without the decimal point, or use // and int(...)")
    if type(value) is str:
        raise AssertionError(f"wrong type: {name} should be an int ({what}), got str {_short(value)}; "
                             "write the number itself, without quotes")
    raise AssertionError(f"wrong type: {name} should be an int ({what}), got {type(value).__name__} {_short(value)}")


def unit_slip(got, want, unit):
    """The byte or time unit ``got`` is written in when it is ``want`` (a value in ``unit``) in another unit; else
    None."""
    units = next((table for table in (BYTE_UNITS, TIME_UNITS) if unit in table), None)
    if units is None or not want:
        return None
    for other, size in units.items():
        if other != unit and math.isclose(got, want * units[unit] / size, rel_tol=0.015):
            return other
    return None


def close_to(got, want, name, rel_tol, unit="", hint="", slips=None, bits=False, abs_tol=0):
    """AssertionError unless ``got`` is within ``rel_tol`` of ``want``.

    The message names the first mistake class that fits: wrong type, wrong byte or time unit (by the ratio), bits
    for bytes (a factor of 8, when ``bits``), one of the ``slips`` ({ratio: message}, e.g. elements vs bytes), a
    rounding slip (within 2 % but outside the tolerance), and only then the concept ``hint``. It never contains
    ``want``. ``abs_tol`` accepts a few units more (bytes of a partition rounded either way).
    """
    got = number(got, name, unit)
    if math.isclose(got, want, rel_tol=rel_tol, abs_tol=max(abs_tol, 1e-12)):
        return got
    slip = unit_slip(got, want, unit)
    if slip and _unit_words(unit):
        raise AssertionError(f"wrong unit: {name} looks like a number of {slip}; give it in {unit} "
                             f"({_unit_words(unit)})")
    if slip:
        raise AssertionError(f"wrong unit: {name} looks like a number of {slip}; give it in {unit}")
    if bits and want and any(math.isclose(got, want * factor, rel_tol=0.01) for factor in (8, 1 / 8)):
        raise AssertionError(f"wrong unit: {name} is off by a factor of 8, bits where bytes belong: a byte is 8 bits, "
                             "and bandwidths and sizes here are in bytes")
    for ratio, message in (slips or {}).items():
        if want and math.isclose(got, want * ratio, rel_tol=min(0.01, rel_tol * 2) or 1e-9):
            raise AssertionError(f"{name}: {tr(message)}")  # the lesson's catalog has its message
    if rel_tol < 0.02 and math.isclose(got, want, rel_tol=0.02, abs_tol=abs_tol * 2):
        raise AssertionError(f"rounding: {name} is close but not within the accepted {rel_tol * 100:g} %: keep full precision "
                             "and round only when you print")
    raise AssertionError(f"{name} is not right" + (f": {tr(hint)}" if hint else ""))


def dict_keys(value, keys, name="your answer"):
    """``value`` when it is a dict with exactly ``keys``; the message names the wrong type, case or missing key."""
    keys = list(keys)
    shape = "{" + ", ".join(f'"{key}": ...' for key in keys) + "}"
    if type(value) is not dict:
        raise AssertionError(f"wrong type: {name} should be a dict {shape}, got {type(value).__name__}")
    given = {key for key in value}
    for key in keys:
        if key in given:
            continue
        same = [other for other in given if type(other) is str and other.strip().lower() == key.lower()]
        if same:
            raise AssertionError(f"wrong case: {name} has the key {same[0]!r}; write it as {key!r}")
        raise AssertionError(f"missing key: {name} has no {key!r} key; it should be {shape}")
    extra = sorted(str(key) for key in given if key not in keys)
    if extra:
        raise AssertionError(f"unexpected key: {name} has {', '.join(map(repr, extra))}; it should be {shape}")
    return value


def choice(value, options, name="your answer"):
    """``value`` stripped and matched to one of ``options`` ignoring case; the message names the wrong type."""
    options = list(options)
    listed = ", ".join(repr(option) for option in options)
    if type(value) is not str:
        raise AssertionError(f"wrong type: {name} should be a str, one of {listed}; got {type(value).__name__} "
                             f"{_short(value)}")
    for option in options:
        if value.strip().lower() == option.lower():
            return option
    raise AssertionError(f"{name} should be one of {listed} (any case); got {_short(value)}")


def _unit_words(unit):
    words = {"GB": tr("10**9 bytes"), "GiB": tr("2**30 bytes"), "MB": tr("10**6 bytes"), "bytes": tr("plain bytes")}
    return words.get(unit, "")


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def dotted_path(value, name="your answer"):
    """A JSON path as 'a.b.c': case, spaces, quotes, brackets and slashes carry no meaning; wrong type is named."""
    if type(value) is not str:
        raise AssertionError(f"wrong type: {name} should be a str, a dotted path such as \"fp16.enabled\"; "
                             f"got {type(value).__name__} {_short(value)}")
    text = value.strip().lower()
    for mark in ("[", "]", "/", '"', "'", " "):
        text = text.replace(mark, ".")
    path = ".".join(part for part in text.split(".") if part)
    if not path:
        raise AssertionError(f"{name} is empty; write a dotted path such as \"fp16.enabled\"")
    return path


def normal_path(value):
    """``value`` as dotted_path normalises it, or None when it is not a str."""
    try:
        return dotted_path(value)
    except AssertionError:
        return None


def path_in(value, accepted, name="your answer", hint=""):
    """The normalised path when it is one of ``accepted``; else AssertionError naming type, incompleteness, concept."""
    path = dotted_path(value, name)
    accepted = {dotted_path(option) for option in accepted}
    if path in accepted:
        return path
    if any(option.endswith("." + path) for option in accepted):
        raise AssertionError(f"incomplete path: {name} = {path!r} names a key but not where it is; give the full "
                             "dotted path from the top of the config, block first")
    raise AssertionError(f"{name} does not point at the problem" + (f": {tr(hint)}" if hint else ""))


def learner_value(make, *args):
    """``make(*args)``, or None when the learner's function is unfinished or fails: for teaching cells that show the
    learner's answer next to the reference only when there is one."""
    try:
        return make(*args)
    except Exception:  # an unanswered exercise raises NotImplementedError; a wrong one anything
        return None


def same_value(got, want, name, hint=""):
    """AssertionError unless ``got == want`` with the same type: a str for a bool ('true') is a wrong type, a str
    that differs only in case is a wrong case; otherwise the concept ``hint``. Never shows ``want``."""
    if type(got) is type(want) and got == want:
        return got
    if type(got) is not type(want) and not (type(want) is float and type(got) is int):
        if type(want) is bool and type(got) is str and str(want).lower() == got.strip().lower():
            raise AssertionError(f"wrong type: {name} should be {_a(type(want).__name__)}, got str {_short(got)}; "
                                 f"write {want!r:.5} without quotes")
        raise AssertionError(f"wrong type: {name} should be {_a(type(want).__name__)}, got {type(got).__name__} "
                             f"{_short(got)}")
    if type(got) is str and got.strip().lower() == want.lower():
        raise AssertionError(f"wrong case: {name} is {got!r}; DeepSpeed's values are case-sensitive")
    if type(got) is float and got == want:
        return got
    raise AssertionError(f"{name} is not right" + (f": {tr(hint)}" if hint else ""))


def _a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word
