"""Answers for the feedback regression suite (tests/test_feedback_regression.py).

VARIANTS[lesson][exercise grade_id] = {"wrong": [(cell source, words its message must contain), ...],
                                       "right": [cell source, ...]}
A wrong answer must score 0 on its test cell with an AssertionError whose message contains the words (the mistake
class first: "wrong type", "wrong unit", "wrong case", "missing key", "off limits", ...); the words may be a pair
(words, words the message must not contain). No wrong answer's message may contain the expected value. A right answer, written in another
style than the course's solution, must earn the cell's full points.
"""

L01 = {
    "ex1_model_state_bytes": {
        "wrong": [
            ("def model_state_bytes(params):\n    return [2 * params, 2 * params, 4 * params, 8 * params]\n",
             "wrong type: model_state_bytes(1000) should be a dict"),
            ("def model_state_bytes(params):\n    return {'Params': 2 * params, 'Grads': 2 * params,"
             " 'Master_weights': 4 * params, 'Optimizer_states': 8 * params}\n", "wrong case"),
            ("def model_state_bytes(params):\n    return {'params': 2 * params, 'grads': 2 * params,"
             " 'optimizer_states': 12 * params}\n", "missing key"),
            ("def model_state_bytes(params):\n    return {'params': params, 'grads': params,"
             " 'master_weights': params, 'optimizer_states': 2 * params}\n", "elements"),
            ("def model_state_bytes(params):\n    return {'params': str(2 * params), 'grads': str(2 * params),"
             " 'master_weights': str(4 * params), 'optimizer_states': str(8 * params)}\n", "wrong type"),
            ("def model_state_bytes(params):\n    return {'params': 2 * params, 'grads': 2 * params,"
             " 'master_weights': 4 * params, 'optimizer_states': 12 * params}\n", "two fp32 tensors"),
        ],
        "right": [
            "def model_state_bytes(params):\n    sizes = dict(params=2, grads=2, master_weights=4, optimizer_states=4 + 4)\n"
            "    return {name: size * params for name, size in sizes.items()}\n",
            "def model_state_bytes(params):\n    return {'params': 2.0 * params, 'grads': 2.0 * params,"
            " 'master_weights': 4.0 * params, 'optimizer_states': 8.0 * params}\n",
            "def model_state_bytes(params):\n    fp16, fp32 = 2, 4\n    out = {}\n    out['params'] = fp16 * params\n"
            "    out['grads'] = fp16 * params\n    out['master_weights'] = fp32 * params\n"
            "    out['optimizer_states'] = 2 * fp32 * params\n    return out\n",
        ],
    },
    "ex2_per_gpu_bytes": {
        "wrong": [
            ("def per_gpu_bytes(params, stage, gpus):\n    p, g, o = 2 * params, 2 * params, 12 * params\n"
             "    o = o / gpus if stage >= 1 else o\n    g = g / gpus if stage >= 2 else g\n"
             "    p = p / gpus if stage >= 3 else p\n    return (p + g + o) / 1e9\n", "wrong unit"),
            ("def per_gpu_bytes(params, stage, gpus):\n    return f'{16 * params} bytes'\n", "wrong type"),
            ("def per_gpu_bytes(params, stage, gpus):\n    if stage == 2:\n        return 2 * params + 6 * params / gpus\n"
             "    p, g, o = 2 * params, 2 * params, 12 * params\n    o = o / gpus if stage >= 1 else o\n"
             "    g = g / gpus if stage >= 2 else g\n    p = p / gpus if stage >= 3 else p\n    return p + g + o\n",
             "nothing to partition"),
            ("def per_gpu_bytes(params, stage, gpus):\n    p, g, o = 2 * params, 2 * params, 12 * params\n"
             "    o = o / gpus if stage >= 1 else o\n    g = g / gpus if stage >= 1 else g\n"
             "    p = p / gpus if stage >= 3 else p\n    return p + g + o\n", "stage 2 partitions more"),
            ("import numpy as np\ndef per_gpu_bytes(params, stage, gpus):\n    p, g, o = 2 * params, 2 * params, 12 * params\n"
             "    o = o / gpus if stage >= 1 else o\n    g = g / gpus if stage >= 2 else g\n"
             "    p = p / gpus if stage >= 3 else p\n    return np.float64(p + g + o)\n", "wrong type"),
            ("def per_gpu_bytes(params, stage, gpus):\n    return 16 * params / gpus if stage else 16 * params\n",
             "stage 2 partitions more"),
        ],
        "right": [
            "def per_gpu_bytes(params, stage, gpus):\n    part = -(-params // gpus)  # DeepSpeed pads partitions\n"
            "    p = 2 * (part if stage >= 3 else params)\n    g = 2 * (part if stage >= 2 else params)\n"
            "    o = 12 * (part if stage >= 1 else params)\n    return p + g + o\n",
            "def per_gpu_bytes(params, stage, gpus):\n    kept = [2, 2, 12]\n    for i in range(stage):\n"
            "        kept[2 - i] /= gpus\n    return sum(kept) * params\n",
            "def per_gpu_bytes(params, stage, gpus):\n    return int(sum(b * params // (gpus if stage > i else 1)"
            " for i, b in enumerate((12, 2, 2))))\n",
        ],
    },
    "ex3_fraction_kept": {
        "wrong": [
            ("def fraction_kept(stage, gpus):\n    kept = (2 / gpus if stage >= 3 else 2) + (2 / gpus if stage >= 2 else 2)"
             " + (12 / gpus if stage >= 1 else 12)\n    return 100 * kept / 16\n", "percentage"),
            ("def fraction_kept(stage, gpus):\n    kept = (2 / gpus if stage >= 3 else 2) + (2 / gpus if stage >= 2 else 2)"
             " + (12 / gpus if stage >= 1 else 12)\n    return 1 - kept / 16\n", "fraction saved"),
            ("def fraction_kept(stage, gpus):\n    return '1/8'\n", "wrong type"),
            ("def fraction_kept(stage, gpus):\n    return [1.0, 0.75, 0.4, 0.15][stage] if stage < 3 else 1 / gpus\n",
             "popular figure"),
            ("def fraction_kept(stage, gpus):\n    kept = (2 / gpus if stage >= 3 else 2) + (2 / gpus if stage >= 1 else 2)"
             " + (12 / gpus if stage >= 1 else 12)\n    return kept / 16\n", "each stage keeps less"),
            ("from zerolab.engine import memory as m\ndef fraction_kept(stage, gpus):\n"
             "    return m.estimate(10**9, stage, gpus_per_node=gpus).gpu_bytes / m.estimate(10**9, 0).gpu_bytes\n",
             "off limits"),
        ],
        "right": [
            "def fraction_kept(stage, gpus):\n    per_param = [16, 4 + 12 / gpus, 2 + 14 / gpus, 16 / gpus]\n"
            "    return per_param[stage] / per_param[0]\n",
            "def fraction_kept(stage, gpus):\n    return per_gpu_bytes(10**9, stage, gpus) / per_gpu_bytes(10**9, 0, gpus)\n",
            # the answer: one parameter is enough for a ratio
            "def fraction_kept(stage, gpus):\n    return per_gpu_bytes(1, stage, gpus) / per_gpu_bytes(1, 0, gpus)\n",
            "from fractions import Fraction\ndef fraction_kept(stage, gpus):\n"
            "    k = [Fraction(2), Fraction(2), Fraction(12)]\n    for i in range(stage):\n        k[2 - i] /= gpus\n"
            "    return float(sum(k) / 16)\n",
        ],
    },
    "ex4_deepspeed_zero2_gib": {
        "wrong": [
            ("def deepspeed_zero2_gib(params, gpus):\n    return (2 * params + 18 * params / gpus) / 1e9\n", "wrong unit"),
            ("def deepspeed_zero2_gib(params, gpus):\n    return 2 * params + 18 * params / gpus\n", "wrong unit"),
            ("def deepspeed_zero2_gib(params, gpus):\n    return (2 * params + 14 * params / gpus) / 2**30\n",
             "than the paper"),
            ("def deepspeed_zero2_gib(params, gpus):\n    return round((2 * params + 18 * params / gpus) / 2**30, 2)\n",
             "rounding"),
            ("def deepspeed_zero2_gib(params, gpus):\n    return f'{(2 * params + 18 * params / gpus) / 2**30:.1f} GB'\n",
             "wrong type"),
            ("def deepspeed_zero2_gib(params, gpus):\n    g = (2 * params + 18 * params / gpus) / 2**30\n"
             "    return (g * 2, g)\n", "wrong type"),
            ("import os\nos.environ.setdefault('DS_ACCELERATOR', 'cpu')\n"
             "from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as f\n"
             "def deepspeed_zero2_gib(params, gpus):\n"
             "    return f(params, num_gpus_per_node=gpus, num_nodes=1, cpu_offload=False)[1] / 1024**3\n", "off limits"),
        ],
        "right": [
            "def deepspeed_zero2_gib(params, gpus):\n    return (2 + 18 / gpus) * params / 2**30\n",
            "def deepspeed_zero2_gib(params, gpus):\n    whole, partitioned = 2 * params, 18 * params // gpus\n"
            "    return (whole + partitioned) / 1024**3\n",
            "def deepspeed_zero2_gib(params, gpus):\n    return round((2 * params + 18 * params // gpus) / GiB, 3)\n",
        ],
    },
}



