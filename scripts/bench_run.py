"""How long a small CPU run takes with ranks forked from the warm server, and with fresh processes.

    .venv/bin/python scripts/bench_run.py [--runs N]

A ZeRO-2 bf16 run of 3 steps on 2 CPU ranks, N times with the kernel's warm server (zerolab.run.warm_ranks: the
first run pays the server's imports), then N times as fresh ``python -m zerolab.run.worker`` processes (what a run
does where no warm server can be had). docs/benchmarks.md quotes it.
"""
import argparse
import time


def timed(runs, config):
    from zerolab.run import run

    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        run(config, ranks=2, steps=3, progress=False)
        seconds.append(round(time.perf_counter() - started, 1))
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind (default 3)")
    args = parser.parse_args()
    from zerolab.run import make_config, warm_ranks

    config = make_config(stage=2, precision="bf16")
    warm = timed(args.runs, config)
    warm_ranks.start_rank = lambda *args: None  # every rank a fresh process
    fresh = timed(args.runs, config)
    print(f"warm server: {warm[0]} s the first run, then {warm[1:]} s; fresh processes: {fresh} s")


if __name__ == "__main__":
    main()
