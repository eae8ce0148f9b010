#!/usr/bin/env bash
# Grade one shard of a lesson on a scheduler; the shard comes from the scheduler's index:
#   Kubernetes Indexed Job   JOB_COMPLETION_INDEX (0..N-1)            -> --shard INDEX+1/N
#   Slurm job array          SLURM_ARRAY_TASK_ID (1..N, --array=1-N) -> --shard ID/N
# Settings (environment): LESSON (required), SHARDS (N; on Slurm it defaults to the array's size),
# COURSE (the nbgrader course folder, may be read-only; default autograder), RESULTS (where shard folders go;
# default COURSE/shards), JOBS (students at a time in this shard; default 1), ZEROLAB (the zerolab command).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LESSON:?set LESSON to the lesson to grade, e.g. 04_writing_the_config}"
SHARDS="${SHARDS:-${SLURM_ARRAY_TASK_COUNT:-}}"
: "${SHARDS:?set SHARDS to the number of shards (the Job's completions, the array's size)}"
if [ -n "${JOB_COMPLETION_INDEX:-}" ]; then
    SHARD=$((JOB_COMPLETION_INDEX + 1))
elif [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
    SHARD="${SLURM_ARRAY_TASK_ID}"
else
    echo "grade-shard.sh: neither JOB_COMPLETION_INDEX (Kubernetes) nor SLURM_ARRAY_TASK_ID (Slurm) is set" >&2
    exit 2
fi
COURSE="${COURSE:-autograder}"
RESULTS="${RESULTS:-$COURSE/shards}"
ZEROLAB="${ZEROLAB:-.venv/bin/zerolab}"
exec $ZEROLAB grade "$LESSON" --course "$COURSE" --shard "$SHARD/$SHARDS" \
    --out "$RESULTS/$LESSON-$SHARD-of-$SHARDS" --jobs "${JOBS:-1}"
