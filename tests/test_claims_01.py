"""Lesson 01's sentences about what DeepSpeed, PyTorch and transformers do (autograder/claims/01_where_memory_goes.toml),
each checked on the library itself.

Probes (one process, no run): torch's Adam keeps two moments per parameter; DeepSpeed's memory estimators (where they
live, the 18 partitioned bytes, GiB printed as "GB", ZeRO-3's largest layer, the host figure's fp32 load peak);
torch's fused SDPA keeps no s x s scores, saved_tensors_hooks sees every tensor autograd saves, torch.utils.checkpoint
runs the forward again in backward, FakeTensorMode runs a training step without the memory; Hugging Face's Llama
keeps an fp32 copy of each RMSNorm's input and starts backward with fp32 gradients over the whole vocabulary.

One run on 2 CPU ranks (tests/claim_runs_01.py, module fixture ``ranks``) for what only ranks show: ZeRO-2 keeps
only the rank's gradient partition, no stage partitions the activations, and stage 3 gathers the parameters for
forward and again for backward unless its reuse and live-parameter limits keep them gathered.
"""
import contextlib
import inspect
import io
import re

import psutil
import pytest
import torch

from conftest import probe_launcher

RANKS = 2


# -- torch's Adam ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("optimizer", [torch.optim.Adam, torch.optim.AdamW])
def test_adam_keeps_two_moments_the_size_of_each_parameter(optimizer):
    """Claim adam-keeps-two-moments-per-parameter: momentum (exp_avg) and variance (exp_avg_sq), each a tensor of the
    parameter's shape and dtype, and no other tensor the parameter's size (amsgrad's third one is off by default)."""
    params = [torch.nn.Parameter(torch.randn(7, 5)), torch.nn.Parameter(torch.randn(3))]
    adam = optimizer(params)
    assert adam.defaults["amsgrad"] is False
    sum(p.square().sum() for p in params).backward()
    adam.step()
    for param in params:
        state = adam.state[param]
        full = {key: value for key, value in state.items() if torch.is_tensor(value) and value.shape == param.shape}
        assert sorted(full) == ["exp_avg", "exp_avg_sq"], sorted(state)
        assert all(value.shape == param.shape and value.dtype == param.dtype for value in full.values())


# -- DeepSpeed's memory estimators -------------------------------------------------------------------------------

def _estimators():
    from deepspeed.runtime.zero import stage3, stage_1_and_2

    return stage_1_and_2, stage3


def test_the_estimators_live_in_the_zero_stage_modules():
    """Claim deepspeed-estimators-in-stage-modules."""
    stage_1_and_2, stage3 = _estimators()
    for module, stage in ((stage_1_and_2, "zero2"), (stage3, "zero3")):
        for suffix in ("", "_all_live", "_all_cold"):
            function = getattr(module, f"estimate_{stage}_model_states_mem_needs{suffix}")
            assert function.__module__ == module.__name__, (function, function.__module__)
    assert stage_1_and_2.__name__ == "deepspeed.runtime.zero.stage_1_and_2"
    assert stage3.__name__ == "deepspeed.runtime.zero.stage3"


def test_the_zero2_estimator_partitions_18_bytes_per_parameter():
    """Claim deepspeed-zero2-estimator-counts-18-partitioned-bytes: 2 bytes whole, 18 (16-bit and fp32 gradients,
    fp32 master, two fp32 moments) divided by the GPU count; the paper partitions 14."""
    stage_1_and_2, _ = _estimators()
    for params in (7, 125_000_000, 13 * 10**9):
        for gpus in (1, 8, 64):
            _, gpu = stage_1_and_2.estimate_zero2_model_states_mem_needs(params, gpus, 1, cpu_offload=False)
            assert gpu == 2 * params + int(18 * params / gpus), (params, gpus, gpu)
            if params > gpus:
                assert gpu != 2 * params + int(14 * params / gpus)
    source = inspect.getsource(stage_1_and_2.estimate_zero2_model_states_mem_needs)
    assert "18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit" in source


def test_the_estimators_print_gib_and_label_it_gb():
    """Claim deepspeed-estimators-print-gib-as-gb: the figures printed with "GB" are bytes / 2**30."""
    stage_1_and_2, stage3 = _estimators()
    params, largest, gpus = 13 * 10**9, 50257 * 5120, 8
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        stage_1_and_2.estimate_zero2_model_states_mem_needs_all_cold(params, gpus, 1)
        stage3.estimate_zero3_model_states_mem_needs_all_cold(params, largest, gpus, 1)
    shown = [float(value) for value in re.findall(r"([0-9.]+)GB", printed.getvalue())]
    assert "GiB" not in printed.getvalue()
    want = []
    for offload in (True, False):
        want += [n / 2**30 for n in stage_1_and_2.estimate_zero2_model_states_mem_needs(params, gpus, 1, offload)]
    for offload_optimizer, offload_param, zero_init in ((True, True, True), (True, True, False), (True, False, True),
                                                        (True, False, False), (False, False, True),
                                                        (False, False, False)):
        cpu, gpu, _ = stage3.estimate_zero3_model_states_mem_needs(params, largest, gpus, 1, offload_optimizer,
                                                                   offload_param, zero_init)
        want += [cpu / 2**30, gpu / 2**30]
    assert len(shown) == len(want)
    assert shown == pytest.approx(want, abs=0.005)
    assert 51.46 in shown and round(55.25e9 / 2**30, 2) == 51.46  # 13B ZeRO-2 on 8 GPUs: 55.25e9 bytes, "51.46GB"


