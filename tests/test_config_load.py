"""load_config: path, JSON text or dict in; one clear UserError out for anything unreadable."""
import json

import pytest

from zerolab.config import load_config
from zerolab.errors import UserError


def test_dict_text_and_path_give_the_same_config(tmp_path):
    config = {"train_batch_size": 8, "zero_optimization": {"stage": 2}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    assert load_config(config) == load_config(json.dumps(config)) == load_config(str(path)) == load_config(path) == config


@pytest.mark.parametrize("text, expected", [
    ('{"train_batch_size": 8,}', "line 1 column 24"),
    ('{\n  "fp16": {"enabled": tru}\n}', "line 2 column 23"),
    ('[1, 2]', "is a list"),
    ('{"a": 1, "a": 2}', "'a' appears twice"),
])
def test_bad_text_names_the_problem(tmp_path, text, expected):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        load_config(str(path))
    message = str(caught.value)
    assert str(path) in message and expected in message and "\n" not in message


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_config(str(tmp_path / "nope.json"))
    with pytest.raises(UserError, match="is a directory"):
        load_config(str(tmp_path))


def test_wrong_type():
    with pytest.raises(UserError, match="not int"):
        load_config(42)


def test_importing_zerolab_config_loads_neither_torch_nor_deepspeed():
    import subprocess
    import sys
    code = ("import sys, zerolab.config, zerolab.cli.check, zerolab.cli.explain, zerolab.cli.diff; "
            "print(sorted(m for m in ('torch', 'deepspeed', 'torch.distributed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
