"""What one GPU keeps for backward, by term: the result of every activation formula (zerolab.engine.activations for
Megatron's accounting, zerolab.engine.activations_hf for Hugging Face's code)."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Activations:
    """Bytes one GPU keeps for backward, by term. Total = layers x layer + shared + outside + working."""

    layers: int
    layer: dict  # one decoder layer
    shared: dict  # kept once by the layers together (a causal mask they all use)
    outside: dict  # embedding, final norm, output layer, loss
    working: dict  # live only at the peak: one layer recomputing (megatron); the peak moment's transients (hf)
    moment: str = ""  # hf: which moment of backward the peak is (see zerolab.engine.activations_hf)

    @property
    def layer_bytes(self):
        return sum(self.layer.values())

    @property
    def blocks_bytes(self):
        """What the decoder layers keep: the figure a measurement of the blocks alone checks."""
        return self.layers * self.layer_bytes + sum(self.shared.values())

    @property
    def total_bytes(self):
        return self.blocks_bytes + sum(self.outside.values()) + sum(self.working.values())

    def as_dict(self):
        return {"layers": self.layers, "layer": dict(self.layer), "shared": dict(self.shared),
                "outside": dict(self.outside), "working": dict(self.working), "moment": self.moment,
                "layer_bytes": self.layer_bytes, "blocks_bytes": self.blocks_bytes, "total_bytes": self.total_bytes}
