"""Lesson 04's claims ("Writing the config", autograder/claims/04_writing_the_config.toml) that no other lesson's
checks cover, checked on the libraries (the lesson's other marks reuse claims registered with their checks).

Probes: DeepSpeed 0.19.8's ZeRO-3 estimator under offload, its CUDA accelerator's precision rules (fp16 from
compute capability 7.0, bf16 through torch's emulation-accepting check) and the engine's refusal of a precision
the accelerator lacks; torch's bf16 range at the top and get_device_capability's pair.

Runs: one job on 2 CPU ranks (tests/claim_runs_04.py, the module fixture ``ranks``) for what only real engines
show: the optimizer DeepSpeed builds from the config, the micro-steps of one optimizer step, what each stage
partitions, contiguous_gradients' bucket, offload_param at stage 2, fp16 dynamic loss scaling, and ZeRO-3 with
parameter offload (its gathers from the host buffer and its gradients' dtype on the way to the host).
"""
import re
import types
from unittest import mock

import pytest
import torch

P13B, GPUS = 13_000_000_000, 8


# ----------------------------------------------------------------------------------------------------- probes


def test_deepspeeds_zero3_estimate_counts_the_largest_layer_gathered_in_full():
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    largest = 50257 * 5120
    both = estimate_zero3_model_states_mem_needs(P13B, largest, GPUS, 1, cpu_offload=True, cpu_offload_params=True)
    optimizer_only = estimate_zero3_model_states_mem_needs(P13B, largest, GPUS, 1, cpu_offload=True,
                                                           cpu_offload_params=False)
    assert both[1] == both[2] == 4 * largest  # 16-bit parameters and gradients of the largest layer, whole
    assert optimizer_only[1] == 4 * largest + int(2 * P13B / GPUS)


def test_bf16_has_fp32s_exponent_range_but_not_quite_its_largest_value():
    bf16, fp32, fp16 = torch.finfo(torch.bfloat16), torch.finfo(torch.float32), torch.finfo(torch.float16)
    assert bf16.tiny == fp32.tiny  # the same smallest normal value: 8 exponent bits
    assert 0.996 < bf16.max / fp32.max < 1  # the largest value within 0.4% of fp32's, below it
    assert fp16.tiny > 1e-5 and fp16.max < 7e4  # fp16's range, for contrast
    assert torch.isinf(torch.tensor(fp32.max).to(torch.bfloat16))  # fp32's largest values overflow in bf16


def test_get_device_capability_returns_the_major_and_minor_pair():
    with mock.patch("torch.cuda.get_device_properties", return_value=types.SimpleNamespace(major=7, minor=5)):
        assert torch.cuda.get_device_capability(0) == (7, 5)


def _cuda_accelerator_says(capability, allow_deprecated="0", bf16_tensor=True):
    """(fp16, bf16) as DeepSpeed's CUDA accelerator answers on a GPU of this compute capability."""
    from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator

    properties = types.SimpleNamespace(major=capability[0], minor=capability[1])
    with mock.patch("torch.cuda.is_available", return_value=True), mock.patch("torch.version.hip", None), \
            mock.patch("torch.cuda.current_device", return_value=0), \
            mock.patch("torch.cuda.get_device_properties", return_value=properties), \
            mock.patch("torch.cuda._check_bf16_tensor_supported", return_value=bf16_tensor), \
            mock.patch.dict("os.environ", {"DS_ALLOW_DEPRECATED_FP16": allow_deprecated}):
        accelerator = CUDA_Accelerator.__new__(CUDA_Accelerator)
        return accelerator.is_fp16_supported(), accelerator.is_bf16_supported()


def test_deepspeeds_cuda_accelerator_takes_fp16_from_compute_capability_7_and_6_only_when_allowed():
    assert [_cuda_accelerator_says(c)[0] for c in ((5, 2), (6, 0), (6, 1), (7, 0), (7, 5), (8, 0), (9, 0))] \
        == [False, False, False, True, True, True, True]
    assert [_cuda_accelerator_says(c, allow_deprecated="1")[0] for c in ((5, 2), (6, 0), (6, 1))] \
        == [False, True, True]  # DS_ALLOW_DEPRECATED_FP16=1 lets 6.x cards through, nothing older


