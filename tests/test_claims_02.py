"""Lesson 02's claims (CPU and NVMe offload, pinned memory, what crosses PCIe), each checked on the library itself:
DeepSpeed 0.19.8 and torch 2.13 (register: autograder/claims/02_offload.toml).

One harness run on 2 CPU ranks (tests/claim_runs_02.py, kind "claim_runs_02:offload") trains five DeepSpeed engines
one optimizer step each and reports what DeepSpeed's own objects show: the optimizer the engine built, where its
ZeRO-1/2 optimizer keeps each buffer, which tensors it asked the accelerator to pin, the 16-bit host accumulation
buffers, the collectives of each micro-step and what an NVMe offload below stage 3 writes. The other checks are
probes in this process: DeepSpeedCPUAdam, the ZeRO-2 memory estimator, DeepSpeed's native pinning backend (its op
replaced by a recorder: building it would compile a C++ op), stage 3's offload set-up and torch's default dtype.

On CPU ranks the accelerator's memory is host memory too, so where a buffer lives is read from DeepSpeed's own
decisions (the optimizer's ``cpu_offload`` and ``device``, the optimizer class, what it pins), not from
tensor.device alone.
"""
import re
import types
from pathlib import Path

import pytest
import torch

import zerolab  # noqa: F401 (points TORCH_EXTENSIONS_DIR at this venv's prebuilt cpu_adam before DeepSpeed loads it)
from conftest import probe_launcher

RANKS = 2
OFFLOADED = ("zero2_cpu", "zero2_cpu_unpinned", "zero1_nvme", "zero2_nvme")


@pytest.fixture(scope="module")
def ranks():
    """Each rank's {config name: record} (tests/claim_runs_02.py's CONFIGS)."""
    from zerolab.handmade.core import harness

    with probe_launcher():
        return harness.run({"kind": "claim_runs_02:offload"}, RANKS, timeout=300, progress=False)