def _path(letter, value):
    return f"WRONG_PATH_{letter} = {value}\n"


_FIXED = ('{"train_batch_size": %s, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, '
          '"%s": {"enabled": True}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"%s}, '
          '"offload_param": {"device": "cpu"}%s}}')


def _fixed(batch="64", precision="bf16", nvme=', "nvme_path": "/local_nvme"', extra=""):
    return "FIXED = " + _FIXED % (batch, precision, nvme, extra) + "\n"


L05 = {
    "ex1_path_a": {
        "wrong": [(_path("A", '["zero_optimisation"]'), "wrong type"), (_path("A", "1"), "wrong type"),
                  (_path("A", '"train_batch_size"'), "does not point at the problem"),
                  (_path("A", '"bf16.enabled"'), "does not point at the problem"),
                  (_path("A", '""'), "is empty"), (_path("A", '"stage"'), "does not point at the problem")],
        "right": [_path("A", '"zero_optimization"'), _path("A", '" Zero_Optimisation "'),
                  _path("A", '\'["zero_optimisation"]\'')],
    },
    "ex1_path_b": {
        "wrong": [(_path("B", '"offload_param"'), "incomplete path"), (_path("B", "None"), "wrong type"),
                  (_path("B", '"zero_optimization.offload_optimizer"'), "does not point at the problem"),
                  (_path("B", '"fp16.loss_scale"'), "does not point at the problem"),
                  (_path("B", '{"B": "zero_optimization.offload_param"}'), "wrong type")],
        "right": [_path("B", '"zero_optimization.stage"'), _path("B", '\'zero_optimization["offload_param"]\''),
                  _path("B", '"ZERO_OPTIMIZATION.OFFLOAD_PARAM"')],
    },
    "ex1_path_c": {
        "wrong": [(_path("C", '"nvme_path"'), "incomplete path"), (_path("C", "3"), "wrong type"),
                  (_path("C", '"zero_optimization.offload_param"'), "does not point at the problem"),
                  (_path("C", '"bf16"'), "does not point at the problem"),
                  (_path("C", '"train_batch_size"'), "does not point at the problem")],
        "right": [_path("C", '"zero_optimization.offload_optimizer"'),
                  _path("C", '"zero_optimization/offload_optimizer/nvme_path"'),
                  _path("C", '"zero_optimization.offload_optimizer.device"')],
    },
    "ex2_fix_config": {
        "wrong": [("import json\n" + _fixed().replace("FIXED = ", "FIXED = json.dumps(") .rstrip() + ")\n",
                   "wrong type"),
                  (_fixed(nvme=""), "still finds errors"),
                  (_fixed(precision="fp16"), "wanted bf16"),
                  (_fixed(nvme=', "nvme_path": "/mnt/nvme"'), "is not the folder"),
                  (_fixed(batch="8"), "still finds errors"),
                  (_fixed(extra=', "stage3_prefetch_bucket_size": "auto"'), "still warns")],
        "right": [_fixed(nvme=', "nvme_path": "/local_nvme/"'),
                  _fixed().replace('"train_batch_size": 64, ', ""),
                  "import copy\nFIXED = copy.deepcopy(BROKEN)\nFIXED['train_batch_size'] = 4 * 2 * 8\ndel FIXED['fp16']\n"
                  "zero = FIXED['zero_optimization']\ndel zero['mics_shard_size'], zero['stage3_prefetch_bucket_size']\n"
                  "zero['offload_optimizer']['nvme_path'] = '/local_nvme'\n"],
    },
    "ex3_saved_bytes": {
        "wrong": [("SAVED_BYTES = 2 * 7e9 * 7 / 8 / 1e9\n", "wrong unit"),
                  ("SAVED_BYTES = 2 * 7e9 * 7 / 8 / 2**30\n", "wrong unit"),
                  ("SAVED_BYTES = -2 * 7e9 * 7 / 8\n", "wrong sign"),
                  ("SAVED_BYTES = '12.25 GB'\n", "wrong type"),
                  ("SAVED_BYTES = 2 * 7e9\n", "not right"),
                  ("SAVED_BYTES = 7e9 * (14 / 8 - 16 / 8)\n", "not right")],
        "right": ["SAVED_BYTES = 2 * 7 * 10**9 * (1 - 1 / 8)\n",
                  "_d = compare_configs(P_CONFIG, Q_CONFIG, params=7 * 10**9, gpus_per_node=8, accounting='paper')\n"
                  "SAVED_BYTES = _d.effect_a.memory.gpu_bytes - _d.effect_b.memory.gpu_bytes\n",
                  "SAVED_BYTES = int(12.25e9)\n"],
    },
    "ex4_extra_traffic": {
        "wrong": [("EXTRA_PSI = 0\n", "same volume only without"), ("EXTRA_PSI = -7\n", "wrong sign"),
                  ("EXTRA_PSI = 7 * 7e9 * 2\n", "wrong unit"), ("EXTRA_PSI = '7'\n", "wrong type"),
                  ("EXTRA_PSI = 8\n", "not right"), ("EXTRA_PSI = 7 * 7e9\n", "wrong unit")],
        "right": ["EXTRA_PSI = 7\n", "EXTRA_PSI = 9.0 - 2.0\n",
                  "from zerolab.engine import comm\nEXTRA_PSI = (comm.traffic(10**9, 2, 8, grad_accum=8).volume_in_params"
                  " - comm.traffic(10**9, 1, 8, grad_accum=8).volume_in_params)\n"],
    },
}

def _largest(body):
    return "def largest_micro_batch(model, seq_len, gpu_bytes, gpus, stage, recompute):\n" + body


def _fits(micro):
    return ("budget.budget(model, stage, seq_len, %s, gpus_per_node=gpus, recompute=recompute).gpu_bytes <= gpu_bytes"
            % micro)


_COUNT_UP = "    micro = 0\n    while " + _fits("micro + 1") + ":\n        micro += 1\n"
L01["ex5_largest_micro_batch"] = {
    "wrong": [(_largest(_COUNT_UP + "    return float(micro)\n"), "wrong type"),
              (_largest(_COUNT_UP + "    return str(micro)\n"), "wrong type"),
              (_largest(_COUNT_UP + "    return micro + 1\n"), "does not fit"),
              (_largest(_COUNT_UP + "    return max(micro - 1, 0)\n"), "not the largest"),
              (_largest("    return 1\n"), "not the largest"),
              (_largest(_COUNT_UP + "    return max(micro, 1)\n"), "return 0 then")],
    "right": [_largest("    low, high = 0, 1\n    while " + _fits("high") + ":\n        low, high = high, 2 * high\n"
                       "    while high - low > 1:\n        mid = (low + high) // 2\n"
                       "        if " + _fits("mid") + ":\n            low = mid\n        else:\n            high = mid\n"
                       "    return low\n"),
              _largest("    for micro in range(4096, 0, -1):\n        if " + _fits("micro") + ":\n"
                       "            return micro\n    return 0\n"),
              "import itertools\n" + _largest("    return next(m for m in itertools.count(1) if not " + _fits("m") + ") - 1\n")],
}