def test_the_zero3_estimator_adds_the_largest_layer_whole_on_every_gpu():
    """Claim deepspeed-zero3-estimator-adds-largest-layer: without offload, 4 bytes per parameter of the largest
    layer, not divided by the GPU count, on top of the 18 partitioned bytes."""
    _, stage3 = _estimators()
    params, largest = 13 * 10**9, 50257 * 5120
    for gpus in (1, 8, 64):
        _, gpu, layer = stage3.estimate_zero3_model_states_mem_needs(params, largest, gpus, 1, False, False)
        _, without, _ = stage3.estimate_zero3_model_states_mem_needs(params, 0, gpus, 1, False, False)
        assert layer == 4 * largest and gpu - without == 4 * largest
        assert without == int(18 * params / gpus)
    # *_all_live finds the largest layer as the most parameters one module holds itself
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 4)))
    total, layer = stage3.model_to_params(net)
    assert (total, layer) == (72 + 288 + 132, 288)


def test_the_estimators_host_figure_is_the_fp32_load_peak_of_every_process():
    """Claim deepspeed-estimator-host-is-fp32-load-peak: without offload the per-CPU figure is 4 bytes per parameter
    for each process of a node (GPUs per node) times additional_buffer_factor (1.5): ZeRO-2, and ZeRO-3 without
    zero_init; with zero_init ZeRO-3 builds one layer at a time, so it counts the largest layer."""
    stage_1_and_2, stage3 = _estimators()
    params, largest = 13 * 10**9, 50257 * 5120
    for gpus in (1, 8):
        for nodes in (1, 4):
            cpu, _ = stage_1_and_2.estimate_zero2_model_states_mem_needs(params, gpus, nodes, cpu_offload=False)
            assert cpu == int(params * 4 * gpus * 1.5)
            cpu, _, _ = stage3.estimate_zero3_model_states_mem_needs(params, largest, gpus, nodes, False, False,
                                                                     zero_init=False)
            assert cpu == int(params * 4 * gpus * 1.5)
            cpu, _, _ = stage3.estimate_zero3_model_states_mem_needs(params, largest, gpus, nodes, False, False,
                                                                     zero_init=True)
            assert cpu == int(largest * 4 * gpus * 1.5)


# -- torch: attention, saved tensors, recomputation, fake tensors -----------------------------------------------

def _saved_shapes(run):
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        out = run()
    return out, shapes


def test_fused_attention_keeps_no_scores():
    """Claim fused-attention-keeps-no-scores: torch's fused (flash) SDPA kernel, the one it picks on a CPU, saves
    q, k, v, the output and one logsumexp per row; the math kernel saves the s x s softmax."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, heads, seq, dim = 2, 4, 256, 16
    q, k, v = (torch.randn(batch, heads, seq, dim, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    def attention():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    default, default_saved = _saved_shapes(attention)
    assert "Flash" in type(default.grad_fn).__name__, type(default.grad_fn).__name__
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        _, flash_saved = _saved_shapes(attention)
    with sdpa_kernel([SDPBackend.MATH]):
        _, math_saved = _saved_shapes(attention)
    scores = batch * heads * seq * seq
    for saved in (default_saved, flash_saved):
        assert max(torch.Size(shape).numel() for shape in saved) <= batch * heads * seq * dim, saved
        assert (batch, heads, seq) in saved  # the logsumexp
    assert any(torch.Size(shape).numel() >= scores for shape in math_saved), math_saved


def test_saved_tensors_hooks_see_every_tensor_autograd_saves():
    """Claim saved-tensors-hooks-see-everything-saved: the pack hook gets each tensor the graph's nodes keep
    (their _saved_* fields), and nothing else."""
    x = torch.randn(3, 5, requires_grad=True)
    w = torch.randn(5, 7, requires_grad=True)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        y = torch.nn.functional.gelu(torch.tanh(x @ w) * x.sum()).softmax(-1)
    kept, seen, todo = [], set(), [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if name.startswith("_saved_") and torch.is_tensor(getattr(node, name)):
                kept.append(getattr(node, name))
        todo += [next_node for next_node, _ in node.next_functions]
    key = sorted((t.data_ptr(), tuple(t.shape)) for t in kept)
    assert len(kept) >= 5 and key == sorted((t.data_ptr(), tuple(t.shape)) for t in packed)


def test_fake_tensor_mode_runs_a_training_step_without_the_memory():
    """Claim fake-tensor-mode-allocates-no-storage: under FakeTensorMode a model of 8.6 GB in bf16 (parameters and
    gradients) builds, runs forward and backward, and gets gradients of the right shapes, while the process's memory
    hardly grows."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    process = psutil.Process()
    before = process.memory_info().rss
    with FakeTensorMode():
        net = torch.nn.Sequential(*[torch.nn.Linear(32768, 32768, bias=False, dtype=torch.bfloat16) for _ in (1, 2)])
        x = torch.randn(4, 32768, dtype=torch.bfloat16)
        net(x).float().square().mean().backward()
    grads = [p.grad for p in net.parameters()]
    assert all(isinstance(g, FakeTensor) and g.shape == (32768, 32768) for g in grads)
    assert sum(g.numel() * g.element_size() for g in grads) == 2 * 32768 * 32768 * 2
    assert process.memory_info().rss - before < 256 * 2**20


