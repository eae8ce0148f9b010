"""Lesson 09's hand-written answers, in other styles than the solution: the validation report of 09 grades each one
through its exercise's test cell (zerolab.grading.variants.LESSON_HANDWRITTEN). A wrong answer must score 0, a
right one full points.
"""

FILE_BYTES = {
    "wrong": {
        "counted_values_not_bytes": '''def checkpoint_file_bytes(params, stage, ranks):
    return {"model_states": 0 if stage == 3 else params, "optimizer_states": 3 * params / ranks}
''',
        "master_weights_left_out": '''def checkpoint_file_bytes(params, stage, ranks):
    return {"model_states": 0 if stage == 3 else 2 * params, "optimizer_states": 8 * params / ranks}
''',
        "optimizer_states_not_partitioned": '''def checkpoint_file_bytes(params, stage, ranks):
    return {"model_states": 0 if stage == 3 else 2 * params, "optimizer_states": 12 * params}
''',
        "module_saved_in_fp32": '''def checkpoint_file_bytes(params, stage, ranks):
    return {"model_states": 0 if stage == 3 else 4 * params, "optimizer_states": 12 * params / ranks}
''',
        "module_partitioned_at_every_stage": '''def checkpoint_file_bytes(params, stage, ranks):
    return {"model_states": 2 * params / ranks, "optimizer_states": 12 * params / ranks}
''',
        "stage_3_module_whole": '''def checkpoint_file_bytes(params, stage, ranks):
    return {"model_states": 2 * params, "optimizer_states": 12 * params / ranks}
''',
    },
    "right": {
        "bytes_per_value_named": '''BYTES = {"bf16": 2, "fp32": 4}


def checkpoint_file_bytes(params, stage, ranks):
    module = 0 if stage >= 3 else params * BYTES["bf16"]
    master_and_moments = 3 * params * BYTES["fp32"]
    return {"optimizer_states": master_and_moments // ranks, "model_states": module}
''',
        "one_expression_per_file": '''def checkpoint_file_bytes(params, stage, ranks):
    optimizer = (4 + 4 + 4) * params / ranks
    return dict(model_states={3: 0}.get(stage, 2 * params), optimizer_states=optimizer)
''',
    },
}

DIAGNOSIS = {
    "wrong": {"letter_a": 'DIAGNOSIS = "A"\n', "letter_b": 'DIAGNOSIS = "B"\n', "letter_d": 'DIAGNOSIS = "D"\n',
              "not_a_choice": 'DIAGNOSIS = "E"\n', "a_number": "DIAGNOSIS = 3\n"},
    "right": {"lower_case_with_spaces": 'DIAGNOSIS = " c "\n', "indexed": 'DIAGNOSIS = "ABCD"[2]\n'},
}

CONSOLIDATE = {
    "wrong": {
        "tag_typed_in": '''def consolidate(checkpoint_dir):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag="global_step2")
''',
        "rank_0_module_file": '''def consolidate(checkpoint_dir):
    import os

    import torch

    tag = open(os.path.join(checkpoint_dir, "latest")).read().strip()
    saved = torch.load(os.path.join(checkpoint_dir, tag, "zero_pp_rank_0_mp_rank_00_model_states.pt"),
                       weights_only=False)
    return {name: tensor.float() for name, tensor in saved["module"].items()}
''',
        "kept_in_bf16": '''def consolidate(checkpoint_dir):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir)
    return {name: tensor.bfloat16() for name, tensor in state.items()}
''',
        "first_parameter_dropped": '''def consolidate(checkpoint_dir):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir)
    return dict(list(state.items())[1:])
''',
        "step_counter_added": '''def consolidate(checkpoint_dir):
    import torch
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir)
    state["global_step"] = torch.tensor(2.0)
    return state
''',
    },
    "right": {
        "tag_read_from_latest": '''def consolidate(checkpoint_dir):
    import os

    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    with open(os.path.join(checkpoint_dir, "latest")) as handle:
        tag = handle.read().strip()
    return get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=tag)
''',
        "copied_into_a_plain_dict": '''from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint as fp32_state


def consolidate(checkpoint_dir):
    return {name: tensor.float() for name, tensor in fp32_state(checkpoint_dir).items()}
''',
    },
}

