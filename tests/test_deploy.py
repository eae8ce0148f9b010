"""The scheduler recipes in deploy/ run as written: Docker cannot build here, so each file is parsed and
checked against the repository (every file the image uses exists, the shard flags zerolab accepts, a Job whose
completions and parallelism match its shard count), and grade-shard.sh runs with a stand-in for zerolab."""
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from zerolab.cli.main import build_parser
from zerolab.grading import shards

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"


def dockerfile_instructions():
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.split(None, 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def run_shard_script(script, folder, **env):
    """Run a recipe's script with a stand-in zerolab that prints its arguments one a line; return them."""
    stand_in = folder / "zerolab"
    stand_in.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    stand_in.chmod(0o755)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "ZEROLAB": str(stand_in), **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def parsed(argv):
    return build_parser().parse_args(argv)


def test_every_file_the_image_copies_or_runs_is_in_the_repository():
    instructions = dockerfile_instructions()
    copied = [words for kind, rest in instructions if kind == "COPY" for words in [rest.split()[:-1]]]
    assert copied, "the image copies nothing"
    for sources in copied:
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
    runs = " ".join(rest for kind, rest in instructions if kind == "RUN")
    for path in re.findall(r"\b((?:deploy|scripts|autograder)/[\w./-]+)", runs):
        assert (REPO / path).exists(), f"RUN uses {path}: not in the repository"
    assert "bubblewrap" in runs and "-r requirements.txt" in runs and "prebuild_ops.py" in runs
    entry = next(rest for kind, rest in instructions if kind == "ENTRYPOINT")
    script = REPO / yaml.safe_load(entry)[0]
    assert script.exists() and os.access(script, os.X_OK)
    copied_paths = {source.rstrip("/") for sources in copied for source in sources}
    assert "deploy" in copied_paths and "zerolab" in copied_paths


def test_the_image_leaves_student_work_out():
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for folder in ("autograder/submitted", "autograder/gradebook.db", "autograder/autograded", ".venv"):
        assert folder in ignored


def test_prebuilt_ops_are_builders_deepspeed_has():
    from deepspeed.accelerator import get_accelerator

    source = (DEPLOY / "prebuild_ops.py").read_text()
    names = re.search(r"OPS = \((.*?)\)", source).group(1)
    for name in re.findall(r'"(\w+)"', names):
        assert get_accelerator().create_op_builder(name) is not None, name


def test_kubernetes_indexed_job_maps_the_completion_index_to_every_shard(tmp_path):
    job = yaml.safe_load((DEPLOY / "kubernetes" / "grade-job.yaml").read_text())
    assert (job["apiVersion"], job["kind"], job["spec"]["completionMode"]) == ("batch/v1", "Job", "Indexed")
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    count = int(env["SHARDS"])
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == count
    assert "SYS_ADMIN" in container["securityContext"]["capabilities"]["add"]
    seen = []
    for index in range(count):
        argv = run_shard_script(DEPLOY / "grade-shard.sh", tmp_path, JOB_COMPLETION_INDEX=str(index), **env)
        args = parsed(argv)
        assert (args.lesson, args.course) == (env["LESSON"], env["COURSE"])
        seen.append(shards.parse(args.shard))
        assert args.out.startswith(env["RESULTS"] + "/")
    assert seen == [(number, count) for number in range(1, count + 1)]


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])  # the oldest the Job's header supports; the newest shipped
def test_the_kubernetes_job_is_valid_against_the_api_schema(version):
    """Strict: an unknown field anywhere (a misspelled securityContext key, which a cluster would silently drop
    under a lenient client) fails, as the mutated copy shows."""
    import kubernetes_validate  # scripts/requirements-grading.txt
    job = yaml.safe_load((DEPLOY / "kubernetes" / "grade-job.yaml").read_text())
    kubernetes_validate.validate(job, version, strict=True)
    misspelled = yaml.safe_load((DEPLOY / "kubernetes" / "grade-job.yaml").read_text())
    misspelled["spec"]["template"]["spec"]["containers"][0]["securityContext"]["appArmorProfil"] = {"type": "x"}
    with pytest.raises(kubernetes_validate.ValidationError, match="appArmorProfil"):
        kubernetes_validate.validate(misspelled, version, strict=True)


def test_slurm_array_maps_the_task_id_to_every_shard(tmp_path):
    script = (DEPLOY / "slurm" / "grade.sbatch").read_text()
    first, last = map(int, re.search(r"#SBATCH --array=(\d+)-(\d+)", script).groups())
    assert first == 1
    seen = []
    for task in range(first, last + 1):
        argv = run_shard_script(DEPLOY / "slurm" / "grade.sbatch", tmp_path, LESSON="04_writing_the_config",
                                SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_COUNT=str(last),
                                SLURM_SUBMIT_DIR=str(REPO), SLURM_CPUS_PER_TASK="2")
        args = parsed(argv)
        assert args.jobs == 2
        seen.append(shards.parse(args.shard))
    assert seen == [(number, last) for number in range(1, last + 1)]


def test_the_shard_script_refuses_to_guess_without_a_scheduler_index():
    done = subprocess.run(["bash", str(DEPLOY / "grade-shard.sh")], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "LESSON": "x", "SHARDS": "4", "ZEROLAB": "false"})
    assert done.returncode == 2 and "JOB_COMPLETION_INDEX" in done.stderr


@pytest.mark.parametrize("argv", [["grade", "04_writing_the_config"], ["grade", "04_writing_the_config", "--jobs", "2"]])
def test_a_lesson_is_still_a_lesson(argv):
    from zerolab.cli import grade

    args = parsed(argv)
    assert args.lesson == "04_writing_the_config" and args.handler is grade.run
