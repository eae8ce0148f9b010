#!/usr/bin/env bash
# Set up a checkout: a virtual environment in .venv with everything in requirements.txt (zerolab included),
# Jupyter configured for students (scripts/student_jupyter.py) and DeepSpeed's CPU Adam op compiled once.
#   bash scripts/setup.sh            the course. Returns as soon as the lessons can run: the op (needed only by
#                                    optimizer offload: lesson 06) compiles in the background, detached, logged to
#                                    .venv/build_ops.log; a run that needs it waits for it with a progress line
#   bash scripts/setup.sh --grading  also what grading and the full test suite need: bubblewrap (the sandbox
#                                    `zerolab grade` runs student code in), Debian's chromium and Playwright
#                                    (the real-browser test), jupyter-repo2docker (the Binder check), slurm-wlm
#                                    and munge (the Slurm test: scripts/slurm_local.sh); waits for the op, which
#                                    the suite needs
# Safe to run again: what is already there is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -r requirements.txt
.venv/bin/python scripts/student_jupyter.py .venv
build_ops=(env PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=cpu .venv/bin/python scripts/build_ops.py)
log=.venv/build_ops.log
if [ "${1:-}" != "--grading" ]; then
    if [ -f .venv/build_ops.pid ] && kill -0 "$(cat .venv/build_ops.pid)" 2>/dev/null; then
        echo "setup: DeepSpeed's CPU Adam op is still compiling in the background (log: $log)"
    else
        # setsid: its own session, so neither closing the terminal nor Ctrl+C in JupyterLab stops the compile
        setsid "${build_ops[@]}" >"$log" 2>&1 </dev/null &
        echo $! >.venv/build_ops.pid
        echo "setup: ready. DeepSpeed's CPU Adam op, which only optimizer offload (lesson 06) needs, compiles in the" \
             "background the first time, 1-7 minutes on 2 cores (log: $log); a run that needs it waits for it."
    fi
    exit 0
fi
echo "setup: compiling DeepSpeed's CPU Adam op once (1-7 minutes on 2 cores the first time; cached afterwards)"
# in the background: the compiler works while the grading extras below download and unpack
"${build_ops[@]}" &
ops=$!
trap 'kill "$ops" 2>/dev/null || true' EXIT  # a failed step below stops the compile too
.venv/bin/pip install -r scripts/requirements-grading.txt
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
[ -x /usr/bin/chromium ] || missing+=(chromium)
lean=()  # installed without recommended packages, as scripts/slurm_local.sh installs them
command -v slurmctld >/dev/null || lean+=(slurm-wlm)
command -v munged >/dev/null || lean+=(munge)
missing+=("${lean[@]}")
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        for package in "${missing[@]}"; do
            if [[ " ${lean[*]} " == *" $package "* ]]; then
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package"
            else
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package"
            fi
        done
    else
        echo "setup: ${missing[*]} missing and cannot be installed from here (not root, or no apt-get):" \
             "install the Debian packages; without bubblewrap \`zerolab grade\` grades in its weaker, labelled" \
             "caps-only mode, without chromium the browser test skips itself, without slurm-wlm and munge the Slurm" \
             "test does" >&2
    fi
fi
wait "$ops"  # its exit status is the set-up's: a failed compile fails the set-up