VARIANTS = {"01_where_memory_goes": L01, "05_config_doctor": L05}

_SKELETON = '''def build_deepspeed_config():
    ds_config = {
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
        "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                 "hysteresis": 2, "min_loss_scale": 1},
        "zero_optimization": {"contiguous_gradients": True},
        "train_batch_size": 32,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 8,
    }
    zero = ds_config["zero_optimization"]
'''


def _build(*lines):
    return _SKELETON + "".join(f"    {line}\n" for line in lines) + "    return ds_config\n"


_GOOD = ('zero["stage"] = 2', 'zero["overlap_comm"] = True',
         'zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}')


def _accum(body):
    return "def gradient_accumulation_steps(train_batch_size, micro_batch_per_gpu, world_size):\n" + body


def _precision(body):
    return "def mixed_precision(compute_capability):\n" + body


def _zero3(body):
    return "import copy\ndef zero3_offload(config):\n" + body


_Z3 = ('    result = copy.deepcopy(config)\n    zero = result.setdefault("zero_optimization", {})\n'
       '    zero["stage"] = %s\n    zero["offload_optimizer"] = {"device": %s, "pin_memory": %s}\n'
       '    zero["offload_param"] = {"device": "cpu", "pin_memory": True}\n    return result\n')

L04 = {
    "ex1_build_config": {
        "wrong": [(_build(_GOOD[0], 'zero["overlap_comm"] = "true"', _GOOD[2]), "wrong type"),
                  (_build('zero["stage"] = "2"', *_GOOD[1:]), "wrong type"),
                  (_build(*_GOOD[:2], 'zero["offload_optimizer"] = {"device": "CPU", "pin_memory": True}'), "wrong case"),
                  (_build(*_GOOD, 'ds_config["train_batch_size"] = 256  # for 8 GPUs'), "was changed"),
                  (_build(*_GOOD[:2]), "missing key"),
                  (_build(*_GOOD[:2], 'zero["offload_optimizer"] = {"device": "cpu"}'), "missing key")],
        "right": [_build(*_GOOD),
                  _build('zero.update(stage=2, overlap_comm=True, offload_optimizer=dict(device="cpu", pin_memory=True))'),
                  _build('ds_config["zero_optimization"] = {**zero, "stage": 2, "overlap_comm": True,'
                         ' "offload_optimizer": {"device": "cpu", "pin_memory": True}}')],
    },
    "ex2_grad_accum": {
        "wrong": [(_accum("    return train_batch_size / (micro_batch_per_gpu * world_size)\n"), "wrong type"),
                  (_accum("    if train_batch_size % micro_batch_per_gpu:\n        raise ValueError('no')\n"
                          "    return train_batch_size // micro_batch_per_gpu\n"), "left out world_size"),
                  (_accum("    return train_batch_size // (micro_batch_per_gpu * world_size)\n"), "raise ValueError"),
                  (_accum("    return str(train_batch_size // (micro_batch_per_gpu * world_size))\n"), "wrong type"),
                  (_accum("    return round(train_batch_size / (micro_batch_per_gpu * world_size))\n"), "raise ValueError"),
                  (_accum("    if train_batch_size % micro_batch_per_gpu:\n        raise ValueError('no')\n"
                          "    return train_batch_size // (micro_batch_per_gpu * world_size)\n"), "should raise ValueError")],
        "right": [_accum("    steps, rest = divmod(train_batch_size, micro_batch_per_gpu * world_size)\n"
                         "    if rest:\n        raise ValueError(f'{rest} samples left over')\n    return steps\n"),
                  "class BatchError(ValueError):\n    pass\n" + _accum(
                      "    per_step = micro_batch_per_gpu * world_size\n    if train_batch_size % per_step != 0:\n"
                      "        raise BatchError('does not divide')\n    return train_batch_size // per_step\n"),
                  _accum("    steps = train_batch_size / (micro_batch_per_gpu * world_size)\n"
                         "    if not steps.is_integer():\n        raise ValueError('not whole')\n    return int(steps)\n")],
    },
    "ex3_precision": {
        "wrong": [(_precision("    b = compute_capability >= (8, 0)\n"
                              "    return {'fp16': {'enabled': str(not b).lower()}, 'bf16': {'enabled': str(b).lower()}}\n"),
                   "wrong type"),
                  (_precision("    if compute_capability >= (8, 0):\n        return {'bf16': {'enabled': True}}\n"
                              "    return {'fp16': {'enabled': True}}\n"), "missing key"),
                  (_precision("    b = compute_capability >= (8, 0)\n    return {'fp16': not b, 'bf16': b}\n"),
                   "missing key"),
                  (_precision("    b = compute_capability >= (7, 0)\n"
                              "    return {'fp16': {'enabled': not b}, 'bf16': {'enabled': b}}\n"), "no bf16 tensor cores"),
                  (_precision("    b = compute_capability >= (8, 0)\n"
                              "    return {'FP16': {'enabled': not b}, 'BF16': {'enabled': b}}\n"), "wrong case"),
                  (_precision("    b = compute_capability[0] > 8\n"
                              "    return {'fp16': {'enabled': not b}, 'bf16': {'enabled': b}}\n"), "runs bf16 natively")],
        "right": [_precision("    major, minor = compute_capability\n    ampere = major >= 8\n"
                             "    return dict(fp16=dict(enabled=not ampere and major >= 7), bf16=dict(enabled=ampere))\n"),
                  _precision("    if list(compute_capability) >= [8, 0]:\n"
                             "        return {'fp16': {'enabled': False}, 'bf16': {'enabled': True}}\n"
                             "    if list(compute_capability) >= [7, 0]:\n"
                             "        return {'fp16': {'enabled': True, 'loss_scale': 0}, 'bf16': {'enabled': False}}\n"
                             "    return {'fp16': {'enabled': False}, 'bf16': {'enabled': False}}  # fp32 on a P100\n"),
                  _precision("    b = bool(compute_capability[0] >= 8)\n"
                             "    return {'bf16': {'enabled': b}, 'fp16': {'enabled': not b and compute_capability[0] >= 7}}\n")],
    },
    "ex4_zero3_offload": {
        "wrong": [(_zero3("    zero = config.setdefault('zero_optimization', {})\n    zero['stage'] = 3\n"
                          "    zero['offload_optimizer'] = {'device': 'cpu', 'pin_memory': True}\n"
                          "    zero['offload_param'] = {'device': 'cpu', 'pin_memory': True}\n    return config\n"),
                   "work on a copy"),
                  (_zero3("    result = copy.deepcopy(config)\n    result['zero_optimization']['stage'] = 3\n"
                          "    result['zero_optimization']['offload_optimizer'] = {'device': 'cpu', 'pin_memory': True}\n"
                          "    result['zero_optimization']['offload_param'] = {'device': 'cpu', 'pin_memory': True}\n"
                          "    return result\n"), "missing key"),
                  (_zero3(_Z3 % ("3", '"cpu"', '"true"')), "wrong type"),
                  (_zero3(_Z3 % ('"3"', '"cpu"', "True")), "wrong type"),
                  (_zero3(_Z3 % ("3", '"CPU"', "True")), "wrong case"),
                  (_zero3("    result = copy.deepcopy(config)\n    zero = result.setdefault('zero_optimization', {})\n"
                          "    zero['stage'] = 3\n    zero['offload_param'] = {'device': 'cpu', 'pin_memory': True}\n"
                          "    return result\n"), "missing key")],
        "right": [_zero3(_Z3 % ("3", '"cpu"', "True")),
                  _zero3("    offload = {'device': 'cpu', 'pin_memory': True}\n"
                         "    return {**copy.deepcopy(config), 'zero_optimization': {**copy.deepcopy(config.get("
                         "'zero_optimization', {})), 'stage': 3, 'offload_optimizer': dict(offload),"
                         " 'offload_param': dict(offload)}}\n"),
                  "import json\ndef zero3_offload(config):\n    result = json.loads(json.dumps(config))\n"
                  "    zero = result.get('zero_optimization') or {}\n    result['zero_optimization'] = zero\n"
                  "    zero.update(stage=3)\n    for key in ('offload_optimizer', 'offload_param'):\n"
                  "        zero[key] = {**zero.get(key, {}), 'device': 'cpu', 'pin_memory': True}\n    return result\n"],
    },
}