def test_the_engine_refuses_a_half_precision_its_accelerator_does_not_support():
    from deepspeed.runtime import engine as ds_engine

    for fp16, bf16, message in ((True, False, "Type fp16 is not supported on your device."),
                                (False, True, "Type bf16 is not supported on your device.")):
        stub = types.SimpleNamespace(fp16_enabled=lambda: fp16, bfloat16_enabled=lambda: bf16)
        refusing = types.SimpleNamespace(is_fp16_supported=lambda: False, is_bf16_supported=lambda: False)
        with mock.patch.object(ds_engine, "get_accelerator", return_value=refusing):
            with pytest.raises(ValueError, match=re.escape(message)):
                ds_engine.DeepSpeedEngine._do_sanity_check(stub)


def test_deepspeeds_cuda_accelerator_asks_torch_which_accepts_emulated_bf16():
    """Before Ampere torch.cuda.is_bf16_supported() says yes when a bf16 tensor can be made (emulation); without
    emulation it says no. DeepSpeed's CUDA accelerator asks with the default, so it says yes too."""
    properties = types.SimpleNamespace(major=7, minor=5)
    with mock.patch("torch.cuda.is_available", return_value=True), mock.patch("torch.version.hip", None), \
            mock.patch("torch.cuda.current_device", return_value=0), \
            mock.patch("torch.cuda.get_device_properties", return_value=properties), \
            mock.patch("torch.cuda._check_bf16_tensor_supported", return_value=True):
        assert torch.cuda.is_bf16_supported() is True
        assert torch.cuda.is_bf16_supported(including_emulation=False) is False
    assert _cuda_accelerator_says((7, 5))[1] is True
    assert _cuda_accelerator_says((7, 5), bf16_tensor=False)[1] is False
    assert _cuda_accelerator_says((8, 0), bf16_tensor=False)[1] is True


# ------------------------------------------------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def ranks():
    """Every case of tests/claim_runs_04.py, from both ranks."""
    from conftest import probe_launcher
    from zerolab.handmade.core import harness

    with probe_launcher():
        return harness.run({"kind": "claim_runs_04:lesson04"}, 2, timeout=300, progress=False)


def test_deepspeed_builds_the_optimizer_from_the_config_block(ranks):
    for rank in ranks:
        for stage in ("stage1", "stage2", "stage3"):
            built = rank[stage]
            assert built["optimizer"] == "torch.optim.adamw.AdamW", built
            assert (built["lr"], built["betas"]) == (1e-3, [0.8, 0.9]), built


def test_gradient_accumulation_steps_micro_steps_make_one_optimizer_step(ranks):
    for rank in ranks:
        for stage in ("stage1", "stage2", "stage3"):
            assert rank[stage]["global_steps"] == [0, 1], rank[stage]
            assert rank[stage]["changed"] == [False, True], rank[stage]


def test_contiguous_gradients_copies_each_gradient_into_the_preallocated_bucket_in_backward(ranks):
    for rank in ranks:
        size = rank["buckets"]["reduce_bucket_size"]
        assert rank["buckets"]["in_bucket"] and all(rank["buckets"]["in_bucket"])
        assert all(buffers == [[size, "torch.bfloat16"]] for buffers in rank["buckets"]["buffers"])
        assert rank["buckets"]["distinct_buffers"] == 1  # one buffer, there before the first gradient, reused
        assert not any(rank["buckets_loose"]["in_bucket"])
        assert all(buffers == [] for buffers in rank["buckets_loose"]["buffers"])


def test_offload_param_at_stage_2_is_accepted_silently_and_moves_nothing(ranks):
    for rank in ranks:
        seen = rank["param_offload_at_stage2"]
        assert seen["config_offload_param"] == "cpu" and seen["said"] == [], seen
        assert seen["heard_a_warning"] == [  # the handler hears DeepSpeed's warnings
            "WARNING: Config parameter cpu_offload is deprecated use offload_optimizer instead"]
        assert seen["optimizer"] == "DeepSpeedZeroOptimizer" and seen["offload_param_on_the_optimizer"] is None
        assert not seen["params_partitioned"] and seen["param_elements_held"] == rank["stage1"]["psi"]


