"""check_config: DeepSpeed's own validation plus the checks for what it silently lets through."""
from zerolab.config.deepspeed_import import import_deepspeed
from zerolab.config.checks import CHECKS
from zerolab.config.findings import Report
from zerolab.config.load import load_config
from zerolab.config.validate import validate


def check_config(source, world_size=1):
    """A Report for a ds_config (path, JSON text or dict) at the given data-parallel world size."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number >= 1, got {world_size!r}")
    config = load_config(source)
    import_deepspeed()
    findings, _ = validate(config, world_size)
    for check in CHECKS:
        findings += check(config, world_size)
    return Report(tuple(_dedupe(findings)), world_size)


def _dedupe(findings):
    """One finding per (path, severity): DeepSpeed's own error first, a zerolab check's more specific
    explanation replaces it where both speak about the same thing."""
    kept = {}
    for finding in findings:
        key = (finding.path, finding.severity)
        if key not in kept or "DeepSpeed rejects" in kept[key].message or "removed from" in finding.message:
            kept[key] = finding
    return list(kept.values())
