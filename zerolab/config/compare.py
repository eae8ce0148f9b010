"""Two configs side by side: which fields differ and what the memory and traffic become."""
from dataclasses import dataclass

from zerolab.config.effect import Effect, config_effect
from zerolab.config.load import leaves, load_config

UNSET = "<unset>"


@dataclass(frozen=True)
class Comparison:
    changed: list  # [(path, value in a, value in b)]
    effect_a: Effect
    effect_b: Effect

    def as_dict(self):
        return {"changed": [{"path": p, "a": a, "b": b} for p, a, b in self.changed],
                "effect_a": self.effect_a.as_dict(), "effect_b": self.effect_b.as_dict()}


def changed_fields(a, b):
    """[(dotted path, value in a, value in b)] for every leaf that differs; UNSET where a side lacks it."""
    left, right = dict(leaves(load_config(a))), dict(leaves(load_config(b)))
    paths = list(left) + [p for p in right if p not in left]
    return [(p, left.get(p, UNSET), right.get(p, UNSET)) for p in paths if left.get(p, UNSET) != right.get(p, UNSET)]


def compare_configs(a, b, params, gpus_per_node=1, nodes=1, **options):
    """Comparison of two configs (paths, JSON text or dicts) for one model and cluster; options as config_effect."""
    return Comparison(changed_fields(a, b), config_effect(a, params, gpus_per_node, nodes, **options),
                      config_effect(b, params, gpus_per_node, nodes, **options))
