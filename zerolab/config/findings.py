"""What the doctor reports: findings with a JSON path, a severity and what to do."""
from dataclasses import dataclass, field

from zerolab.base.i18n import tr

SEVERITIES = ("error", "warning")


@dataclass(frozen=True)
class Finding:
    """One problem. ``path`` is a dotted JSON path such as ``zero_optimization.offload_optimizer.device``
    ("" for the config as a whole). error: DeepSpeed rejects it or it cannot work; warning: accepted, but
    surely not what was meant."""

    path: str
    severity: str
    message: str

    def as_dict(self):
        return {"path": self.path, "message": self.message}

    def __str__(self):
        return f"{self.severity:<8}{self.path or '(config)'}: {tr(self.message)}"


@dataclass(frozen=True)
class Report:
    findings: tuple = field(default_factory=tuple)
    world_size: int = 1

    @property
    def errors(self):
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self):
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def valid(self):
        return not self.errors

    def as_dict(self):
        return {"valid": self.valid, "errors": [f.as_dict() for f in self.errors],
                "warnings": [f.as_dict() for f in self.warnings]}
