#!/usr/bin/env bash
# Set up a checkout: a virtual environment in .venv with everything in requirements.txt (zerolab included).
#   bash scripts/setup.sh            the course
#   bash scripts/setup.sh --grading  also bubblewrap, the sandbox `zerolab grade` runs student code in
# Safe to run again: what is already there is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -r requirements.txt
if [ "${1:-}" = "--grading" ] && ! command -v bwrap >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap
    else
        echo "setup: bubblewrap is missing and cannot be installed from here (not root, or no apt-get):" \
             "install the 'bubblewrap' package, or \`zerolab grade\` grades in its weaker, labelled caps-only mode" >&2
    fi
fi