# The fp16 case: initial_scale_power 8, hysteresis 2, loss_scale_window 3, min_loss_scale 100; its steps overflow (O)
# or not (C) in this order: O O C C C C O O O O. Each step's (scale after it, skipped steps so far, weights changed).
FP16_STEPS = [(256, 1, False), (128, 2, False), (128, 2, True), (128, 2, True), (128, 2, True), (256, 2, True),
              (256, 3, False), (128, 4, False), (100, 5, False)]


def _fp16_steps(rank):
    return [(step["scale"], step["skipped"], step["changed"]) for step in rank["fp16"]["steps"]]


def test_fp16_scale_starts_at_2_to_the_initial_scale_power(ranks):
    for rank in ranks:
        assert rank["fp16"]["first_scale"] == 2**8


def test_an_overflow_skips_the_step(ranks):
    for rank in ranks:
        assert [changed for _, _, changed in _fp16_steps(rank)] == [changed for _, _, changed in FP16_STEPS]
        assert [skipped for _, skipped, _ in _fp16_steps(rank)] == [1, 2, 2, 2, 2, 2, 3, 4, 5]


def test_fp16_hysteresis_delays_the_first_halving_then_every_overflow_halves_down_to_the_floor(ranks):
    for rank in ranks:
        scales = [scale for scale, _, _ in _fp16_steps(rank)]
        assert scales[:2] == [256, 128]  # the first overflow uses up the hysteresis, the second halves
        assert scales[6:] == [256, 128, 100]  # after a doubling: hysteresis again, then halving, clamped at the floor
        assert rank["fp16"]["error"].startswith("Current loss scale already at minimum"), rank["fp16"]["error"]


def test_fp16_scale_doubles_on_the_clean_step_after_the_window(ranks):
    for rank in ranks:
        assert _fp16_steps(rank) == FP16_STEPS
        assert [scale for scale, _, _ in _fp16_steps(rank)][2:6] == [128, 128, 128, 256]  # window 3: the 4th doubles


def test_zero3_parameter_offload_gathers_the_host_partition_in_forward_and_again_in_backward(ranks):
    """Prefetch off and stage3_max_reuse_distance (1,000 elements) below the model: every micro-step's forward
    all-gathers every layer from the rank's partition, held in DeepSpeed's host buffer; backward gathers again each
    layer whose backward use comes more than stage3_max_reuse_distance elements after its forward use (after the
    first micro-step, which records the trace): all but the last ones, which stay gathered in between."""
    from claim_runs_04 import REUSE

    for rank in ranks:
        seen = rank["param_offload"]
        partitions, sizes = seen["partitions"], seen["param_elements"]
        assert seen["offload_param"] and all(seen["partitions_in_host_buffer"])
        assert seen["host_buffer_devices"] == ["cpu"]
        assert sum(partitions) == pytest.approx(rank["stage1"]["psi"] / 2, abs=14)
        phases = {}
        for phase, elements in seen["gathered"]:
            phases.setdefault(phase, []).append(elements)
        assert len(phases) == 8, phases  # 2 steps x 2 micro-steps x (forward, backward)
        layers = [partitions[i] + partitions[i + 1] for i in range(0, len(partitions), 2)]  # weight + bias
        full = [sizes[i] + sizes[i + 1] for i in range(0, len(sizes), 2)]
        # between a layer's forward and its backward come the later layers' forward and backward
        regathered = [part for index, part in enumerate(layers) if 2 * sum(full[index + 1:]) >= REUSE]
        assert 0 < len(regathered) < len(layers) - 1, (regathered, layers)
        for step in (0, 1):
            for micro in (0, 1):
                forward, backward = (phases[f"step {step} micro {micro} {p}"] for p in ("forward", "backward"))
                assert sorted(forward) == sorted(layers), forward
                assert sorted(backward) == sorted(layers if (step, micro) == (0, 0) else regathered), backward


def test_offloaded_gradients_go_to_the_host_as_fp32_at_the_boundary_and_16_bit_before_it(ranks):
    for rank in ranks:
        seen = rank["param_offload"]
        partition = sum(seen["partitions"])  # padding included: the copies carry the real elements
        for micro, copies in enumerate(seen["backward_to_host"]):
            [(dtype, elements)] = copies
            assert dtype == ("float32" if micro % 2 else "bfloat16"), (micro, copies)
            assert elements == pytest.approx(partition, abs=len(seen["partitions"])), (micro, copies)