# -- transformers' Llama ------------------------------------------------------------------------------------------

def _tiny_llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                       num_hidden_layers=1, vocab_size=1000, attn_implementation="sdpa")


def test_llama_rmsnorm_keeps_an_fp32_copy_of_its_input():
    """Claim hf-rmsnorm-keeps-fp32-input: in a bf16 model each LlamaRMSNorm saves an fp32 tensor of its input's
    shape for backward."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(64).to(torch.bfloat16)
    hidden = torch.randn(2, 16, 64, dtype=torch.bfloat16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((tuple(t.shape), t.dtype)) or t,
                                                  lambda t: t):
        out = norm(hidden)
    assert out.dtype == torch.bfloat16
    assert ((2, 16, 64), torch.float32) in saved, saved


def test_llama_backward_starts_with_fp32_gradients_over_the_whole_vocabulary():
    """Claim hf-causal-lm-loss-fp32-vocabulary-gradient: LlamaForCausalLM in bf16 computes its loss on logits
    upcast to fp32, so backward's first large tensor is an fp32 gradient of batch x sequence x vocabulary."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import LlamaForCausalLM

    class Outputs(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.made = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in out if isinstance(out, (tuple, list)) else [out]:
                if torch.is_tensor(tensor):
                    self.made.append((tensor.numel(), tensor.dtype))
            return out

    torch.manual_seed(0)
    config = _tiny_llama_config()
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    ids = torch.randint(0, config.vocab_size, (2, 16))
    result = model(input_ids=ids, labels=ids)
    assert result.logits.dtype == torch.bfloat16 and result.loss.dtype == torch.float32
    with Outputs() as backward:
        result.loss.backward()
    vocabulary = 2 * 16 * config.vocab_size
    first_large = next(made for made in backward.made if made[0] >= vocabulary)
    assert first_large == (vocabulary, torch.float32), backward.made[:10]


# -- DeepSpeed on 2 CPU ranks ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ranks():
    from zerolab.handmade.core import harness

    with probe_launcher():
        return harness.run({"kind": "claim_runs_01:zero_on_two_ranks"}, RANKS, timeout=300, progress=False)


@pytest.mark.slow
def test_zero2_keeps_only_the_ranks_gradient_partition(ranks):
    """Claim zero2-keeps-only-the-gradient-partition: with 2 micro-steps a step, stage 2 holds Ψ/N gradient elements
    after every micro-step's backward; stage 1 holds all Ψ until the boundary (then its partition)."""
    for rank in ranks:
        psi = rank["params"]
        assert rank["gradients"]["2"] == [psi // RANKS] * 4, rank["gradients"]
        assert rank["gradients"]["1"] == [psi, psi // RANKS] * 2, rank["gradients"]


@pytest.mark.slow
def test_no_zero_stage_partitions_the_activations(ranks):
    """Claim zero-does-not-partition-activations: at stages 1, 2 and 3 each rank's forward saves the activations of
    its whole micro-batch, byte for byte what a plain copy of the model saves."""
    for rank in ranks:
        for stage in ("1", "2", "3"):
            saved = rank["activations"][stage]
            assert saved["plain"] > 0 and saved["zero"] == saved["plain"], (stage, saved)


@pytest.mark.slow
def test_zero3_gathers_for_forward_and_again_for_backward_beyond_its_reuse_limits(ranks):
    """Claim zero3-gathers-again-for-backward: every step with stage3_max_live_parameters and
    stage3_max_reuse_distance at 0, and the first step with the defaults, all-gather all Ψ in forward and all Ψ
    again in backward; after the first step the defaults (1e9 elements each) keep this small model gathered from
    forward to backward."""
    for rank in ranks:
        psi = rank["wide_params"]
        assert rank["gathers"]["live 0 reuse 0"] == [{"forward": psi, "backward": psi}] * 3
        assert rank["gathers"]["defaults"] == [{"forward": psi, "backward": psi}] + [{"forward": psi, "backward": 0}] * 2
