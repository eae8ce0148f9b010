"""The CLI's sentences about what DeepSpeed 0.19.8 (and torch 2.13's Adam) does, checked on the library: the
explanations of `zerolab explain` (zerolab/config/field_notes.py) and the findings of `zerolab check`
(zerolab/config/checks.py, zerolab/config/effect.py), each marked `# claim: ID` there and registered in
autograder/claims/cli.toml. Probes build DeepSpeed's config classes, loss scalers and optimizer choice, or call
its functions; one run on 2 CPU ranks (tests/claim_runs_cli.py) watches six engines for what only training
shows: what the batch, scheduler, logging and timing keys do, which collective each reduction setting picks, the
gradient bucket, NVMe below stage 3, and how ZeRO-3 gathers, prefetches, keeps and tiles."""
import copy
import inspect
import os
from types import SimpleNamespace

import pytest
import torch

from conftest import probe_launcher


def _config(config):
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig(copy.deepcopy({"train_batch_size": 8, **config}))


def _engine(config, name=None):
    """A stand-in for DeepSpeedEngine that answers, from DeepSpeed's own parsed config, what the engine's optimizer
    choice asks (its methods, unbound, called on this object)."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    engine = SimpleNamespace(_config=_config(config), zenflow=False, client_optimizer=None)
    for method in ("zero_use_cpu_optimizer", "bf16_optimizer_states", "optimizer_params", "optimizer_name",
                   "get_optimizer_configuration"):
        setattr(engine, method, getattr(DeepSpeedEngine, method).__get__(engine))
    return engine


@pytest.fixture(scope="module")
def ranks():
    """Each rank's observations of the run (tests/claim_runs_cli.py)."""
    from zerolab.handmade.core import harness

    with probe_launcher():
        return harness.run({"kind": "claim_runs_cli:cli_claims"}, 2, timeout=300, progress=False)


# --- the optimizer DeepSpeed builds -------------------------------------------------------------------------------

def test_at_stage_0_optimizer_offload_offloads_nothing_yet_builds_cpu_adam():
    """optimizer-offload-at-stage-0-builds-cpu-adam: at stage 0 ZeRO is off, so no optimizer state is offloaded,
    yet DeepSpeed still swaps Adam/AdamW for DeepSpeedCPUAdam, whose step refuses parameters that are not on the
    CPU (the device's parameters, at stage 0)."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    engine = _engine({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                      "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})
    assert engine._config.zero_enabled is False
    assert engine.get_optimizer_configuration({}, True)[0] is DeepSpeedCPUAdam
    step = inspect.getsource(DeepSpeedCPUAdam.step)
    assert "assert p.device == device" in step and "must be 'cpu'" in step


def test_deepspeeds_adam_decouples_weight_decay_unless_adam_w_mode_is_false():
    """deepspeed-adam-decouples-weight-decay: DeepSpeed's optimizer type "Adam" runs AdamW's decoupled weight decay
    (adam_w_mode defaults to true): with torch_adam it builds torch.optim.AdamW, and Adam only with adam_w_mode
    false; FusedAdam gets adam_w_mode=True."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    def built(kind, **params):
        engine = _engine({"optimizer": {"type": kind, "params": {"lr": 1e-3, "weight_decay": 0.1, **params}}})
        return DeepSpeedEngine._configure_basic_optimizer(engine, [torch.nn.Parameter(torch.zeros(3))])

    assert type(built("Adam", torch_adam=True)) is torch.optim.AdamW
    assert type(built("AdamW", torch_adam=True)) is torch.optim.AdamW
    assert type(built("Adam", torch_adam=True, adam_w_mode=False)) is torch.optim.Adam
    assert _engine({"optimizer": {"type": "Adam"}}).get_optimizer_configuration({}, True)[1] == {"adam_w_mode": True}


