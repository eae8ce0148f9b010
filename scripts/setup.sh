#!/usr/bin/env bash
# Set up a checkout: a virtual environment in .venv with everything in requirements.txt (zerolab included),
# Jupyter configured for students (scripts/student_jupyter.py) and DeepSpeed's two CPU ops compiled once.
#   bash scripts/setup.sh            the course
#   bash scripts/setup.sh --grading  also what grading and the full test suite need: bubblewrap (the sandbox
#                                    `zerolab grade` runs student code in), Debian's chromium and Playwright
#                                    (the real-browser test), jupyter-repo2docker (the Binder check)
# Safe to run again: what is already there is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -r requirements.txt
.venv/bin/python scripts/student_jupyter.py .venv
echo "setup: compiling DeepSpeed's CPU ops once (1-3 minutes each on 2 cores the first time; cached afterwards)"
# in the background: the compiler works while the grading extras below download and unpack
PATH="$PWD/.venv/bin:$PATH" DS_ACCELERATOR=cpu .venv/bin/python scripts/build_ops.py &
ops=$!
trap 'kill "$ops" 2>/dev/null || true' EXIT  # a failed step below stops the compile too
if [ "${1:-}" = "--grading" ]; then
    .venv/bin/pip install -r scripts/requirements-grading.txt
    missing=()
    command -v bwrap >/dev/null || missing+=(bubblewrap)
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    if [ "${#missing[@]}" -gt 0 ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
        else
            echo "setup: ${missing[*]} missing and cannot be installed from here (not root, or no apt-get):" \
                 "install the Debian packages; without bubblewrap \`zerolab grade\` grades in its weaker, labelled" \
                 "caps-only mode, without chromium the browser test skips itself" >&2
        fi
    fi
fi
wait "$ops"  # its exit status is the set-up's: a failed compile fails the set-up
