"""One plain line per field that is set: what it does, DeepSpeed's default, and what the chosen value means."""
from zerolab.config.deepspeed_import import import_deepspeed
from dataclasses import dataclass

from zerolab.config.defaults import default_of
from zerolab.config.load import leaves, load_config


@dataclass(frozen=True)
class Explanation:
    path: str
    value: object
    default: object  # DeepSpeed 0.19.8's default (None when it has none)
    text: str


def explain_config(source):
    """An Explanation for every field set in a ds_config (path, JSON text or dict), in file order."""
    import_deepspeed()
    from zerolab.config.field_notes import describe
    config = load_config(source)
    return [Explanation(path, value, default_of(path), describe(path, value, config))
            for path, value in leaves(config)]