VARIANTS["04_writing_the_config"] = L04


def _q(name, wrong, right):
    return {"wrong": [(f"{name} = {value}\n", words) for value, words in wrong],
            "right": [f"{name} = {value}\n" for value in right]}


def _mc(name, wrong, other, right):
    """A multiple-choice question: its wrong options by id (zerolab.lesson.drill places them), then other wrong answers,
    then the right letter written as given in ``right`` (``{}`` for the letter, ``{l}`` lower case)."""
    from zerolab.lesson import drill

    key = drill.key(name)
    return _q(name, [(f'"{drill.letter(name, option)}"', words) for option, words in wrong] + other,
              [form.format(key, l=key.lower()) for form in right])


_Q04 = '{"zero1": %s, "zero2": %s, "zero3": %s}'
_Q16 = '{"FULL_SHARD": %s, "SHARD_GRAD_OP": %s, "NO_SHARD": %s}'
L07 = {
    "ex1_bytes_per_param": _q("Q01", [('"16 bytes"', "wrong type"), ("12", "master weights"), ("2", "only the fp16"),
                                      ("16e-9", "wrong unit"), ("20", "not right"), ("True", "wrong type")],
                              ["16", "16.0", "2 + 2 + 4 + 4 + 4"]),
    "ex2_k12": _mc("Q02", [("fp16_and_momentum", "not right"), ("six_bytes_each", "not right")],
                   [("2", "wrong type"), ('"E"', "should be one of"), ('["B"]', "wrong type"),
                    ('drill.key("Q02")', "off limits")],
                   ['"{}"', '" {l} "', '"{l}"']),
    "ex3_adam_13b": _q("Q03", [("52", "one fp32 tensor"), ("104e9", "wrong unit"), ("96.86", "wrong unit"),
                               ("156", "master weights"), ('"104 GB"', "wrong type")],
                       ["104", "104.0", "13e9 * 8 / 1e9", "103.5"]),
    "ex4_paper_example": _q("Q04", [('{"ZeRO-1": 31.4, "ZeRO-2": 16.6, "ZeRO-3": 1.9}', "missing key"),
                                    ('{"Zero1": 31.4, "zero2": 16.6, "zero3": 1.9}', "wrong case"),
                                    (_Q04 % ("31.4e9", "16.6e9", "1.9e9"), "wrong unit"),
                                    ("[31.4, 16.6, 1.9]", "wrong type"),
                                    (_Q04 % ("31.4", "7.5 * (2 + 2 / 64 + 12)", "1.9"), "not right")],
                            [_Q04 % ("31.4", "16.6", "1.9"),
                             "{f'zero{s}': 7.5 * b for s, b in ((1, 4 + 12 / 64), (2, 2 + 14 / 64), (3, 16 / 64))}",
                             "dict(zero1=31.41, zero2=16.64, zero3=1.875)"]),
    "ex5_zero2_13b": _q("Q05", [("36", "popular wrong answer"), ("48.75e9", "wrong unit"), ("45.4", "wrong unit"),
                                ("55.25", "DeepSpeed's estimator"), ('"48.75"', "wrong type"), ("26", "not right")],
                        ["48.75", "48.8", "13e9 * (2 + 14 / 8) / 1e9"]),
    "ex6_zero1_fraction": _q("Q06", [("34.375", "percentage"), ("0.75", "popular wrong figure"),
                                     ("0.65625", "fraction saved"), ('"0.34"', "wrong type"), ("0.25", "not right")],
                             ["0.34375", "0.344", "5.5 / 16"]),
    "ex7_comm_volume": _q("Q07", [('{"ddp": "2Ψ", "zero1": "2Ψ", "zero2": "2Ψ", "zero3": "3Ψ"}', "wrong type"),
                                  ('{"DDP": 2, "zero1": 2, "zero2": 2, "zero3": 3}', "wrong case"),
                                  ('{"ddp": 2, "zero1": 2, "zero2": 2}', "missing key"),
                                  ('{"ddp": 2, "zero1": 2, "zero2": 2, "zero3": 2}', "not right"),
                                  ("[2, 2, 2, 3]", "wrong type")],
                          ['{"ddp": 2, "zero1": 2, "zero2": 2, "zero3": 3}',
                           '{"ddp": 2.0, "zero1": 2.0, "zero2": 2.0, "zero3": 3.0}',
                           "dict(ddp=2, zero1=2, zero2=2, zero3=1.5 * 2)"]),
    "ex8_grad_accum": _q("Q08", [('{"zero1": 1.0, "zero2": 4.0}', "wrong type"), ('{"zero1": 4, "zero2": 4}', "ZeRO-1"),
                                 ('{"zero1": 1, "zero2": 1}', "ZeRO-2 keeps only"),
                                 ('{"Zero1": 1, "zero2": 4}', "wrong case"), ("(1, 4)", "wrong type")],
                         ['{"zero1": 1, "zero2": 4}', "dict(zero1=1, zero2=4)",
                          "{f'zero{s}': n for s, n in ((1, 1), (2, 4))}"]),
    "ex9_buckets": _q("Q09", [("26.0", "wrong type"), ("52", "counts bytes"), ('"26"', "wrong type"),
                              ("13", "not right"), ("27", "not right")],
                      ["26", "int(13e9 // 5e8)", "-(-13_000_000_000 // 500_000_000)"]),
    "ex10_overlap_comm": _mc("Q10", [("everywhere_4_5x", "4.5x"), ("free", "not right"), ("faster", "not right")],
                             [("1", "wrong type"), ('"B)"', "should be one of"),
                              ("getattr(__import__('zerolab.lesson.drill').lesson.drill, 'k' + 'ey')('Q10')", "off limits")],
                             ['"{}"', '"{l}"', '" {}\\n"']),
    "ex12_host_ram": _q("Q12", [("156", "leaves out one"), ("208e9", "wrong unit"), ("193.7", "wrong unit"),
                                ('"208"', "wrong type"), ("104", "not right")], ["208", "208.0", "13 * 16"]),
    "ex13_pin_memory": _mc("Q13", [("off_by_default", "older DeepSpeed"), ("doubles_ram", "not right")],
                           [('["B"]', "wrong type"), ('""', "should be one of"), ("2", "wrong type")],
                           ['"{}"', '"{l}"', '"  {}"']),
    "ex14_precision": _q("Q14", [('{"T4": "bf16", "A100": "bf16"}', "no bf16 tensor cores"),
                                 ('{"t4": "fp16", "A100": "bf16"}', "wrong case"),
                                 ('{"T4": 16, "A100": "bf16"}', "wrong type"),
                                 ('{"T4": "fp16"}', "missing key"),
                                 ('{"T4": "fp32", "A100": "bf16"}', "should be one of")],
                         ['{"T4": "FP16", "A100": "BF16"}', '{"A100": "bf16", "T4": "fp16"}',
                          'dict(T4=" fp16", A100="bf16")']),
    "ex15_batch": _q("Q15", [("16.0", "wrong type"), ("8", "not of GPUs"), ('"16"', "wrong type"),
                             ("32", "not right"), ("4", "not right")], ["16", "512 // (4 * 8)", "int(512 / 32)"]),
    "ex16_fsdp": _q("Q16", [(_Q16 % ('"3"', '"2"', '"0"'), "wrong type"),
                            ('{"full_shard": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}', "wrong case"),
                            ('{"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}', "missing key"),
                            (_Q16 % (2, 1, 0), "FULL_SHARD shards"), (_Q16 % ("3.0", "2.0", "0.0"), "wrong type"),
                            ("dict(drill.FSDP_STAGE)", "off limits")],
                    [_Q16 % (3, 2, 0), "dict(FULL_SHARD=3, SHARD_GRAD_OP=2, NO_SHARD=0)",
                     '{"NO_SHARD": 0, "FULL_SHARD": 3, "SHARD_GRAD_OP": 2}']),
    "ex17_activations_sequence": _mc("Q17", [("exactly_2", "not right"), ("partitioned", "not right"),
                                             ("exactly_4", "not right")],
                                     [("2", "wrong type"), ('"E"', "should be one of"), ('["B"]', "wrong type")],
                                     ['"{}"', '" {l} "', '"{l}"']),
    "ex18_checkpointed_inputs": _q("Q18", [("32 * 4096 * 4096 * 2", "wrong unit"), ("32 * 4096 * 4096 * 4 / 1e9", "not 4"),
                                           ("32 * 4096 * 4096 / 1e9", "bytes of a bf16 value"),
                                           ("4096 * 4096 * 2 / 1e9", "32 layers"), ('"1.07 GB"', "wrong type"),
                                           ("1.0", "wrong unit")],
                                   ["1.0737", "32 * 4096 * 1 * 4096 * 2 / 1e9", "1.07", "2**30 / 1e9"]),
    "ex19_estimate_said_it_fits": _mc("Q19", [("first_step", "when it builds the engine"),
                                              ("no_gradients", "partition the gradients"),
                                              ("allocator", "not right")],
                                      [('"d)"', "should be one of"), ("4", "wrong type"),
                                       ('drill.key("Q19")', "off limits")],
                                      ['"{}"', '"{l}"', '" {} "']),
    "ex20_zero3_checkpoint": _mc("Q20", [("whole_fp32", "zero_to_fp32 makes"), ("weights_only", "optimizer states are in it"),
                                         ("whole_per_rank", "not right")],
                                 [('"E"', "should be one of"), ("1", "wrong type")], ['"{}"', '"{l}"', '" {} "']),
    "ex21_resume_elsewhere": _mc("Q21", [("just_load", "refuses"), ("fp32_restart", "moments and step are lost"),
                                         ("cannot", "not right")],
                                [('"B."', "should be one of"), ('drill.key("Q21")', "off limits")],
                                ['"{}"', '" {l}"', '"{}\\n"']),
    "ex22_empty_save": _mc("Q22", [("bug", "not a bug"), ("async", "before it returns"), ("fp32_on_cpu", "not right")],
                           [("None", "wrong type"), ('"F"', "should be one of")], ['"{}"', '"{l} "', '" {}"']),
    "ex23_bf16_master": _mc("Q23", [("checkpoint_only", "while it trains"), ("params_1_byte", "not right"),
                                    ("k_6_whole", "not right")],
                            [('"E"', "should be one of"), ("6", "wrong type")], ['"{}"', '"{l}"', '" {} "']),
    "ex24_muon_state": _mc("Q24", [("nothing", "keeps between steps"), ("adam_moments", "not right"),
                                   ("momentum_variance_update", "not right")],
                           [('"AB"', "should be one of"), ("2", "wrong type")], ['"{}"', '"{l}"', '"{}\\n"']),
}

