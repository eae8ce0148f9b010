"""Benchmark the engine's hot paths: what widgets call on every slider move, and the CLI's start-up.

    python scripts/bench_engine.py

Prints microseconds per estimate row and per traffic/step_time call, milliseconds per full `fit` table (target:
under 50 ms, so a widget can call it on every change), and the wall time of `import zerolab` and
`zerolab estimate` in a fresh interpreter, with the heavy modules each one loaded.
"""
import subprocess
import sys
import time
import timeit

from zerolab.engine.comm import step_time, traffic
from zerolab.sizing.fit import fit
from zerolab.engine.models import preset
from zerolab.engine.memory import combinations, estimate


def per_call_us(fn, number=2000):
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def fresh_interpreter(code):
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return time.perf_counter() - start, out.stdout.strip()


def main():
    rows = combinations()
    for accounting in ("paper", "deepspeed"):
        us = per_call_us(lambda: [estimate(13 * 10**9, s, 8, 2, offload_optimizer=o, offload_param=p,
                                           accounting=accounting) for s, o, p in rows]) / len(rows)
        print(f"estimate(), {accounting:9} accounting: {us:7.1f} us per row")
    t = traffic(13 * 10**9, 2, 8, grad_accum=4)
    print(f"traffic():                      {per_call_us(lambda: traffic(13 * 10**9, 2, 8, grad_accum=4)):7.1f} us")
    print(f"step_time(overlap_comm=True):   {per_call_us(lambda: step_time(t, 1.0, overlap_comm=True)):7.1f} us")
    for name, nodes in (("llama2-13b", 1), ("llama3-70b", 4)):
        ms = per_call_us(lambda: fit(preset(name), 4096, 80 * 10**9, 8, nodes), number=20) / 1000
        print(f"fit({name}, 8 x {nodes} GPUs):    {ms:7.1f} ms per full table (target < 50 ms)")
    heavy = "import sys; print([m for m in ('torch', 'deepspeed', 'matplotlib', 'ipywidgets') if m in sys.modules])"
    seconds, loaded = fresh_interpreter("import zerolab.engine.memory, zerolab.engine.comm; " + heavy)
    print(f"import zerolab.engine.memory, comm:    {seconds:7.2f} s  heavy modules loaded: {loaded}")
    seconds, loaded = fresh_interpreter(
        "import io, contextlib; from zerolab.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['estimate', '--params', '13B'])\n" + heavy)
    print(f"zerolab estimate --params 13B:  {seconds:7.2f} s  heavy modules loaded: {loaded}")


if __name__ == "__main__":
    main()
