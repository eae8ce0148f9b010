"""The simulated step itself (torch and transformers are imported here only): see zerolab.sizing.simulate."""
import contextlib
import warnings
from unittest import mock

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class ActivationPeakTracker(MemTracker):
    """MemTracker that also follows the largest ACT + TEMP (what is neither a parameter, a gradient nor a state)."""

    activation_peak = 0
    activation_peak_phase = "forward"

    def _update_peak_stats(self, peak_state):
        super()._update_peak_stats(peak_state)
        for snapshot in self._curr_mem_snap.values():
            live = snapshot[_MemRefType.ACT] + snapshot[_MemRefType.TEMP]
            if live > self.activation_peak:
                self.activation_peak = live
                self.activation_peak_phase = "backward" if self._mod_tracker.is_bw else "forward"


def build_model(config, attention, precision, layers=None):
    """The transformers model of ``config`` (a dict); call under FakeTensorMode."""
    from transformers import AutoConfig, AutoModelForCausalLM
    fields = {key: value for key, value in config.items() if key != "model_type"}
    hf_config = AutoConfig.for_model(config["model_type"], **fields)
    if layers is not None:
        hf_config.num_hidden_layers = layers
    hf_config.use_cache = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_config(hf_config, dtype=DTYPES[precision], attn_implementation=attention)


def enable_recompute(model):
    kwargs = {"use_reentrant": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _decoder_layers(model):
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) and "Layer" in type(module[0]).__name__:
            return module
        if isinstance(module, torch.nn.ModuleList) and len(module) and "Block" in type(module[0]).__name__:
            return module
    return []


def _report_progress(layers, progress):
    total = len(layers)

    def forward_hook(module, args, output, index):
        progress(f"forward, layer {index + 1}/{total}")
        hidden = output[0] if isinstance(output, tuple) else output
        if torch.is_tensor(hidden) and hidden.requires_grad:
            hidden.register_hook(lambda grad: progress(f"backward, layer {index + 1}/{total}"))

    for index, layer in enumerate(layers):
        layer.register_forward_hook(lambda m, a, o, i=index: forward_hook(m, a, o, i))


@contextlib.contextmanager
def _unpacked_sequences():
    """Hugging Face reads position_ids' values to detect packed sequences; fake tensors have none, so it would build
    an s x s mask. Each row here is one sequence, which a real run finds out, and then SDPA gets is_causal, no mask."""
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    if not hasattr(masking_utils, "find_packed_sequence_indices"):
        yield
        return
    with mock.patch.object(masking_utils, "find_packed_sequence_indices", lambda *args, **kwargs: None):
        yield


@contextlib.contextmanager
def _quiet_transformers():
    from transformers.utils import logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def run_step(config, progress, seq_len, micro_batch, attention, recompute, precision, layers=None, fake=True):
    """Forward, loss and backward once under FakeTensorMode; the peak bytes MemTracker saw.

    ``fake=False`` runs the same step on real CPU tensors (tests compare the two on a tiny model)."""
    fake_mode = (FakeTensorMode(), _unpacked_sequences()) if fake else ()
    with contextlib.ExitStack() as stack:
        for context in (*fake_mode, _quiet_transformers()):
            stack.enter_context(context)
        progress("building the model", force=True)
        model = build_model(config, attention, precision, layers)
        model.train()
        if recompute == "full":
            enable_recompute(model)
        decoder_layers = _decoder_layers(model)
        _report_progress(decoder_layers, progress)
        ids = torch.randint(0, model.config.vocab_size, (micro_batch, seq_len))
        tracker = ActivationPeakTracker()
        tracker.track_external(model)
        with tracker:
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss  # the outputs go, as in Trainer
            loss.backward()
        progress("done", force=True)
        (device_peak,) = tracker.get_tracker_snapshot("peak").values()
    return {"layers": len(decoder_layers), "activation_peak_bytes": int(tracker.activation_peak),
            "activation_peak_phase": tracker.activation_peak_phase,
            "peak": {getattr(key, "name", key): int(value) for key, value in device_peak.items()}}