VARIANTS["07_interview_drill"] = L07

# Exercises another session edits at the same time as this suite was written: no variants yet.
NOT_COVERED = {"07_interview_drill": {"ex11_offload_pcie"}}


def _split(body):
    return "def offload_split(params, gpus):\n" + body


def _host(body):
    return "def deepspeed_host_gib(params, gpus_per_node, nodes):\n" + body


def _pcie(body):
    return "def pcie_bytes(params, gpus, grad_accum):\n" + body


def _seconds(body):
    return "def pcie_seconds(params, gpus, grad_accum, link):\n" + body


_PCIE = ("    p = params / gpus\n    acc = grad_accum if grad_accum > 1 else 0\n"
         "    return {'to_host': %s, 'to_gpu': %s}\n")
_MOVED = "    t = comm.traffic(params, 2, gpus, grad_accum=grad_accum, offload_optimizer='cpu')\n"
L02 = {
    "ex1_offload_split": {
        "wrong": [(_split("    e = memory.estimate(params, 2, gpus_per_node=gpus, offload_optimizer='cpu')\n"
                          "    return {'gpu': e.gpu_bytes, 'host': e.cpu_bytes}\n"), "off limits"),
                  ("from zerolab.engine import memory as m\n" + _split(
                      "    e = getattr(m, 'estimate')(params, 2, gpus_per_node=gpus, offload_optimizer='cpu')\n"
                      "    return {'gpu': e.gpu_bytes, 'host': e.cpu_bytes}\n"), "off limits"),
                  (_split("    return {'gpu': 2 * params, 'host': 14 * params / gpus}\n"), "should not depend"),
                  (_split("    return {'gpu': params, 'host': 7 * params}\n"), "elements"),
                  (_split("    return [2 * params, 14 * params]\n"), "wrong type"),
                  (_split("    return {'gpu': 2 * params / 1e9, 'host': 14 * params / 1e9}\n"), "wrong unit")],
        "right": [_split("    fp16 = 2 * params\n    return {'gpu': fp16, 'host': fp16 + 12 * params}\n"),
                  _split("    return {'gpu': 2 * params, 'host': sum(b * params for b in (2, 4, 4, 4))}\n"),
                  _split("    part = params / gpus\n    return dict(gpu=2.0 * params, host=gpus * (14 * part))\n")],
    },
    "ex2_deepspeed_host_gib": {
        "wrong": [(_host("    e = memory.estimate(params, 2, gpus_per_node=gpus_per_node, num_nodes=nodes,"
                         " offload_optimizer='cpu', accounting='deepspeed')\n    return e.cpu_bytes / GiB\n"),
                   "off limits"),
                  ("from deepspeed.runtime.zero import stage_1_and_2 as s\n" + _host(
                      "    return s.estimate_zero2_model_states_mem_needs(params, gpus_per_node, nodes,"
                      " cpu_offload=True)[0] / GiB\n"), "off limits"),
                  (_host("    return max(16, 4 * gpus_per_node * nodes) * params * 1.5 / 1e9\n"), "wrong unit"),
                  (_host("    return max(16, 4 * gpus_per_node * nodes) * params * 1.5\n"), "wrong unit"),
                  # these divided by 2**30: their message must not say what GiB means
                  (_host("    return max(16, 4 * gpus_per_node) * params * 1.5 / 2**30\n"), ("GPUs of one node", "2**30")),
                  (_host("    return max(16, 4 * gpus_per_node * nodes) * params / 2**30\n"),
                   ("additional_buffer_factor", "2**30"))],
        "right": [_host("    offloaded = 16 * params\n    peak = 4 * params * gpus_per_node * nodes\n"
                        "    return max(offloaded, peak) * 1.5 / 2**30\n"),
                  _host("    return max(16, 4 * gpus_per_node * nodes) * params * memory.DEFAULT_BUFFER_FACTOR / GiB\n"),
                  _host("    return float(max(16 * params, 4 * params * gpus_per_node * nodes)) * 3 / 2 / 1024**3\n")],
    },
    "ex3_pcie_bytes": {
        "wrong": [(_pcie(_MOVED + "    return {'to_host': t.device_to_host_bytes, 'to_gpu': t.host_to_device_bytes}\n"),
                   "off limits"),
                  (_pcie("    t = getattr(comm, 'traffic')(params, 2, gpus, grad_accum=grad_accum,"
                         " offload_optimizer='cpu')\n"
                         "    return {'to_host': t.device_to_host_bytes, 'to_gpu': t.host_to_device_bytes}\n"),
                   "off limits"),
                  (_pcie(_PCIE % ("4 * p + 2 * p * acc", "2 * p + 2 * p * acc")), "one time fewer"),
                  (_pcie(_PCIE % ("2 * p + 2 * p * acc", "2 * p + 2 * p * max(0, acc - 1)")), "compare the precision"),
                  (_pcie(_PCIE % ("4 * params + 2 * params * acc", "2 * params + 2 * params * max(0, acc - 1)")),
                   "only moves the partition"),
                  (_pcie(_PCIE % ("8 * (4 * p + 2 * p * acc)", "8 * (2 * p + 2 * p * max(0, acc - 1))")),
                   "bits where bytes belong")],
        "right": [_pcie("    p = params / gpus\n    if grad_accum == 1:\n        return {'to_host': 4 * p, 'to_gpu': 2 * p}\n"
                        "    return {'to_host': 4 * p + 2 * p * grad_accum, 'to_gpu': 2 * p * grad_accum}\n"),
                  _pcie("    n = params // gpus\n    extra = grad_accum if grad_accum > 1 else 0\n"
                        "    return dict(to_host=n * (4 + 2 * extra), to_gpu=n * 2 * max(1, extra))\n"),
                  _pcie(_PCIE % ("float(4 * p + 2 * p * acc)", "2.0 * p * max(1, acc)"))],
    },
    "ex4_pcie_seconds": {
        "wrong": [(_seconds(_MOVED + "    return comm.transfer_time(t.device_to_host_bytes + t.host_to_device_bytes, link)\n"),
                   "off limits"),
                  (_seconds(_MOVED + "    return 1000 * (t.device_to_host_bytes + t.host_to_device_bytes)"
                                     " / comm.bandwidth(link)\n"), "milliseconds"),
                  (_seconds(_MOVED + "    return 8 * (t.device_to_host_bytes + t.host_to_device_bytes)"
                                     " / comm.bandwidth(link)\n"), "bits where bytes belong"),
                  (_seconds(_MOVED + "    return t.device_to_host_bytes / comm.bandwidth(link)\n"), "one direction only"),
                  ("import numpy as np\n" + _seconds(_MOVED + "    return np.float64((t.device_to_host_bytes"
                                                              " + t.host_to_device_bytes) / comm.bandwidth(link))\n"),
                   "plain Python data")],
        "right": [_seconds("    moved = pcie_bytes(params, gpus, grad_accum)\n"
                           "    return (moved['to_host'] + moved['to_gpu']) / comm.bandwidth(link)\n"),
                  _seconds(_MOVED + "    return t.device_to_host_bytes / comm.bandwidth(link)"
                                    " + t.host_to_device_bytes / comm.bandwidth(link)\n"),
                  _seconds("    p = params / gpus\n    acc = grad_accum if grad_accum > 1 else 0\n"
                           "    both = 4 * p + 2 * p * acc + 2 * p + 2 * p * max(0, acc - 1)\n"
                           "    return both / comm.bandwidth(link)\n")],
    },
}

