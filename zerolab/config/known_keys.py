"""The top-level keys DeepSpeed 0.19.8 reads, taken from DeepSpeed itself rather than a hand-kept list.

DeepSpeedConfig reads top-level keys with ``dict.get`` / ``in`` and ignores the rest, so a typo such as
``zero_optimisation`` silently leaves ZeRO off. The reliable list of what it reads is what it *looks up*:
we hand DeepSpeedConfig a dict that records every key asked for (get, [], in, keys() membership).
Probed alternatives: deepspeed/runtime/constants.py mixes top-level keys with block-level ones
("enabled", "type", "params", "loss_scale") and misses blocks defined elsewhere ("zero_optimization",
"tensorboard", "compile"), so it cannot tell a top-level typo from a misplaced sub-key.

One key is read only when torch.distributed is initialised, which validation never needs:
``sequence_parallel_size`` (DeepSpeedConfig.__init__). It is added by name.
"""
from zerolab.config.deepspeed_import import import_deepspeed
import functools

READ_ONLY_UNDER_DISTRIBUTED = ("sequence_parallel_size",)


class _RecordingDict(dict):
    def __init__(self, data, seen):
        super().__init__(data)
        self.seen = seen

    def get(self, key, *default):
        self.seen.add(key)
        return super().get(key, *default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.seen.add(key)
        return super().__contains__(key)

    def keys(self):
        return _RecordingKeys(self)


class _RecordingKeys:
    def __init__(self, owner):
        self.owner = owner

    def __contains__(self, key):
        return key in self.owner

    def __iter__(self):
        return iter(dict.keys(self.owner))

    def __len__(self):
        return len(dict.keys(self.owner))


@functools.cache
def known_top_level_keys():
    """Every top-level key DeepSpeedConfig looks up (frozenset of str), the removed ones included."""
    import_deepspeed()
    from zerolab.config.validate import deepspeed_config

    seen = set()
    deepspeed_config(_RecordingDict({"train_batch_size": 1}, seen), world_size=1)
    return frozenset(key for key in seen if isinstance(key, str)) | frozenset(READ_ONLY_UNDER_DISTRIBUTED)