def test_muon_steps_its_other_half_with_torch_adamw_under_torch_adam_else_fused_adam():
    """muon-aux-adam-follows-torch-adam: DeepSpeed's Muon steps the parameters it does not orthogonalize (biases,
    embeddings) with an Adam it builds as for type AdamW: torch.optim.AdamW under params.torch_adam, else its own
    FusedAdam op, which a CPU machine compiles on first use."""
    from deepspeed.ops.adam import FusedAdam
    from deepspeed.runtime.engine import DeepSpeedEngine

    def aux(**params):
        engine = _engine({"optimizer": {"type": "Muon", "params": {"lr": 1e-3, **params}}})
        engine.has_moe_layers = False
        for method in ("_muon_param_groups", "_muon_half_defaults"):
            setattr(engine, method, getattr(DeepSpeedEngine, method))
        matrix, bias = torch.nn.Parameter(torch.zeros(4, 4)), torch.nn.Parameter(torch.zeros(4))
        matrix.use_muon, bias.use_muon = True, False
        return DeepSpeedEngine._configure_basic_optimizer(engine, [matrix, bias])

    optimizer = aux(torch_adam=True)
    assert type(optimizer).__name__ == "MuonWithAuxAdam" and type(optimizer.aux_optimizer) is torch.optim.AdamW
    engine = _engine({"optimizer": {"type": "Muon", "params": {"lr": 1e-3}}})
    assert engine.get_optimizer_configuration({}, True, allow_legacy_fallback=True)[0] is FusedAdam


def test_the_optimizers_params_reach_the_adam_deepspeed_builds():
    """optimizer-params-reach-the-adam: DeepSpeed passes optimizer.params (lr, betas, eps, weight_decay) to the
    Adam it builds; there betas decay the two moments and eps is added to the denominator: one step on a gradient
    of 1 from zero moves the weight by lr / (1 + eps)."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    params = {"lr": 0.1, "betas": [0.8, 0.9], "eps": 1.0, "weight_decay": 0.0, "torch_adam": True}
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = DeepSpeedEngine._configure_basic_optimizer(_engine({"optimizer": {"type": "AdamW",
                                                                                   "params": params}}), [weight])
    assert {key: optimizer.defaults[key] for key in ("lr", "eps", "weight_decay")} == {"lr": 0.1, "eps": 1.0,
                                                                                       "weight_decay": 0.0}
    assert tuple(optimizer.defaults["betas"]) == (0.8, 0.9)
    weight.grad = torch.ones(1)
    optimizer.step()
    state = optimizer.state[weight]
    assert state["exp_avg"].item() == pytest.approx(0.2) and state["exp_avg_sq"].item() == pytest.approx(0.1)
    assert weight.item() == pytest.approx(-0.1 / (1 + 1.0))


def test_auto_outside_the_blocks_stays_the_string_auto_and_fails_where_it_is_used():
    """auto-kept-as-string-outside-the-blocks: outside zero_optimization, fp16 and bf16, DeepSpeed keeps "auto" as
    the string (gradient_clipping, optimizer.params) and fails when it uses it: the optimizer it builds refuses
    lr "auto"."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    parsed = _config({"gradient_clipping": "auto", "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})
    assert parsed.gradient_clipping == "auto" and parsed.optimizer_params["lr"] == "auto"
    engine = _engine({"optimizer": {"type": "AdamW", "params": {"lr": "auto", "torch_adam": True}}})
    with pytest.raises((TypeError, ValueError)):
        DeepSpeedEngine._configure_basic_optimizer(engine, [torch.nn.Parameter(torch.zeros(1))])


# --- fp16 loss scaling, bf16 master weights ------------------------------------------------------------------------

def _scaler(**fp16):
    """The loss scaler the ZeRO optimizers build (CreateLossScaler) for this fp16 block."""
    from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler

    parsed = _config({"fp16": {"enabled": True, **fp16}}).float16_config
    return CreateLossScaler(torch.float16, parsed.loss_scale, parsed.loss_scale == 0,
                            parsed.dynamic_loss_scale_args())


@pytest.fixture
def rank_0(monkeypatch):
    """The dynamic scaler asks deepspeed.comm for its rank when it logs an overflow: rank 0, no process group."""
    from deepspeed.runtime.fp16 import loss_scaler

    monkeypatch.setattr(loss_scaler.dist, "get_rank", lambda *args, **kwargs: 0)