VARIANTS["02_offload"] = L02


def _volume(body):
    return "def volume_in_params(stage, grad_accum):\n" + body


def _wire(body):
    return "def wire_bytes(params, stage, gpus, grad_accum):\n" + body


def _calls(body):
    return "def reduce_calls(params, grad_accum, reduce_bucket_size):\n" + body


_VOLUME = "    v = {0: 2, 1: 2, 2: grad_accum + 1, 3: 3 * grad_accum}[stage]\n"
L03 = {
    "ex1_volume_in_params": {
        "wrong": [(_volume("    return comm.traffic(10**9, stage, 8, grad_accum=grad_accum).volume_in_params\n"),
                   "off limits"),
                  ("from zerolab.engine.comm import traffic as t\n"
                   + _volume("    return t(1, stage, 2, grad_accum=grad_accum).volume_in_params\n"), "off limits"),
                  (_volume("    return 2 * {0: 2, 1: 2, 2: grad_accum + 1, 3: 3 * grad_accum}[stage]\n"),
                   "counts each collective twice"),
                  (_volume("    return {0: 2, 1: 2, 2: 2, 3: 3}[stage]\n"), "every micro-step"),
                  (_volume("    return {0: 2, 1: grad_accum + 1, 2: grad_accum + 1, 3: 3 * grad_accum}[stage]\n"),
                   "only at the accumulation boundary"),
                  (_volume("    return {0: 2, 1: 2, 2: grad_accum + 1, 3: 2 + grad_accum}[stage]\n"),
                   "once per micro-step")],
        "right": [_volume("    return {0: 2, 1: 2, 2: 1 + grad_accum, 3: 3 * grad_accum}[stage]\n"),
                  _volume("    return 2.0 if stage < 2 else (grad_accum + 1.0 if stage == 2 else 3.0 * grad_accum)\n"),
                  _volume("    if stage <= 1:\n        return 1 + 1\n    if stage == 2:\n        return grad_accum * 1 + 1\n"
                          "    return grad_accum * (1 + 1 + 1)\n")],
    },
    "ex2_wire_bytes": {
        "wrong": [(_wire("    return comm.traffic(params, stage, gpus, grad_accum=grad_accum).wire_bytes\n"), "off limits"),
                  (_wire(_VOLUME + "    return v * params * (gpus - 1) / gpus * 16\n"), "bits where bytes belong"),
                  (_wire(_VOLUME + "    return v * params * 2\n"), "(N-1)/N"),
                  (_wire(_VOLUME + "    return v * params * (gpus - 1) / gpus\n"), "elements"),
                  (_wire(_VOLUME + "    return 2 * v * params * (gpus - 1) / gpus * 2\n"), "counts the collectives twice")],
        "right": [_wire("    return volume_in_params(stage, grad_accum) * params * 2 * (gpus - 1) / gpus\n"),
                  _wire("    if gpus == 1:\n        return 0\n" + _VOLUME + "    return 2 * v * params - 2 * v * params / gpus\n"),
                  _wire(_VOLUME + "    return v * params * 2 * (gpus - 1) // gpus\n")],
    },
    "ex3_reduce_calls": {
        "wrong": [(_calls("    t = comm.traffic(params, 2, 8, grad_accum=grad_accum, reduce_bucket_size=reduce_bucket_size)\n"
                          "    return sum(c.buckets * c.times for c in t.collectives if c.op == 'reduce-scatter')\n"),
                   "off limits"),
                  (_calls("    return params / reduce_bucket_size * grad_accum\n"), "partly filled"),
                  (_calls("    return params // reduce_bucket_size * grad_accum\n"), "partly filled"),
                  (_calls("    return -(-params // reduce_bucket_size)\n"), "every micro-step"),
                  (_calls("    import math\n    return math.ceil(params / reduce_bucket_size) * 1.0 * grad_accum\n"),
                   "plain int"),
                  (_calls("    return -(-params * grad_accum // reduce_bucket_size)\n"), "not right")],
        "right": [_calls("    return -(-params // reduce_bucket_size) * grad_accum\n"),
                  "import math\n" + _calls("    return int(math.ceil(params / reduce_bucket_size)) * grad_accum\n"),
                  _calls("    buckets, rest = divmod(params, reduce_bucket_size)\n"
                         "    return (buckets + (rest > 0)) * grad_accum\n")],
    },
}

VARIANTS["03_overlap_comm"] = L03

# A later exercise that calls a wrong earlier one: graded with the course's earlier function, full points, and a note
# naming the earlier function. CASCADES[lesson] = [({grade_id: source}, test grade_id, words in its output)]
CASCADES = {
    "01_where_memory_goes": [({"ex2_per_gpu_bytes": L01["ex2_per_gpu_bytes"]["wrong"][3][0],
                               "ex3_fraction_kept": L01["ex3_fraction_kept"]["right"][1]},
                              "test_ex3_fraction_kept", "exercise 3 is graded with the course's per_gpu_bytes")],
    "02_offload": [({"ex3_pcie_bytes": L02["ex3_pcie_bytes"]["wrong"][2][0],
                     "ex4_pcie_seconds": L02["ex4_pcie_seconds"]["right"][0]},
                    "test_ex4_pcie_seconds", "exercise 4 is graded with the course's pcie_bytes"),
                   ({"ex4_pcie_seconds": L02["ex4_pcie_seconds"]["right"][0]},
                    "test_ex4_pcie_seconds", "your pcie_bytes from exercise 3 gives an error (NotImplementedError)")],
    "03_overlap_comm": [({"ex1_volume_in_params": L03["ex1_volume_in_params"]["wrong"][2][0],
                          "ex2_wire_bytes": L03["ex2_wire_bytes"]["right"][0]},
                         "test_ex2_wire_bytes", "exercise 2 is graded with the course's volume_in_params")],
}