def _partition(record):
    """Elements of one rank's ZeRO-1/2 partition: the flat 16-bit buffer, padded to a multiple of 2N, over N."""
    padded = -(-record["params"] // (2 * RANKS)) * (2 * RANKS)
    return padded // RANKS


def _param_sizes():
    from zerolab.handmade.core import model as fixed

    return fixed.numels(fixed.build())


@pytest.mark.slow
def test_offload_builds_deepspeed_cpu_adam_which_steps_on_the_cpu(ranks):
    """Claim offload-builds-deepspeed-cpu-adam: with offload_optimizer device cpu (or nvme) DeepSpeed turns the
    config's AdamW into DeepSpeedCPUAdam, which stepped the rank's fp32 master partition; DeepSpeedCPUAdam steps
    only CPU tensors and keeps fp32 moments. Without offload the same config builds no CPU Adam."""
    for rank in ranks:
        for name in OFFLOADED:
            record = rank[name]
            assert record["inner"] == "DeepSpeedCPUAdam" and record["fp32_optimizer_states"] is True, (name, record)
            assert all(record["masters_moved"]) and record["steps"] == 1, (name, record)
        assert rank["zero2_none"]["inner"] != "DeepSpeedCPUAdam", rank["zero2_none"]
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    param = torch.nn.Parameter(torch.randn(10, dtype=torch.bfloat16))
    param.grad = torch.randn(10, dtype=torch.bfloat16)
    adam = DeepSpeedCPUAdam([param])
    assert adam.fp32_optimizer_states is True
    before = param.detach().clone()
    adam.step()
    assert not torch.equal(param.detach(), before)
    assert {key: (value.dtype, value.device.type) for key, value in adam.state[param].items() if key != "step"} == \
        {"exp_avg": (torch.float32, "cpu"), "exp_avg_sq": (torch.float32, "cpu")}
    elsewhere = torch.nn.Parameter(torch.zeros(4, device="meta"))
    elsewhere.grad = torch.zeros(4, device="meta")
    with pytest.raises(AssertionError, match="must be 'cpu'"):
        DeepSpeedCPUAdam([elsewhere]).step()


@pytest.mark.slow
def test_offload_keeps_the_fp32_master_its_gradient_and_both_moments_on_the_host(ranks):
    """Claim offload-fp32-master-and-moments-on-the-host: under optimizer offload (stages 1 and 2) the ZeRO optimizer
    decides on 'cpu' for its own buffers, whatever the accelerator: the rank's fp32 master partition, its fp32
    gradient and Adam's two fp32 moments, 16 bytes per element of the partition. Without offload it keeps them on
    the accelerator's device and holds no fp32 gradient between steps."""
    for rank in ranks:
        for name in OFFLOADED:
            record, partition = rank[name], _partition(rank[name])
            assert record["wrapper"] == "DeepSpeedZeroOptimizer" and record["cpu_offload"] is True
            assert record["device"] == "cpu", record["device"]
            held = record["masters"] + record["master_grads"] + [state[1:] for state in record["states"]]
            assert [state[0] for state in record["states"]] == ["exp_avg", "exp_avg_sq"]
            assert held == [["torch.float32", partition, "cpu"]] * 4, (name, held)
            assert sum(4 * numel for _, numel, _ in held) == 16 * partition
        control = rank["zero2_none"]
        assert control["cpu_offload"] is False and control["device"] == control["accelerator_device"]
        assert control["master_grads"] == [None]


@pytest.mark.slow
def test_host_buffers_are_what_zerolab_host_memory_counts_fp32_or_bf16_masters(ranks):
    """Claim bf16-master-offload-host-buffers: each host buffer of a ZeRO-1/2 optimizer offloaded to the CPU, its
    bytes and whether DeepSpeed pinned it, equal zerolab.engine.host_memory.rank_buffers: with fp32 master weights,
    and with bf16.bf16_master_weights_and_grads (master and its gradient in bf16, the moments in bf16 only with
    bf16_optimizer_states)."""
    from zerolab.engine import host_memory

    cases = {"zero2_cpu": ("fp32", "fp32"), "zero2_cpu_bf16_master": ("bf16", "bf16"),
             "zero1_cpu_bf16_master_fp32_moments": ("bf16", "fp32")}
    for rank in ranks:
        for name, (master, moments) in cases.items():
            record = rank[name]
            measured = [_host_buffer(record, "fp32_master_partition", record["masters"][0]),
                        _host_buffer(record, "bit16_staging_buffer"),
                        _host_buffer(record, "fp32_gradient_partition", record["master_grads"][0]),
                        _host_buffer(record, "temp_gradient_buffer"),
                        (sum(numel * BYTES[dtype] for _, dtype, numel, _ in record["states"]), False)]
            predicted = host_memory.rank_buffers(record["params"], record["stage"], RANKS, "cpu", precision="bf16",
                                                 largest_param=max(_param_sizes()), master=master, moments=moments)
            assert [(nbytes, pinned) for _, nbytes, pinned in predicted] == measured, (name, predicted, measured)
            moment_dtype = "torch.bfloat16" if moments == "bf16" else "torch.float32"
            assert [state[1] for state in record["states"]] == [moment_dtype] * 2, record["states"]


BYTES = {"torch.float32": 4, "torch.bfloat16": 2}


def _host_buffer(record, kind, description=None):
    """(bytes, pinned) of the one buffer of ``kind``: described by the record, or by the pin call that made it."""
    (pointer,) = record["buffers"][kind]
    pins = {ptr: (numel, dtype) for ptr, numel, dtype in record["pinned"]}
    numel, dtype = (description[1], description[0]) if description else pins[pointer]
    return numel * BYTES[dtype], pointer in pins


@pytest.mark.slow
def test_offload_leaves_the_16_bit_parameters_whole_on_the_device(ranks):
    """Claim offload-keeps-16-bit-params-on-the-device: under optimizer offload the 16-bit parameters stay whole on
    every rank, in the flat buffer on the accelerator's device that the module's parameters point into; DeepSpeed
    pins none of it (it pins only the buffers it offloads)."""
    for rank in ranks:
        for name in OFFLOADED:
            record = rank[name]
            padded = _partition(record) * RANKS
            assert record["bit16_flat"] == [["torch.bfloat16", padded, record["accelerator_device"]]], record
            assert record["params_inside_bit16_flat"] and record["param_dtypes"] == ["torch.bfloat16"]
            pinned = {entry[0] for entry in record["pinned"]}
            assert not pinned & set(record["buffers"]["bit16_parameters"])


def _overlapping(rank, partition):
    """Sizes of the parameters whose elements overlap `rank`'s partition of the flat buffer."""
    sizes, start, found = _param_sizes(), 0, []
    for size in sizes:
        if start < (rank + 1) * partition and start + size > rank * partition:
            found.append(size)
        start += size
    return sorted(found)


@pytest.mark.slow
def test_zero2_offload_keeps_16_bit_host_accumulation_buffers_and_stage_1_none(ranks):
    """Claim zero2-offload-host-accumulation-buffers: at stage 2 with optimizer offload and gradient accumulation,
    DeepSpeed keeps a 16-bit host buffer for each parameter that overlaps the rank's partition (the whole
    parameter), pinned by default; stage 1 (which reduces only at the boundary) and a step without accumulation
    keep none."""
    for index, rank in enumerate(ranks):
        for name in ("zero2_cpu", "zero2_cpu_unpinned"):
            record = rank[name]
            buffers = record["accumulated"]
            assert {dtype for dtype, _, _ in buffers} == {"torch.bfloat16"}, buffers
            assert sorted(numel for _, numel, _ in buffers) == _overlapping(index, _partition(record)), buffers
        pinned = {entry[0] for entry in rank["zero2_cpu"]["pinned"]}
        assert set(rank["zero2_cpu"]["buffers"]["accumulation_buffers"]) <= pinned
        assert rank["zero1_nvme"]["accumulated"] == [], "stage 1 keeps host accumulation buffers"
        assert rank["zero2_nvme"]["accumulated"] == [], "accumulation buffers without accumulation"


@pytest.mark.slow
def test_pin_memory_pins_exactly_the_offloaded_buffers_and_false_pins_none(ranks):
    """Claim offload-pin-memory-pins-the-host-buffers: with offload_optimizer.pin_memory (true by default) the
    ZeRO-1/2 optimizer asks the accelerator to pin its host buffers, and only them: the fp32 master partition, its
    fp32 gradient, the 16-bit staging buffer for the updated parameters, the temporary gradient buffer and the
    accumulation buffers. With pin_memory false, or without offload, it pins nothing. (That pinned copies run
    asynchronously at full bandwidth is CUDA's doing, which CPU ranks cannot show.)"""
    for rank in ranks:
        for name in ("zero2_cpu", "zero1_nvme", "zero2_nvme"):
            record = rank[name]
            buffers = record["buffers"]
            offloaded = [kind for kind in buffers if kind != "bit16_parameters"]
            assert {entry[0] for entry in record["pinned"]} == {ptr for kind in offloaded for ptr in buffers[kind]}
            assert all(buffers[kind] for kind in offloaded if kind != "accumulation_buffers"), buffers
        assert rank["zero2_cpu_unpinned"]["pinned"] == [] and rank["zero2_cpu_unpinned"]["cpu_offload"] is True
        assert rank["zero2_none"]["pinned"] == []


@pytest.mark.slow
def test_nvme_optimizer_offload_below_stage_3_is_cpu_offload(ranks, tmp_path):
    """Claim nvme-optimizer-offload-below-stage-3-is-cpu-offload: at stages 1 and 2 device "nvme" gives the same CPU
    offload as "cpu" (DeepSpeedCPUAdam on host buffers), no swap to NVMe (the engine says so) and nothing written
    under nvme_path, without a warning; only stage 3's optimizer sets up swapping for it."""
    for rank in ranks:
        for name in ("zero1_nvme", "zero2_nvme"):
            record = rank[name]
            assert record["cpu_offload"] is True and record["inner"] == "DeepSpeedCPUAdam"
            assert record["swaps_optimizer_to_nvme"] is False and record["nvme_files"] == [], record
            assert not [said for said in record["warnings"] if "nvme" in said.lower()], record["warnings"]
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3

    swapping = {}
    for device in ("cpu", "nvme"):
        stage3 = types.SimpleNamespace()
        config = DeepSpeedZeroOffloadOptimizerConfig(device=device, nvme_path=str(tmp_path))
        DeepSpeedZeroOptimizer_Stage3._configure_offloading(stage3, config, None)
        swapping[device] = (stage3.offload_optimizer, stage3.swap_optimizer)
    assert swapping == {"cpu": (True, False), "nvme": (True, True)}


@pytest.mark.slow
def test_zero2_reduces_gradients_on_every_micro_step_and_stage_1_at_the_boundary(ranks):
    """Claim zero2-reduces-gradients-every-micro-step: with gradient accumulation (2 micro-steps) stage 2 all-reduces
    every gradient element on each micro-step, offloaded or not; stage 1 sends nothing before the boundary."""
    for rank in ranks:
        for name in ("zero2_cpu", "zero2_cpu_unpinned", "zero2_none"):
            record = rank[name]
            for calls in record["collectives"]:
                reduced = sum(numel for op, _, numel in calls if op == "all_reduce")
                assert reduced == record["params"], (name, record["collectives"])
        assert rank["zero1_nvme"]["collectives"][0] == []
        assert sum(numel for op, _, numel in rank["zero1_nvme"]["collectives"][1] if op == "all_reduce") == \
            rank["zero1_nvme"]["params"]


@pytest.mark.slow
def test_zero2_offload_all_gathers_the_updated_16_bit_partitions_after_the_step(ranks):
    """Claim zero2-offload-all-gathers-the-updated-partition: under optimizer offload, once the CPU has stepped,
    the ranks all-gather their updated 16-bit partitions (the whole padded flat buffer, in the training dtype),
    once per optimizer step and not on the micro-steps before the boundary."""
    for rank in ranks:
        for name in OFFLOADED:
            record = rank[name]
            padded = _partition(record) * RANKS
            gathers = [[call for call in calls if call[0] == "all_gather_into_tensor"] for calls in
                       record["collectives"]]
            assert gathers[-1] == [["all_gather_into_tensor", "torch.bfloat16", padded]], (name, gathers)
            assert all(step == [] for step in gathers[:-1]), (name, gathers)


def test_zero2_estimator_with_offload_puts_only_the_16_bit_parameters_on_the_gpu():
    """Claim zero2-estimator-offload-gpu-is-16-bit-params: with cpu_offload, DeepSpeed's ZeRO-2 estimator gives each
    GPU 2 bytes per parameter (the 16-bit parameters), whatever the number of GPUs and nodes; nothing for buffers
    or activations."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as estimate

    params = 13_000_000_000
    for gpus, nodes in ((1, 1), (8, 1), (8, 4)):
        assert estimate(params, gpus, nodes, cpu_offload=True)[1] == 2 * params
    assert estimate(params, 8, 1, cpu_offload=False)[1] > 2 * params  # without offload the partitions are there too


def test_zero2_estimator_host_figure_is_the_larger_of_the_fp32_state_and_the_load_peak():
    """Claim zero2-estimator-offload-host-rule: with cpu_offload, DeepSpeed's ZeRO-2 estimator gives host memory
    params x max(4 x GPU processes, 16) x additional_buffer_factor, whose default, 1.5, is the one lesson 02
    prints (zerolab.engine.memory.DEFAULT_BUFFER_FACTOR)."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as estimate

    from zerolab.engine import memory

    params = 1_000_000_007
    default = estimate(params, 1, 1, cpu_offload=True)[0]
    assert default == estimate(params, 1, 1, cpu_offload=True, additional_buffer_factor=1.5)[0]
    assert memory.DEFAULT_BUFFER_FACTOR == 1.5
    for gpus in (1, 2, 4, 5, 8, 16):
        host = estimate(params, gpus, 1, cpu_offload=True, additional_buffer_factor=1.0)[0]
        assert host == params * max(4 * gpus, 16), gpus
    assert estimate(params, 8, 1, cpu_offload=True)[0] == int(params * 32 * 1.5)


def test_zero2_estimator_host_figure_counts_the_gpus_of_every_node(capsys):
    """Claim zero2-estimator-host-counts-every-nodes-gpus: with cpu_offload the estimator multiplies the load peak
    by the GPUs of all nodes, although its table prints the figure per CPU (node) and its no-offload branch
    counts the GPUs of one node."""
    from deepspeed.runtime.zero.stage_1_and_2 import (estimate_zero2_model_states_mem_needs as estimate,
                                                      estimate_zero2_model_states_mem_needs_all_cold as table)

    params = 13_000_000_000
    assert estimate(params, 8, 4, cpu_offload=True)[0] == estimate(params, 32, 1, cpu_offload=True)[0]
    assert estimate(params, 8, 4, cpu_offload=True)[0] == int(params * 4 * 32 * 1.5)
    assert estimate(params, 8, 4, cpu_offload=False)[0] == estimate(params, 8, 1, cpu_offload=False)[0]
    table(params, num_gpus_per_node=8, num_nodes=4)
    printed = capsys.readouterr().out
    assert "per CPU" in printed and "4 nodes, 8 GPUs per node" in printed, printed
    row = next(line for line in printed.splitlines() if "offload_optimizer=" in line and "none" not in line)
    assert float(re.match(r"\s*([\d.]+)GB", row).group(1)) == pytest.approx(params * 4 * 32 * 1.5 / 2**30, abs=0.01)


def test_torch_builds_a_model_in_fp32_by_default():
    """Claim torch-builds-modules-in-fp32: torch creates a module's parameters in fp32 unless told otherwise, so
    every process that builds the model holds 4 bytes a parameter until DeepSpeed casts it."""
    assert torch.get_default_dtype() == torch.float32
    layer = torch.nn.Linear(8, 8)
    assert {p.dtype for p in layer.parameters()} == {torch.float32}
    assert sum(p.numel() * p.element_size() for p in layer.parameters()) == 4 * (8 * 8 + 8)


def test_native_pin_backend_pins_the_size_asked(monkeypatch):
    """Claim native-pin-backend-pins-the-size-asked: with DS_PIN_MEMORY_BACKEND=native the accelerator's pin_memory
    goes to DeepSpeed's own pinning, which asks its op for exactly the tensor's elements (no power-of-two
    rounding); the op allocates num_elem x element size bytes, page-aligned, and mlocks that size. The op is
    replaced by a recorder here (building it would compile C++), and its source is read for the allocation."""
    import deepspeed.ops.op_builder.pin_memory as builder
    import deepspeed.utils.pin_memory as pin_memory
    from deepspeed.accelerator import get_accelerator

    asked = []

    class Recorder:
        def new_cpu_locked_tensor(self, numel, example):
            asked.append((numel, example.dtype))
            return torch.empty(numel, dtype=example.dtype)

        def free_cpu_locked_tensor_by_ptr(self, address):
            return True

    monkeypatch.setattr(builder.PinMemoryBuilder, "load", lambda self, verbose=False: types.SimpleNamespace(
        pin_handle=Recorder))
    monkeypatch.setattr(pin_memory, "_shared_native_pins", None)
    monkeypatch.setenv("DS_PIN_MEMORY_REGISTER_DEVICE", "0")
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "native")
    size = 3 * 2**20 + 5  # a power of two would be 4 Mi elements
    tensor = torch.arange(size, dtype=torch.bfloat16)
    locked = get_accelerator().pin_memory(tensor)
    assert asked == [(size, torch.bfloat16)] and locked.numel() == size and torch.equal(locked, tensor)
    assert getattr(locked, "ds_pinned", False)
    monkeypatch.delenv("DS_PIN_MEMORY_BACKEND")
    assert pin_memory.get_active_native_pinned_memory() is None  # the default (torch's allocator) again

    csrc = Path(builder.__file__).resolve().parents[1] / "csrc" / "pin_memory"
    alloc = (csrc / "deepspeed_pin_tensor.cpp").read_text()
    assert re.search(r"num_bytes = num_elem \* torch::elementSize\(scalar_dtype\);\s*"
                     r"auto pinned_buffer = ds_page_aligned_alloc\(num_bytes, true\);", alloc), "alloc changed"
    page = (csrc / "page_alloc.cpp").read_text()
    assert "posix_memalign(&ptr, (size_t)sysconf(_SC_PAGESIZE), size)" in page and "mlock(ptr, size)" in page
