"""What a config costs: the settings DeepSpeed will actually use, fed to zerolab.engine.memory and zerolab.engine.comm."""
from zerolab.config.deepspeed_import import import_deepspeed
from dataclasses import dataclass

from zerolab.engine import comm, memory
from zerolab.config.checks import zero_block, zero_stage
from zerolab.config.load import load_config
from zerolab.engine.config_precision import master_and_moments, training_precision
from zerolab.errors import UserError
from zerolab.engine.units import parse_count


@dataclass(frozen=True)
class Settings:
    """The training setup a config gives DeepSpeed 0.19.8 (after its defaults and the settings it ignores)."""

    stage: int
    offload_optimizer: str  # where the optimizer state really lives: none | cpu | nvme
    offload_param: str
    precision: str  # fp16 | bf16 | fp32
    reduce_bucket_size: int
    allgather_bucket_size: int
    prefetch_bucket_size: int
    overlap_comm: bool
    grad_accum: int
    micro_batch: int | None
    world_size: int
    master: str = "fp32"  # the master weights' dtype: bf16 under bf16.bf16_master_weights_and_grads (stages 1-3)
    moments: str = "fp32"  # Adam's moments: bf16 under bf16.bf16_optimizer_states as well


@dataclass(frozen=True)
class Effect:
    settings: Settings
    memory: memory.Estimate
    traffic: comm.Traffic
    step_time: comm.StepTime | None = None

    def as_dict(self):
        return {"settings": vars(self.settings), "memory": self.memory.as_dict(), "traffic": self.traffic.as_dict(),
                "step_time": None if self.step_time is None else {
                    "total_s": self.step_time.total_s, "exposed_s": self.step_time.exposed_s,
                    "hidden_s": self.step_time.hidden_s, "comm_s": self.step_time.comm_s,
                    "host_s": self.step_time.host_s}}


def read_settings(source, world_size=1):
    """Settings from a ds_config. Values come from DeepSpeed's own parsing (DeepSpeedZeroConfig for the zero
    block, DeepSpeedConfig for the batch fields), so unset fields take DeepSpeed's defaults.

    Raises UserError when the zero or precision blocks are invalid (run check_config for the details)."""
    import_deepspeed()
    from pydantic import ValidationError
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from zerolab.config.validate import validate

    config = load_config(source)
    try:
        zero = DeepSpeedZeroConfig(**zero_block(config))
    except (ValidationError, TypeError) as error:
        raise UserError("cannot work out the effect: zero_optimization is invalid "
                        f"({str(error).splitlines()[-2].strip() if isinstance(error, ValidationError) else error}); "
                        "`zerolab check` lists what to fix") from None
    stage = zero_stage(config)
    optimizer_device = _device(zero.offload_optimizer)
    param_device = _device(zero.offload_param)
    if stage == 0:
        optimizer_device = "none"  # no ZeRO optimizer to offload  # claim: optimizer-offload-at-stage-0-builds-cpu-adam
    elif stage < 3 and optimizer_device == "nvme":
        optimizer_device = "cpu"  # stage_1_and_2.py: any device but none means CPU offload  # claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload
    if stage < 3:
        param_device = "none"  # DeepSpeed never passes offload_param to the stage 1/2 optimizer  # claim: offload-param-ignored-below-stage-3
    _, parsed = validate(config, world_size)
    grad_accum, micro = _batch(config, parsed)
    precision = training_precision(config)
    master, moments = master_and_moments(config, stage, precision)
    return Settings(stage=stage, offload_optimizer=optimizer_device, offload_param=param_device,
                    precision=precision, master=master, moments=moments,
                    reduce_bucket_size=int(zero.reduce_bucket_size),
                    allgather_bucket_size=int(zero.allgather_bucket_size),
                    prefetch_bucket_size=int(zero.prefetch_bucket_size), overlap_comm=bool(zero.overlap_comm),
                    grad_accum=grad_accum, micro_batch=micro, world_size=world_size)


def config_effect(source, params, gpus_per_node=1, nodes=1, accounting="deepspeed", largest_layer_params=None,
                  compute_s=None, link="nvlink3", host_link="pcie4"):
    """Memory and traffic of training a ``params``-parameter model with this config on nodes x gpus_per_node GPUs.

    ``params`` may be a count or text such as "7B". With ``compute_s`` (forward + backward time of one optimizer
    step) the step time is estimated too, with the config's overlap_comm."""
    try:
        params = parse_count(params)
    except ValueError as error:
        raise UserError(str(error)) from None
    for name, value in (("gpus_per_node", gpus_per_node), ("nodes", nodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a whole number >= 1, got {value!r}")
    world = gpus_per_node * nodes
    s = read_settings(source, world)
    if s.master != "fp32" and accounting != "paper":
        raise UserError("bf16.bf16_master_weights_and_grads is set: DeepSpeed's estimator (the deepspeed accounting) "
                        "counts fp32 master weights and moments only; use --accounting paper, which counts them in "
                        "bf16")
    low_precision = {"master": s.master, "moments": s.moments} if s.master != "fp32" else {}
    estimate = memory.estimate(params, s.stage, gpus_per_node, nodes, offload_optimizer=s.offload_optimizer,
                               offload_param=s.offload_param, precision=s.precision, accounting=accounting,
                               largest_layer_params=largest_layer_params, **low_precision)
    traffic = comm.traffic(params, s.stage, world, grad_accum=s.grad_accum, precision=s.precision,
                           reduce_bucket_size=s.reduce_bucket_size,
                           allgather_bucket_size=max(1, s.allgather_bucket_size),
                           prefetch_bucket_size=max(1, s.prefetch_bucket_size),
                           offload_optimizer=s.offload_optimizer, offload_param=s.offload_param)
    step = None
    if compute_s is not None:
        step = comm.step_time(traffic, compute_s, link=link, host_link=host_link, overlap_comm=s.overlap_comm)
    return Effect(s, estimate, traffic, step)


def _device(offload):
    if offload is None:
        return "none"
    return getattr(offload.device, "value", offload.device)  # an enum or, with use_enum_values, its string


def _batch(config, parsed):
    """(gradient accumulation steps, micro batch) as DeepSpeed derives them; the raw fields if it rejected them."""
    if parsed is not None:
        return int(parsed.gradient_accumulation_steps), int(parsed.train_micro_batch_size_per_gpu)
    gas = config.get("gradient_accumulation_steps")
    micro = config.get("train_micro_batch_size_per_gpu")
    gas = gas if isinstance(gas, int) and not isinstance(gas, bool) and gas > 0 else 1
    micro = micro if isinstance(micro, int) and not isinstance(micro, bool) and micro > 0 else None
    return gas, micro
