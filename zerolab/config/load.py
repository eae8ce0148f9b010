"""Reading a ds_config from a path, JSON text or a dict, with one clear line when it cannot be read."""
import json
import os
from pathlib import Path

from zerolab.errors import UserError


def load_config(source):
    """A ds_config as a dict, from a dict, a JSON object as text, or a path to a JSON file.

    Raises UserError naming the file and what is wrong: missing, invalid JSON (with line and column),
    a duplicate key (DeepSpeed rejects those too), or JSON that is not an object.
    """
    if isinstance(source, dict):
        return source
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith(("{", "["))):
        path = Path(source)
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise UserError(f"{os.fspath(path)}: {what}; give the path to a ds_config JSON file")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"{os.fspath(path)}: cannot be read ({error})") from None
        return _parse(text, os.fspath(path))
    if isinstance(source, str):
        return _parse(source, "config text")
    raise UserError(f"a ds_config must be a dict, JSON text or a path, not {type(source).__name__}")


def _parse(text, where):
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as error:
        raise UserError(f"{where}: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}") from None
    except _DuplicateKey as error:
        raise UserError(f"{where}: key {error.args[0]!r} appears twice in one object; keep one") from None
    if not isinstance(value, dict):
        raise UserError(f"{where}: a ds_config is a JSON object {{...}}, this is a {type(value).__name__}")
    return value


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def leaves(value, prefix=""):
    """Every (dotted path, value) of a config, e.g. ("zero_optimization.offload_optimizer.device", "cpu")."""
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from leaves(inner, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value