def test_fp16_scales_the_loss_dynamically_unless_loss_scale_is_set():
    """fp16-loss-scale-zero-is-dynamic: fp16 enabled alone gets dynamic loss scaling (loss_scale 0, the default);
    a nonzero loss_scale is a fixed scale; bf16 gets no scaling (a fixed 1)."""
    from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler, DynamicLossScaler, LossScaler

    assert isinstance(_scaler(), DynamicLossScaler) and _scaler().dynamic
    fixed = _scaler(loss_scale=128)
    assert type(fixed) is LossScaler and fixed.loss_scale == 128
    assert CreateLossScaler(torch.bfloat16, 0, True, _config({}).float16_config.dynamic_loss_scale_args()
                            ).loss_scale == 1.0


def test_an_overflow_at_the_minimum_scale_stops_the_run(rank_0):
    """fp16-overflow-at-min-scale-stops-the-run: the dynamic scale never goes below min_loss_scale; reaching it is
    fine, but an overflow while at it raises an exception that ends the run."""
    scaler = _scaler(initial_scale_power=2, hysteresis=1, min_loss_scale=2)
    scaler.update_scale(True)
    assert scaler.loss_scale == 2
    scaler.update_scale(False)
    assert scaler.loss_scale == 2
    with pytest.raises(Exception, match="already at minimum"):
        scaler.update_scale(True)


def test_bf16_master_weight_options_need_zero_and_states_need_master_weights():
    """bf16-master-options-need-zero-and-each-other: DeepSpeed's config refuses bf16_master_weights_and_grads and
    bf16_optimizer_states at stage 0, and bf16_optimizer_states without bf16_master_weights_and_grads."""
    def bf16(stage, **options):
        return _config({"bf16": {"enabled": True, **options}, "zero_optimization": {"stage": stage}})

    with pytest.raises(AssertionError, match="only supported with ZeRO Stage 1, 2, or 3"):
        bf16(0, bf16_master_weights_and_grads=True)
    with pytest.raises(AssertionError, match="requires bf16_master_weights_and_grads"):
        bf16(2, bf16_optimizer_states=True)
    assert bf16(2, bf16_master_weights_and_grads=True, bf16_optimizer_states=True).bfloat16_config.bf16_optimizer_states


# --- ZeRO settings a probe shows --------------------------------------------------------------------------------------

def test_round_robin_gradients_interleaves_the_owners_of_consecutive_gradients():
    """round-robin-gradients-interleaves-owners: round_robin_gradients reorders a group's parameters so that
    consecutive ones belong to different ranks' partitions (parameter i goes with the others of i mod N): the
    gradient copies of backward then spread over the ranks."""
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    tensors = [torch.zeros(1) for _ in range(6)]
    reordered, where = DeepSpeedZeroOptimizer._round_robin_reorder(None, tensors, 2)
    assert [next(i for i, s in enumerate(tensors) if s is t) for t in reordered] == [0, 2, 4, 1, 3, 5]
    assert where == {0: 0, 2: 1, 4: 2, 1: 3, 3: 4, 5: 5}


def test_the_swap_folders_are_made_under_nvme_path(tmp_path, monkeypatch):
    """nvme-path-holds-the-swap-folder: ZeRO-3 makes its NVMe swap folders under nvme_path: nvme_path/zero_stage_3
    for the optimizer state, nvme_path/zero_stage_3/<dtype>params/rank<R> for the parameters."""
    from deepspeed.runtime.swap_tensor import partitioned_param_swapper as param_swap
    from deepspeed.runtime.zero import stage3

    built = []
    monkeypatch.setattr(stage3, "PartitionedOptimizerSwapper", lambda **kwargs: built.append(kwargs["base_folder"]))
    monkeypatch.setattr(stage3.dist, "get_rank", lambda *args, **kwargs: 1)
    parsed = _config({"zero_optimization": {"stage": 3,
                                            "offload_optimizer": {"device": "nvme", "nvme_path": str(tmp_path)},
                                            "offload_param": {"device": "nvme", "nvme_path": str(tmp_path)}}})
    optimizer = SimpleNamespace(optimizer=None, fp16_partitioned_groups_flat_numel=[8], device="cpu",
                                master_weights_and_grads_dtype=torch.float32, timers=None)
    stage3.DeepSpeedZeroOptimizer_Stage3._configure_tensor_swapping(optimizer, parsed.zero_config.offload_optimizer,
                                                                    parsed.aio_config)
    assert built == [os.path.join(str(tmp_path), "zero_stage_3")] and os.path.isdir(built[0])

    class Stop(Exception):
        pass

    def no_aio():
        raise Stop  # the folder is made; the aio op it would load next is not needed to see it

    monkeypatch.setattr(param_swap, "AsyncIOBuilder", no_aio)
    monkeypatch.setattr(param_swap.dist, "get_rank", lambda *args, **kwargs: 1)
    swapper = SimpleNamespace(dtype=torch.float16)
    with pytest.raises(Stop):
        param_swap.AsyncPartitionedParameterSwapper._configure_aio(swapper, parsed)
    assert swapper.swap_folder == os.path.join(str(tmp_path), "zero_stage_3", "float16params", "rank1")
    assert os.path.isdir(swapper.swap_folder)