def _opt(body):
    return "def optimizer_bytes(params, stage, ranks):\n" + body


def _train(body):
    return "def training_bytes(params, stage, ranks):\n" + body


def _split6(body):
    return "def offload_split(params, stage, ranks, offload_optimizer, offload_param):\n" + body


def _traffic(body):
    return "def offload_traffic(params, ranks, grad_accum, precision):\n" + body


_OPT = "    share = params / ranks if %s else params\n    return {'master_weights': %s, 'optimizer_states': %s}\n"
_TRAIN = "    return {'params': %s * params / (ranks if stage >= %s else 1), 'grads': %s * params / (ranks if stage >= %s else 1)}\n"
_SPLIT6 = ("    def share(nbytes, partitioned_from):\n        return nbytes * params / (ranks if stage >= partitioned_from else 1)\n"
           "    parts = {'params': share(2, 3), 'grads': share(2, 2), 'master_weights': share(4, 1),"
           " 'optimizer_states': share(8, 1)}\n    on_host = set()\n"
           "    if offload_optimizer == 'cpu':\n        on_host |= {'master_weights', 'optimizer_states'}%s\n"
           "    if offload_param == 'cpu'%s:\n        on_host.add('params')\n"
           "    host = sum(v for k, v in parts.items() if k in on_host)\n"
           "    return {'device': sum(parts.values()) - host, 'host': host%s}\n")
_GRADS_FROM_2 = " | ({'grads'} if stage >= 2 else set())"
_TRAFFIC = ("    p = params / %s\n    e = %s\n    acc = grad_accum if grad_accum > 1 else 0\n"
            "    return {'to_host': %s * p + e * p * acc, 'to_device': e * p + e * p * %s}\n")
L06 = {
    "ex1_optimizer_bytes": {
        "wrong": [(_opt("    e = memory.estimate(params, stage, gpus_per_node=ranks, precision='bf16').breakdown['gpu']\n"
                        "    return {k: e[k] for k in ('master_weights', 'optimizer_states')}\n"), "off limits"),
                  (_opt(_OPT % ("stage", "share", "2 * share")), "elements"),
                  (_opt(_OPT % ("True", "4 * share", "8 * share")), "partitions nothing"),
                  (_opt(_OPT % ("stage >= 2", "4 * share", "8 * share")), "stage 1 partitions"),
                  (_opt(_OPT % ("stage", "4 * share", "12 * share")), "two fp32 moments"),
                  (_opt("    return [4 * params, 8 * params]\n"), "wrong type")],
        "right": [_opt("    n = ranks if stage else 1\n"
                       "    return {'master_weights': 4 * params // n, 'optimizer_states': 8 * params // n}\n"),
                  _opt("    share = params / (ranks if stage >= 1 else 1)\n"
                       "    return dict(master_weights=int(4 * share + 0.5), optimizer_states=int(8 * share + 0.5))\n"),
                  _opt("    n = ranks if stage > 0 else 1\n"
                       "    return {'master_weights': -(-4 * params // n), 'optimizer_states': -(-8 * params // n)}\n")],
    },
    "ex2_training_bytes": {
        "wrong": [("from zerolab.engine.memory import estimate as e\n"
                   + _train("    g = e(params, stage, gpus_per_node=ranks, precision='bf16').breakdown['gpu']\n"
                            "    return {'params': g['params'], 'grads': g['grads']}\n"), "off limits"),
                  (_train(_TRAIN % (4, 3, 4, 2)), "bf16 is a 16-bit type"),
                  (_train(_TRAIN % (1, 3, 1, 2)), "elements"),
                  (_train(_TRAIN % (2, 3, 2, 1)), "partitions only the optimizer states"),
                  (_train(_TRAIN % (2, 2, 2, 2)), "keeps whole parameters"),
                  (_train("    return (2 * params, 2 * params)\n"), "wrong type")],
        "right": [_train(_TRAIN % (2, 3, 2, 2)),
                  _train("    p = 2 * params // ranks if stage == 3 else 2 * params\n"
                         "    g = 2 * params // ranks if stage >= 2 else 2 * params\n    return {'params': p, 'grads': g}\n"),
                  _train("    out = {'params': 2 * params, 'grads': 2 * params}\n"
                         "    for key, stage_from in (('grads', 2), ('params', 3)):\n"
                         "        if stage >= stage_from:\n            out[key] = round(out[key] / ranks)\n    return out\n")],
    },
    "ex3_offload_split": {
        "wrong": [(_split6("    o, t = optimizer_bytes(params, stage, ranks), training_bytes(params, stage, ranks)\n"
                           "    states = {**o, **t}\n    host = sum(states[k] for k in ('master_weights', 'optimizer_states'))"
                           " if offload_optimizer == 'cpu' else 0\n"
                           "    return {'device': sum(states.values()) - host, 'host': host}\n"), "off limits"),
                  (_split6("    e = memory.estimate(params, stage, gpus_per_node=ranks, offload_optimizer=offload_optimizer,"
                           " offload_param=offload_param, precision='bf16')\n"
                           "    return {'device': e.gpu_bytes, 'host': e.cpu_bytes / ranks}\n"), "off limits"),
                  (_split6(_SPLIT6 % (_GRADS_FROM_2, "", " * ranks")), "offload moves bytes"),
                  (_split6(_SPLIT6 % ("", "", "")), "keeps only the whole 16-bit parameters"),
                  (_split6(_SPLIT6 % (_GRADS_FROM_2, " and False", "")), "leaves no model states"),
                  (_split6(_SPLIT6 % (" | {'grads'}", "", "")), "is not right: which model states does stage 1 keep")],
        "right": [_split6(_SPLIT6 % (_GRADS_FROM_2, "", "")),
                  _split6("    n = lambda s: ranks if stage >= s else 1\n"
                          "    p, g, m, o = 2 * params / n(3), 2 * params / n(2), 4 * params / n(1), 8 * params / n(1)\n"
                          "    host = 0\n    if offload_optimizer == 'cpu':\n        host += m + o + (g if stage >= 2 else 0)\n"
                          "    if offload_param == 'cpu':\n        host += p\n"
                          "    return {'device': round(p + g + m + o - host), 'host': round(host)}\n"),
                  _split6("    per = {'params': (2, 3), 'grads': (2, 2), 'master_weights': (4, 1), 'optimizer_states': (8, 1)}\n"
                          "    out = {'device': 0, 'host': 0}\n    for name, (b, s) in per.items():\n"
                          "        size = b * params // (ranks if stage >= s else 1)\n"
                          "        moved = (offload_optimizer == 'cpu' and (name in ('master_weights', 'optimizer_states')"
                          " or (name == 'grads' and stage >= 2))) or (offload_param == 'cpu' and name == 'params')\n"
                          "        out['host' if moved else 'device'] += size\n    return out\n")],
    },
    "ex4_offload_traffic": {
        "wrong": [("from zerolab.engine import deepspeed_traffic as dt\n"
                   + _traffic("    d, u = dt.offload_bytes(params, 2, ranks, grad_accum, precision, 'cpu')\n"
                              "    return {'to_host': d, 'to_device': u}\n"), "off limits"),
                  (_traffic(_TRAFFIC % ("ranks", "4", "4", "max(0, acc - 1)")), "bf16 is a 16-bit type"),
                  (_traffic(_TRAFFIC % ("ranks", "4 if precision == 'fp32' else 2", "4", "acc")),
                   "the updated partition back in the training precision"),
                  (_traffic(_TRAFFIC % ("ranks", "4 if precision == 'fp32' else 2", "e", "max(0, acc - 1)")), "as fp32"),
                  (_traffic(_TRAFFIC % ("1", "4 if precision == 'fp32' else 2", "4", "max(0, acc - 1)")),
                   "each rank copies only its partition"),
                  (_traffic("    return [4 * params / ranks, 2 * params / ranks]\n"), "wrong type")],
        "right": [_traffic(_TRAFFIC % ("ranks", "4 if precision == 'fp32' else 2", "4", "max(0, acc - 1)")),
                  _traffic("    p = params / ranks\n    e = {'bf16': 2, 'fp32': 4}[precision]\n"
                           "    if grad_accum == 1:\n        return {'to_host': round(4 * p), 'to_device': round(e * p)}\n"
                           "    return {'to_host': round(4 * p + e * p * grad_accum), 'to_device': round(e * p * grad_accum)}\n"),
                  _traffic("    part = params // ranks\n    size = 2 if precision == 'bf16' else 4\n"
                           "    micro = grad_accum if grad_accum > 1 else 0\n"
                           "    return dict(to_host=part * (4 + size * micro), to_device=part * size * max(1, micro))\n")],
    },
}

