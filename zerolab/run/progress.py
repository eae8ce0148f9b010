"""Show a run's progress: one line per step in a terminal, one updating line in a notebook.

A DeepSpeed op compiling on first use (1-3 minutes on 2 cores) is announced with a ticking clock
instead of silence; an op that loads from the cache in a moment is not mentioned.
"""
import sys
import time

from zerolab.i18n import tr

ANNOUNCE_AFTER_S = 2.0
TICK_EVERY_S = 10.0


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
        self.building = {}  # op -> (started, announced)
        self.last_tick = time.monotonic()

    def say(self, text, final=True):
        if self.notebook:
            from IPython.display import display

            if self.handle is None:
                self.handle = display({"text/plain": text}, raw=True, display_id=True)
            else:
                self.handle.update({"text/plain": text}, raw=True)
        elif final:
            print(text, file=self.stream, flush=True)

    def on_event(self, event):
        kind = event.get("event")
        if kind == "build" and event["op"] not in self.building:
            self.building[event["op"]] = [time.monotonic(), False]
        elif kind == "built" and event["op"] in self.building:
            started, announced = self.building.pop(event["op"])
            if announced or event["seconds"] >= ANNOUNCE_AFTER_S:
                self.say(tr(f"DeepSpeed op {event['op']} ready after {event['seconds']:.0f} s (cached for next time)"))
        elif kind == "phase" and event.get("rank") == 0:
            self.say(tr("rank 0: {phase}").format(phase=tr(event["phase"])))  # a closed key: no open "rank 0: {}"
        elif kind == "step" and event.get("rank") == 0:
            self.say(tr(f"step {event['step']}/{event['steps']}  loss {event['loss']:.3f}  {event['seconds']:.2f} s"))

    def on_tick(self):
        now = time.monotonic()
        for op, state in self.building.items():
            started, announced = state
            due = now - (self.last_tick if announced else started) >= (TICK_EVERY_S if announced else ANNOUNCE_AFTER_S)
            if due:
                state[1] = True
                # The whole explanation on every tick: in a notebook each line replaces the one before.
                self.say(tr(f"building DeepSpeed op {op}: {now - started:.0f} s so far (first use only, 1-3 minutes "
                            "on 2 cores; `bash scripts/setup.sh` builds it ahead; cached in ~/.cache/torch_extensions "
                            "or $TORCH_EXTENSIONS_DIR)"))
                self.last_tick = now
