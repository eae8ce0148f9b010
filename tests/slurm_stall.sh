#!/usr/bin/env bash
# For tests/test_slurm_grading.py: run `zerolab grade` ("$@"), and once it has written its shard record (grading has
# begun), freeze it, so that the Slurm task runs into its time limit with a shard that did not finish.
"$@" &
grading=$!
for _ in $(seq 600); do
    if compgen -G "$RESULTS/*/zerolab-shard.json" >/dev/null; then
        kill -STOP "$grading"
        break
    fi
    sleep 0.2
done
wait "$grading"