def test_stage_3_keys_reach_only_the_stage_3_optimizer():
    """stage3-keys-ignored-below-stage-3: the stage3_* settings (prefetch bucket, persistence thresholds, live
    parameters, reuse distance) are inputs of ZeRO-3's optimizer only; the stage 1/2 optimizer has none of them,
    so below stage 3 they change nothing."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    stage3_fields = {name for name, field in DeepSpeedZeroConfig.model_fields.items()
                     if (field.alias or "").startswith("stage3_")}
    inputs = ("prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
              "max_live_parameters", "max_reuse_distance")
    assert set(inputs) <= stage3_fields
    assert set(inputs) <= set(inspect.signature(DeepSpeedZeroOptimizer_Stage3.__init__).parameters)
    assert not set(inputs) & set(inspect.signature(DeepSpeedZeroOptimizer.__init__).parameters)


def test_zero_optimization_true_is_stage_1():
    """zero-optimization-true-means-stage-1: the legacy boolean zero_optimization true gives ZeRO stage 1, false
    stage 0."""
    assert _config({"zero_optimization": True}).zero_optimization_stage == 1
    assert _config({"zero_optimization": False}).zero_optimization_stage == 0


# --- what a run shows ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_micro_batch_is_the_rows_of_each_rank_per_micro_step(ranks):
    """micro-batch-is-the-dataloader-batch: DeepSpeed's data loader gives each rank train_micro_batch_size_per_gpu
    rows per forward/backward."""
    for result in ranks:
        assert result["stage2"]["loader_batch"] == 3
        assert {micro["rows"] for micro in result["stage2"]["micro_steps"]} == {3}


@pytest.mark.slow
def test_the_scheduler_steps_with_the_optimizer(ranks):
    """scheduler-steps-with-the-optimizer: DeepSpeed steps the configured LR scheduler once per optimizer step,
    not per micro-step."""
    for result in ranks:
        micro = result["stage2"]["micro_steps"]
        assert [m["scheduler_steps"] for m in micro] == [m["global_steps"] for m in micro]
        assert len({m["lr"] for m in micro}) == 4


@pytest.mark.slow
def test_steps_per_print_reports_every_n_optimizer_steps(ranks):
    """steps-per-print-reports-every-n-steps: with steps_per_print 2, rank 0 reports progress at optimizer steps 2
    and 4 of 4."""
    assert ranks[0]["stage2"]["reports"] == [2, 4]


@pytest.mark.slow
def test_wall_clock_breakdown_times_forward_backward_and_step(ranks):
    """wall-clock-breakdown-times-forward-backward-step: wall_clock_breakdown makes the engine time forward,
    backward (and its reduction) and step separately, per micro-step and per optimizer step."""
    timers = ranks[0]["stage2"]["timers"]
    for name in ("fwd_microstep", "bwd_microstep", "step_microstep", "fwd", "bwd", "bwd_allreduce", "step"):
        assert timers.get(name, 0) > 0, timers


@pytest.mark.slow
def test_bf16_trains_16_bit_parameters_and_gradients_without_loss_scaling(ranks):
    """bf16-trains-without-loss-scaling: with bf16 enabled the module's parameters and its gradients are bf16, and
    the ZeRO optimizer's loss scaler is a fixed scale of 1 (no loss scaling)."""
    for result in ranks:
        run = result["stage2"]
        assert run["param_dtypes"] == run["grad_dtypes"] == ["torch.bfloat16"]
        assert (run["loss_scaler"], run["loss_scale"], run["dynamic_loss_scale"]) == ("LossScaler", 1.0, False)