SAVE_CONFIG = {
    "wrong": {
        "input_changed": '''def zero3_save_config(config):
    config.setdefault("zero_optimization", {}).update(stage=3, stage3_gather_16bit_weights_on_model_save=True)
    return config
''',
        "shallow_copy": '''def zero3_save_config(config):
    config = dict(config)
    zero = config.setdefault("zero_optimization", {})
    zero["stage"] = 3
    zero["stage3_gather_16bit_weights_on_model_save"] = True
    return config
''',
        "gather_key_at_the_top_level": '''import copy


def zero3_save_config(config):
    config = copy.deepcopy(config)
    config["zero_optimization"]["stage"] = 3
    config["stage3_gather_16bit_weights_on_model_save"] = True
    return config
''',
        "zero_block_replaced": '''import copy


def zero3_save_config(config):
    config = copy.deepcopy(config)
    config["zero_optimization"] = {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}
    return config
''',
        "stage_left_as_given": '''import copy


def zero3_save_config(config):
    config = copy.deepcopy(config)
    config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    return config
''',
    },
    "right": {
        "json_round_trip": '''import json


def zero3_save_config(config):
    config = json.loads(json.dumps(config))
    config["zero_optimization"] = {**config.get("zero_optimization", {}), "stage": 3,
                                   "stage3_gather_16bit_weights_on_model_save": True}
    return config
''',
        "one_expression": '''def zero3_save_config(config):
    zero = dict(config.get("zero_optimization", {}), stage=3, stage3_gather_16bit_weights_on_model_save=True)
    return {**config, "zero_optimization": zero}
''',
    },
}

_CONVERT = '''    ds_to_universal.main(argparse.Namespace(
        input_folder=os.path.join(checkpoint_dir, tag), output_folder={output},
        num_extract_workers={workers}, num_merge_workers={workers}, keep_temp_folder={keep}, strict=True,
        inject_missing_state=False))'''


def _prepare_resume(tag="open(os.path.join(checkpoint_dir, 'latest')).read().strip()",
                    output="os.path.join(universal_dir, tag)", workers=1, keep=False,
                    resume='config = copy.deepcopy(config)\n    config["checkpoint"] = {"load_universal": True}'):
    return f'''import argparse
import copy
import os

from deepspeed.checkpoint import ds_to_universal


def prepare_resume(checkpoint_dir, universal_dir, config):
    tag = {tag}
{_CONVERT.format(output=output, workers=workers, keep=keep)}
    {resume}
    return config
'''


PREPARE_RESUME = {
    "wrong": {
        "tag_typed_in": _prepare_resume(tag='"global_step2"'),
        "no_tag_folder_in_the_output": _prepare_resume(output="universal_dir"),
        "universal_load_not_asked_for": _prepare_resume(resume="config = copy.deepcopy(config)"),
        "input_changed": _prepare_resume(resume='config["checkpoint"] = {"load_universal": True}'),
        "scratch_folder_kept": _prepare_resume(keep=True),
        "two_workers_each": _prepare_resume(workers=2),
    },
    "right": {
        "the_command_line_tool": '''import os
import subprocess
import sys


def prepare_resume(checkpoint_dir, universal_dir, config):
    with open(os.path.join(checkpoint_dir, "latest")) as handle:
        tag = handle.read().strip()
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal",
                    "--input_folder", os.path.join(checkpoint_dir, tag),
                    "--output_folder", os.path.join(universal_dir, tag),
                    "--num_extract_workers", "1", "--num_merge_workers", "1"], check=True, capture_output=True)
    return dict(config, checkpoint={"load_universal": True})
''',
        "pathlib_and_a_new_dict": '''import argparse
from pathlib import Path

from deepspeed.checkpoint import ds_to_universal


def prepare_resume(checkpoint_dir, universal_dir, config):
    tag = (Path(checkpoint_dir) / "latest").read_text().strip()
    arguments = dict(input_folder=str(Path(checkpoint_dir) / tag), output_folder=str(Path(universal_dir) / tag),
                     num_extract_workers=1, num_merge_workers=1, keep_temp_folder=False, strict=True,
                     inject_missing_state=False)
    ds_to_universal.main(argparse.Namespace(**arguments))
    return {**config, "checkpoint": {**config.get("checkpoint", {}), "load_universal": True}}
''',
    },
}

VALIDATION = {"ex1_file_bytes": FILE_BYTES, "ex2_diagnosis": DIAGNOSIS, "ex3_consolidate": CONSOLIDATE,
              "ex4_zero3_save_config": SAVE_CONFIG, "ex5_prepare_resume": PREPARE_RESUME}
