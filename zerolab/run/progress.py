"""Show a run's progress: one line per step in a terminal, one updating line in a notebook.

A DeepSpeed op compiling on first use, here or in scripts/setup.sh's background build, is announced with a
ticking clock ("compiling cpu_adam: 2 min 10 s so far, about 3 min on 2 cores") instead of silence; once ready,
the line says whether it was compiled now or loaded from the cache (the latter only when that took a while).
"""
import sys
import time

from zerolab.base.i18n import tr
from zerolab.run.op_cache import TYPICAL_BUILD_S

ANNOUNCE_AFTER_S = 2.0
CACHED_ANNOUNCE_AFTER_S = 15.0  # an op with a cached .so is loading, unless torch finds it stale and rebuilds it
TICK_EVERY_S = 10.0


def minutes_seconds(seconds):
    seconds = int(round(seconds))
    return seconds // 60, seconds % 60


def in_notebook():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class Progress:
    """Callbacks for zerolab.run.launch: ``on_event`` for each worker event, ``on_tick`` when nothing happens."""

    def __init__(self, stream=None, notebook=None):
        self.stream = stream or sys.stderr
        self.notebook = in_notebook() if notebook is None else notebook
        self.handle = None
        self.building = {}  # op -> [since (epoch), announced, seconds before the first "compiling" line]
        self.last_tick = time.monotonic()

    def say(self, text, final=True, keep=False):
        """In a notebook the line replaces the one before; keep=True leaves it standing (the next line starts below)."""
        if self.notebook:
            from IPython.display import display

            if self.handle is None:
                self.handle = display({"text/plain": text}, raw=True, display_id=True)
            else:
                self.handle.update({"text/plain": text}, raw=True)
            if keep:
                self.handle = None
        elif final:
            print(text, file=self.stream, flush=True)

    def on_event(self, event):
        kind = event.get("event")
        if kind == "build" and event["op"] not in self.building:
            # The clock runs from when the build began: another process's lock, else this load's start.
            since = event.get("building_since") or event.get("started") or time.time()
            wait = CACHED_ANNOUNCE_AFTER_S if event.get("cached") and not event.get("building_since") else ANNOUNCE_AFTER_S
            self.building[event["op"]] = [since, False, wait]
        elif kind == "built" and event["op"] in self.building:
            since, announced, wait = self.building.pop(event["op"])
            if event.get("compiled"):
                minutes, seconds = minutes_seconds(event.get("build_seconds", event["seconds"]))
                self.say(tr(f"DeepSpeed op {event['op']} compiled now in {minutes} min {seconds} s "
                            "(cached for next time)"), keep=True)
            elif announced or event["seconds"] >= ANNOUNCE_AFTER_S:
                self.say(tr(f"DeepSpeed op {event['op']} loaded from the cache in {event['seconds']:.0f} s"), keep=True)
        elif kind == "phase" and event.get("rank") == 0:
            self.say(tr("rank 0: {phase}").format(phase=tr(event["phase"])))  # a closed key: no open "rank 0: {}"
        elif kind == "step" and event.get("rank") == 0:
            self.say(tr(f"step {event['step']}/{event['steps']}  loss {event['loss']:.3f}  {event['seconds']:.2f} s"))

    def on_tick(self):
        now, wall = time.monotonic(), time.time()
        for op, state in self.building.items():
            since, announced, wait = state
            due = now - self.last_tick >= TICK_EVERY_S if announced else wall - since >= wait
            if due:
                state[1] = True
                self.say(self.compiling_line(op, wall - since))
                self.last_tick = now

    @staticmethod
    def compiling_line(op, seconds):
        """The whole line on every tick: in a notebook each line replaces the one before."""
        minutes, seconds = minutes_seconds(seconds)
        typical = TYPICAL_BUILD_S.get(op)
        if typical is None:
            return tr(f"compiling {op}: {minutes} min {seconds} s so far (first use only; cached for next time)")
        return tr(f"compiling {op}: {minutes} min {seconds} s so far, about {round(typical / 60)} min on 2 cores "
                  "(first use only; cached for next time)")