@pytest.mark.slow
def test_reduce_scatter_picks_the_gradient_collective_at_each_stage(ranks):
    """reduce-scatter-flag-by-stage: with reduce_scatter (the default) ZeRO-3 reduce-scatters the gradients; at
    stage 2 it reduces each rank's slice for its owner, which is one all-reduce of the bucket while
    use_multi_rank_bucket_allreduce is true (its default) and a reduce to each owner when it is false; with
    reduce_scatter false both stages all-reduce whole buckets."""
    for result in ranks:
        def names(calls):
            return {name for name, n in calls if n > 1}

        assert names(result["stage2"]["micro_steps"][0]["backward"]) == {"all_reduce"}
        assert names(result["stage2_reduce"]["backward"]) == {"reduce"}
        assert names(result["stage2_allreduce"]["backward"]) == {"all_reduce"}
        assert all("reduce_scatter_tensor" in names(calls) for calls in result["stage3"]["backward"])
        for calls in result["stage3_lean"]["backward"]:
            assert "all_reduce" in names(calls) and "reduce_scatter_tensor" not in names(calls)


@pytest.mark.slow
def test_allgather_bucket_size_and_allgather_partitions_change_nothing_with_all_gather_into_tensor(ranks):
    """allgather-settings-unused: torch has all_gather_into_tensor, so stage 1/2 all-gathers the updated partitions
    in one call per step whatever allgather_bucket_size says (512 here, 5 buckets' worth), and
    allgather_partitions false (which DeepSpeed 0.19.8 never reads) brings no broadcasts."""
    for result in ranks:
        for micro in result["stage2"]["micro_steps"][1::2]:
            gathers = [(name, n) for name, n in micro["step"] if name.startswith("all_gather") or name == "broadcast"]
            assert gathers == [("all_gather_into_tensor", 2464)], micro


@pytest.mark.slow
def test_optimizer_offload_forces_contiguous_gradients_at_stage_2(ranks):
    """offload-forces-contiguous-gradients: at stages 1-2 optimizer offload turns contiguous_gradients on even when
    the config sets it false."""
    for result in ranks:
        assert result["stage2_nvme"]["contiguous_gradients"] is True


@pytest.mark.slow
def test_zero_3_gathers_each_module_s_parameters_when_it_runs(ranks):
    """zero3-gathers-parameters-module-by-module: at stage 3 every rank holds a shard of each parameter
    (ceil(numel / N) elements); a module's parameters are gathered for its own forward and, without prefetch or
    reuse, let go after it: while the first Linear runs the second is still partitioned, and at the Tanh between
    them neither is gathered."""
    for result in ranks:
        lean = result["stage3_lean"]
        assert lean["shard"] == {name: -(-numel // 2) for name, numel in lean["numel"].items()}
        for inside, between in zip(lean["in_first"], lean["at_tanh"]):
            assert set(inside["first"].values()) == {"AVAILABLE"} and set(inside["second"].values()) == {"NOT_AVAILABLE"}
            assert set(between["first"].values()) == set(between["second"].values()) == {"NOT_AVAILABLE"}


@pytest.mark.slow
def test_sub_group_size_tiles_the_stage_3_step_without_offload_too(ranks):
    """stage3-sub-group-size-tiles-the-step: ZeRO-3 splits each rank's fp32 partition into sub-groups of whole
    parameter shards, closing one as soon as it holds sub_group_size elements or more, and steps them one by one;
    here without any offload: 500 gives [488 + 31, 702, 12], the default one group of 1233."""
    for result in ranks:
        assert result["stage3"]["sub_groups"] == [519, 702, 12]
        assert result["stage3_lean"]["sub_groups"] == [1233]
