"""What a student's feedback file shows of an error: the message and the notebook's own cells, nothing of the grader.

An IPython traceback is a list of entries: a header, one entry per frame ("Cell In[6], line 10" and its context
lines, or "File /path/x.py:113, in f(...)" and its), then "Name: message". For the feedback it is rewritten so:
- a frame in a cell keeps its header and context, minus the lines of that cell's hidden tests (markers included);
  a frame whose failing line is in a hidden test becomes one line that says so;
- frames in files (zerolab's checks, libraries, the standard library) are left out: their source is the grader's
  and their paths are the grading machine's; a run of library frames is named by its modules, on one line;
- the grading machine's paths left in any text (messages, warnings on stderr) are shortened (`Paths`).
"""
import re
import site
import sys
import sysconfig
from pathlib import Path

from zerolab.base.i18n import translate

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CELL_FRAME = re.compile(r"^\s*(?:Cell In ?\[(\d+)\]|Input In \[(\d+)\]), line (\d+)")
FILE_FRAME = re.compile(r"^\s*File (.+?):(\d+)(?:, in .*)?$")
CONTEXT_LINE = re.compile(r"^\s*(?:-*>\s*)?(\d+)(?:\s|$)")
MESSAGE_MATCH = 12  # a message is checked for hidden lines this long: shorter ones ("pass") are words too


def hidden_line_numbers(source, begin="BEGIN HIDDEN TESTS", end="END HIDDEN TESTS"):
    """1-based numbers of the lines of `source` in a hidden-test region, its marker lines included."""
    numbers, inside = set(), False
    for number, line in enumerate(source.split("\n"), start=1):
        if begin in line:
            inside = True
        if inside:
            numbers.add(number)
        if end in line:
            inside = False
    return numbers


def clean_traceback(traceback, hidden_by_cell, paths, hidden_text=(), lang="en"):
    """The traceback entries a student may see. `hidden_by_cell` maps an execution count to the hidden line numbers
    of that cell; `hidden_text` (the hidden tests' lines) cleans a frame of a cell not in it, and the messages.
    What it writes in their place is in `lang`, the notebook's language."""
    kept, library = [], []
    quoted = [line for line in hidden_text if len(line) >= MESSAGE_MATCH]
    for entry in traceback:
        plain = ANSI.sub("", entry)
        first = plain.lstrip("\n").split("\n", 1)[0]
        cell, file = CELL_FRAME.match(first), FILE_FRAME.match(first)
        if file and not cell:
            library.append(module_of(file.group(1)))
            continue
        if library:
            kept += _library_note(library, lang)
            library = []
        if cell:
            count = int(cell.group(1) or cell.group(2))
            hidden = hidden_by_cell.get(count)
            line = int(cell.group(3))
            if hidden is None:  # a cell this notebook has no record of: match the hidden lines' text instead
                entry = scrub(entry, hidden_text, lang)
            else:
                entry = _cell_frame(entry, count, line, hidden, lang)
        else:
            entry = scrub(entry, quoted, lang)  # a message quoting a hidden test's source
        kept.append(paths.shorten(entry))
    return kept + _library_note(library, lang)


def scrub(entry, hidden, lang="en"):
    """`entry` with every line that shows one of the `hidden` source lines replaced by a placeholder."""
    plain = ANSI.sub("", entry)
    if not any(h in plain for h in hidden):
        return entry
    placeholder = "    " + translate("(hidden test line)", lang)
    return "\n".join(placeholder if any(h in line for h in hidden) else line for line in plain.split("\n"))


def _cell_frame(entry, count, line, hidden, lang):
    if line in hidden:
        return translate(f"Cell In[{count}], in a hidden test (its source is not shown)", lang) + "\n"
    lines = entry.split("\n")
    kept = [lines[0]]
    for text in lines[1:]:
        number = CONTEXT_LINE.match(ANSI.sub("", text))
        if not (number and int(number.group(1)) in hidden):
            kept.append(text)
    return "\n".join(kept)


def _library_note(modules, lang):
    shown = ", ".join(name for name in dict.fromkeys(modules) if name.split(".")[0] != "zerolab")
    return [f"   ... {translate(f'inside {shown} (library code, not shown)', lang)}\n"] if shown else []


def module_of(path):
    """The dotted module name of a source file's path ('torch.nn.functional'), never the path."""
    frozen = re.fullmatch(r"<frozen (.+)>", path)
    if frozen:
        return frozen.group(1)
    path = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/", "/zerolab/"):
        if marker in path:
            path = ("zerolab/" if marker == "/zerolab/" else "") + path.rsplit(marker, 1)[1]
            break
    else:
        roots = [_zerolab_root(), sysconfig.get_paths()["stdlib"]]
        for root in sorted(roots, key=len, reverse=True):
            if path.startswith(root.rstrip("/") + "/"):
                path = path[len(root.rstrip("/")) + 1:]
                break
        else:
            stdlib = re.search(r"/lib/python\d+(?:\.\d+)?/(.+)$", path)  # another Python's standard library
            path = stdlib.group(1) if stdlib else path.rsplit("/", 1)[-1]
    name = re.sub(r"\.pyw?$", "", path).replace("/", ".")
    return re.sub(r"\.__init__$", "", name) or "?"


def _zerolab_root():
    import zerolab

    return str(Path(zerolab.__file__).resolve().parent.parent)


class Paths:
    """Shortens the grading machine's paths in text: {path: label}; a label '' leaves the path relative to it."""

    def __init__(self, labels):
        self.labels = {}
        for path, label in labels.items():
            for form in (str(path).rstrip("/"), str(Path(path).resolve()).rstrip("/")):
                if len(form) > 1:  # never "/" itself
                    self.labels.setdefault(form, label)
        self.order = sorted(self.labels, key=len, reverse=True)  # the longest first: a folder inside another
        # each path ends at "/" or where a path's characters end, so /srv/course never matches /srv/course2
        self.pattern = re.compile("|".join(rf"{re.escape(path)}(?P<g{i}>/|(?![\w.+@-]))"
                                           for i, path in enumerate(self.order))) if self.order else None

    def shorten(self, text):
        if not self.pattern or not text:
            return text
        return self.pattern.sub(self._replace, text)

    def _replace(self, match):
        label, slash = self.labels[self.order[int(match.lastgroup[1:])]], match.group(match.lastgroup)
        if label:
            return label + slash
        return "" if slash else "."


def python_paths():
    """{path: label} of the Python installation and of the zerolab package, as the feedback names them."""
    labels = {sys.prefix: "<python>", sys.base_prefix: "<python>", sys.exec_prefix: "<python>",
              sysconfig.get_paths()["stdlib"]: "<python>/lib", _zerolab_root(): ""}
    for folder in site.getsitepackages() + [site.getusersitepackages()]:
        labels[folder] = ""
    return labels
