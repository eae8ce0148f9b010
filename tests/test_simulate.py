"""zerolab.sizing.simulate (HF models under FakeTensorMode) against real runs, and the 'hf' activation formula against it."""
import itertools
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from zerolab.engine.activations import activation_memory
from zerolab.errors import UserError
from zerolab.sizing.hf_models import HF_CONFIGS, load_hf_config
from zerolab.engine.models import PRESETS, from_hf_config
from zerolab.sizing.simulate import Simulation, _Progress, simulate

TOLERANCE = 0.03  # the bar for the formula against the simulation
TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512,
        "tie_word_embeddings": False}
# Real widths, few layers: MHA (Llama-2 13B), grouped-query attention with a 128k vocabulary (Llama-3 8B), all SwiGLU.
ARCHITECTURES = [("llama2-13b", 2), ("llama3-8b", 3)]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROLAB_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_a_fake_step_allocates_what_a_real_step_does(attention, recompute):
    """The same tiny model on real CPU tensors: FakeTensorMode (and its unpacked-sequence answer) changes nothing."""
    from zerolab.sizing.simulate_run import run_step
    quiet = lambda *args, **kwargs: None  # noqa: E731
    fake = run_step(TINY, quiet, 128, 2, attention, recompute, "bf16", fake=True)
    real = run_step(TINY, quiet, 128, 2, attention, recompute, "bf16", fake=False)
    assert fake["activation_peak_bytes"] == real["activation_peak_bytes"] > 0
    assert fake["peak"] == real["peak"]


@pytest.mark.parametrize("name, layers", ARCHITECTURES)
@pytest.mark.parametrize("seq_len", [1024, 4096])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_hf_formula_is_within_3_percent_of_the_simulated_peak(name, layers, seq_len, attention, recompute):
    simulated = simulate(name, seq_len, 1, attention, recompute, layers=layers, progress=False)
    model = replace(from_hf_config(HF_CONFIGS[name], name), layers=layers)
    formula = activation_memory(model, seq_len, 1, "bf16", attention, recompute, implementation="hf")
    assert formula.total_bytes == pytest.approx(simulated.activation_peak_bytes, rel=TOLERANCE)


@pytest.mark.parametrize("attention, recompute", [("sdpa", "none"), ("eager", "full")])
def test_hf_formula_at_micro_batch_2_and_fp32(attention, recompute):
    model = replace(from_hf_config(HF_CONFIGS["mistral-7b"]), layers=2)
    for micro_batch, precision in ((2, "bf16"), (1, "fp32")):
        simulated = simulate("mistral-7b", 2048, micro_batch, attention, recompute, precision, layers=2,
                             progress=False)
        formula = activation_memory(model, 2048, micro_batch, precision, attention, recompute, implementation="hf")
        assert formula.total_bytes == pytest.approx(simulated.activation_peak_bytes, rel=TOLERANCE)


def test_the_grid_reaches_every_peak_moment():
    """The formula test above checks each of the formula's moments only if the peak falls at each somewhere in it."""
    moments = set()
    for name, layers in ARCHITECTURES:
        model = replace(from_hf_config(HF_CONFIGS[name], name), layers=layers)
        for seq_len, attention, recompute in itertools.product([1024, 4096], ["sdpa", "eager"], ["none", "full"]):
            moments.add(activation_memory(model, seq_len, 1, "bf16", attention, recompute, implementation="hf").moment)
    assert moments == {"loss", "output_layer", "last_layer"}


def test_flash_and_standard_name_sdpa_and_eager_for_hf():
    model = PRESETS["llama2-7b"]
    assert activation_memory(model, 2048, 1, attention="flash", implementation="hf") == \
        activation_memory(model, 2048, 1, attention="sdpa", implementation="hf")
    assert activation_memory(model, 2048, 1) == activation_memory(model, 2048, 1, implementation="megatron")


@pytest.mark.parametrize("kwargs, needle", [(dict(model=PRESETS["gpt3-1.3b"]), "megatron"),
                                            (dict(recompute="selective"), "recompute"),
                                            (dict(implementation="deepspeed"), "implementation")])
def test_hf_refuses_what_it_does_not_model(kwargs, needle):
    args = dict(model=PRESETS["llama2-7b"], seq_len=1024, micro_batch=1, implementation="hf") | kwargs
    with pytest.raises(ValueError, match=needle):
        activation_memory(**args)


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_a_simulated_model_has_the_decoder_s_parameters(name):
    """Parameter bytes MemTracker counts in the transformers model = 2 x from_hf_config's count (bf16)."""
    simulated = simulate(name, 128, 1, layers=2, progress=False)
    model = replace(from_hf_config(HF_CONFIGS[name]), layers=2)
    assert simulated.peak["PARAM"] == 2 * model.params()


