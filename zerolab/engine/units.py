"""Reading and writing the sizes the course talks about: parameter counts and bytes.

Two byte units appear in the sources and the course keeps them apart:
GB = 10**9 bytes (the ZeRO paper) and GiB = 2**30 bytes (what DeepSpeed's estimators print as "GB").
"""
import re

GB = 10**9
GiB = 2**30

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBGT]?)\s*$", re.IGNORECASE)


def parse_count(text):
    """A parameter count from '13B', '350M', '7.5e9', '1.3b' or a plain integer.

    Raises ValueError with a message that says what is accepted.
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a parameter count; write e.g. 13B, 350M, 7.5e9 or 125000000")
    if isinstance(text, int):
        value = text
    elif isinstance(text, float):
        value = text
    else:
        match = _COUNT.match(str(text))
        if not match:
            raise ValueError(
                f"{text!r} is not a parameter count; write e.g. 13B, 350M, 7.5e9 or 125000000"
            )
        value = float(match.group(1)) * _SUFFIX[match.group(2).upper()]
    if value != value or value <= 0 or value == float("inf"):
        raise ValueError(f"{text!r} is not a positive parameter count")
    if abs(value - round(value)) > 1e-6 * max(1.0, abs(value)):
        raise ValueError(f"{text!r} is not a whole number of parameters")
    return int(round(value))


def format_count(n):
    """13000000000 -> '13B', 350000000 -> '350M'."""
    for suffix, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            return f"{n / size:.3g}{suffix}"
    return str(int(n))


def format_bytes(n, unit="GB"):
    """Bytes in GB (10**9) or GiB (2**30), with the unit written out."""
    size = {"GB": GB, "GiB": GiB, "MB": 10**6, "MiB": 2**20}[unit]
    value = n / size
    if value == 0:
        return f"0 {unit}"
    if value < 0.1:
        return f"{value:.3f} {unit}"
    return f"{value:.2f} {unit}"


_BYTES = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(B|bytes?|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$",
                    re.IGNORECASE)
_BYTE_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": GB, "tb": 10**12, "kib": 2**10,
               "mib": 2**20, "gib": GiB, "tib": 2**40}


def parse_bytes(text, allow_zero=False):
    """Bytes from '80GB' (80 x 10**9), '80GiB' (80 x 2**30), '1TB', '512MiB', '6.6e-4 GiB', '711168 bytes'. The unit
    is required; zero only with ``allow_zero`` (an answer may be 0 MB; a GPU's memory may not)."""
    match = _BYTES.match(str(text))  # no sign in the pattern: a negative size does not match
    value = float(match.group(1)) if match else None
    if value is None or (value == 0 and not allow_zero):
        raise ValueError(f"{text!r} is not a memory size; write e.g. 80GB (10^9 bytes each), 80GiB (2^30) or 1TB")
    return round(value * _BYTE_UNITS[match.group(2).lower()])