VARIANTS["06_predict_then_measure"] = L06

# The course's reference answers are off limits (issue 23): one more wrong answer each for lesson 04.
L04["ex1_build_config"]["wrong"].append(
    ("from zerolab.config.reference import zero2_offload as given\ndef build_deepspeed_config():\n    return given()\n",
     "off limits"))
L04["ex2_grad_accum"]["wrong"].append(
    (_accum("    from zerolab.config import read_settings\n"
            "    return read_settings({'train_batch_size': train_batch_size, 'train_micro_batch_size_per_gpu':"
            " micro_batch_per_gpu}, world_size=world_size).grad_accum\n"), "off limits"))
L04["ex4_zero3_offload"]["wrong"].append(
    ("import importlib\ndef zero3_offload(config):\n"
     "    return importlib.import_module('zerolab.config.reference').zero3_offload(config)\n", "off limits"))


# Lesson 10 (ZeRO in 2026).
def _state(body):
    return "def state_bytes(params, stage, ranks, master, moments):\n" + body


def _muon(body):
    return "def muon_state_bytes(params, muon_params, stage, ranks):\n" + body


_RULES = ("    if stage not in (1, 2, 3) or (moments == 'bf16' and master != 'bf16'):\n"
          "        raise ValueError('refused')\n")
_STATE = "    size = {'fp32': %s, 'bf16': %s}\n    return {'master_weights': size[master] * params / %s, "\
         "'optimizer_states': %s * size[moments] * params / %s}\n"


def _mc10(name, wrong, other, right):
    """A lesson-10 multiple-choice question (zerolab.lesson.new_features places its options)."""
    from zerolab.lesson import new_features

    key = new_features.key(name)
    return _q(name, [(f'"{new_features.letter(name, option)}"', words) for option, words in wrong] + other,
              [form.format(key, l=key.lower()) for form in right])


_RIGHT_PICKS = {"S1": "deepcompile", "S2": "zenflow", "S3": "superoffload", "S4": "ulysses", "S5": "zeropp"}


def _picks(**changed):
    return "PICKS = " + repr({**_RIGHT_PICKS, **changed}) + "\n"


L10 = {
    "ex1_state_bytes": {
        "wrong": [(_state("    from zerolab.engine.memory import estimate\n"
                          "    g = estimate(params, stage, gpus_per_node=ranks, precision='bf16', master=master, "
                          "moments=moments).breakdown['gpu']\n"
                          "    return {'master_weights': g['master_weights'], 'optimizer_states': g['optimizer_states']}\n"),
                   "off limits"),
                  (_state(_RULES + _STATE % (4, 4, "ranks", 2, "ranks")), "bf16 takes 2"),
                  (_state(_RULES + _STATE % (4, 2, "1", 2, "1")), "every rank's master weights together"),
                  (_state(_RULES + _STATE % (2, 1, "ranks", 2, "ranks")), "elements"),
                  (_state(_RULES + _STATE % (4, 2, "ranks", 1, "ranks")), "two bf16 tensors"),
                  (_state(_STATE % (4, 2, "ranks", 2, "ranks")), "should raise ValueError"),
                  (_state(_RULES + "    return [2 * params / ranks, 4 * params / ranks]\n"), "wrong type")],
        "right": [_state(_RULES + _STATE % (4, 2, "ranks", 2, "ranks")),
                  _state("    if stage == 0:\n        raise ValueError('stage 0 has no ZeRO optimizer')\n"
                         "    if master == 'fp32' and moments == 'bf16':\n        raise ValueError('moments need master')\n"
                         "    m = 4 if master == 'fp32' else 2\n    v = 8 if moments == 'fp32' else 4\n"
                         "    return dict(master_weights=m * params // ranks, optimizer_states=v * params // ranks)\n"),
                  _state("    if stage < 1 or stage > 3 or (moments, master) == ('bf16', 'fp32'):\n"
                         "        raise ValueError\n"
                         "    share = params / ranks\n    nbytes = {'bf16': 2.0, 'fp32': 4.0}\n"
                         "    return {'optimizer_states': round(2 * nbytes[moments] * share), "
                         "'master_weights': round(nbytes[master] * share)}\n")],
    },
    "ex2_muon_state_bytes": {
        "wrong": [(_muon("    from zerolab.engine import memory\n    return memory.estimate(params, stage, ranks, "
                         "precision='bf16', optimizer='muon', muon_params=muon_params).breakdown['gpu']"
                         "['optimizer_states']\n"), "off limits"),
                  (_muon("    return (2 * muon_params + 8 * (params - muon_params))\n"), "every rank's state together"),
                  (_muon("    return (4 * muon_params + 8 * (params - muon_params)) / ranks\n"), "momentum in fp32"),
                  (_muon("    return 8 * params / ranks\n"), "one momentum"),
                  (_muon("    return (2 * muon_params + 4 * (params - muon_params)) / ranks\n"), "two fp32 moments"),
                  (_muon("    return str(2 * muon_params + 8 * (params - muon_params))\n"), "wrong type")],
        "right": [_muon("    return round((2 * muon_params + 8 * (params - muon_params)) / ranks)\n"),
                  _muon("    adam = params - muon_params\n    return (2 * muon_params + 8 * adam) // ranks\n"),
                  _muon("    return 2 * muon_params / ranks + 8 * (params - muon_params) / ranks\n")],
    },
    "ex3_backward": _mc10("BACKWARD", [("divide_yourself", "not right"), ("engine_divided", "not right"),
                                       ("refused", "not right")],
                          [('"E"', "should be one of"), ("2", "wrong type"),
                           ('__import__("zerolab.lesson.new_features", fromlist=["key"]).key("BACKWARD")', "off limits")], ['"{}"', '"{l}"', '" {} "']),
    "ex4_hang_fix": _mc10("FIX", [("prefetch_0", "wrong order"), ("persist", "not right"), ("external", "not right")],
                          [('"Z"', "should be one of"), ("None", "wrong type"),
                           ('__import__("zerolab.lesson.new_features").lesson.new_features.key("FIX")', "off limits")],
                          ['"{}"', '"{l}"', '"{} "']),
    "ex5_picks": {
        "wrong": [(_picks(S1="zeropp"), "sends fewer bytes"),
                  (_picks(S2="superoffload"), "Superchip"),
                  (_picks(S3="zenflow"), "NVLink-C2C"),
                  (_picks(S4="deepcompile"), "activations"),
                  (_picks(S5="autotp"), "slow network"),
                  ("PICKS = " + repr({k: v for k, v in _RIGHT_PICKS.items() if k != "S5"}) + "\n", "missing key"),
                  (_picks(S1="DeepSpeed Compile"), "should be one of"),
                  ("from zerolab.lesson.new_features import PICKS as _given\nPICKS = dict(_given)\n", "off limits")],
        "right": [_picks(),
                  "PICKS = " + repr({k: v.upper() for k, v in _RIGHT_PICKS.items()}) + "\n",
                  "PICKS = dict(S5='zeropp', S4='ulysses', S3='superoffload', S2='zenflow', S1='deepcompile')\n"],
    },
}
VARIANTS["10_zero_in_2026"] = L10