@pytest.mark.parametrize("name", [name for name in HF_CONFIGS if name in PRESETS])
def test_from_hf_config_matches_the_preset_and_its_published_count(name):
    decoder, preset = from_hf_config(HF_CONFIGS[name], name), PRESETS[name]
    assert replace(decoder, published_params=preset.published_params) == preset
    assert decoder.params() == preset.published_params


@pytest.mark.parametrize("name, published", [("mistral-7b", 7_248_023_552), ("gpt2", 124_439_808),
                                             ("tinyllama-1.1b", 1_100_048_384)])
def test_from_hf_config_of_models_without_a_preset(name, published):
    """Mistral-7B-v0.3's and TinyLlama-1.1B's safetensors totals, and GPT-2 small's count."""
    assert from_hf_config(HF_CONFIGS[name]).params() == published


@pytest.mark.parametrize("change, needle", [(dict(model_type="t5"), "model_type"), (dict(head_dim=96), "head_dim"),
                                            (dict(attention_bias=True), "bias")])
def test_from_hf_config_refuses_what_a_decoder_cannot_describe(change, needle):
    with pytest.raises(ValueError, match=needle):
        from_hf_config(HF_CONFIGS["llama2-7b"] | change)


def test_a_second_call_is_read_from_the_cache(tmp_path):
    first = simulate("llama2-7b", 512, 1, layers=2, progress=False)
    second = simulate("llama2-7b", 512, 1, layers=2, progress=False)
    assert not first.cached and second.cached
    assert replace(second, cached=False) == first
    other = simulate("llama2-7b", 512, 2, layers=2, progress=False)
    assert not other.cached and other.activation_peak_bytes > first.activation_peak_bytes


def test_a_config_json_path_simulates_like_the_preset(tmp_path):
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(HF_CONFIGS["llama3-8b"]))
    from_path = simulate(str(folder / "config.json"), 256, 1, layers=2, progress=False, cache=False)
    from_folder = simulate(str(folder), 256, 1, layers=2, progress=False)
    preset = simulate("llama3-8b", 256, 1, layers=2, progress=False)
    assert from_path.name == from_folder.name == "my-llama"
    assert from_path.activation_peak_bytes == from_folder.activation_peak_bytes == preset.activation_peak_bytes


def test_bad_sources_are_user_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="missing file"):
        load_hf_config(str(tmp_path / "nothing" / "config.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable config"):
        load_hf_config(str(tmp_path / "bad.json"))
    (tmp_path / "plain.json").write_text("{}")
    with pytest.raises(UserError, match="not a Hugging Face config"):
        load_hf_config(str(tmp_path / "plain.json"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="offline"):
        load_hf_config("meta-llama/Llama-2-7b-hf")
    with pytest.raises(UserError, match="unknown model"):
        load_hf_config("llama-13")


@pytest.mark.parametrize("kwargs, needle", [(dict(seq_len=0), "seq_len"), (dict(attention="flash"), "attention"),
                                            (dict(recompute="selective"), "recompute"), (dict(layers=0), "layers")])
def test_bad_options_name_the_field(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        simulate("llama2-7b", **(dict(seq_len=128) | kwargs))


def test_progress_goes_to_stderr_after_its_delay(capsys):
    import time
    progress = _Progress(True, time.monotonic() - 5, delay=1.0, every=0.0)
    progress("forward, layer 3/40")
    _Progress(True, time.monotonic(), delay=60.0)("not yet")
    captured = capsys.readouterr()
    assert "forward, layer 3/40" in captured.err and "not yet" not in captured.err and captured.out == ""


def test_simulation_is_plain_data():
    result = simulate("llama2-7b", 128, 1, layers=2, progress=False)
    assert Simulation(**json.loads(json.dumps(result.as_dict()))) == result


def test_commands_that_do_not_simulate_do_not_import_transformers():
    command = ["-X", "importtime", "-m", "zerolab", "estimate", "--params", "7B", "--gpus-per-node", "8"]
    result = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "zerolab.cli.main" in imported  # the probe sees the command's imports
    assert not {name for name in imported if name.split(".")[0] == "transformers" or name == "zerolab.sizing.simulate_run"}
