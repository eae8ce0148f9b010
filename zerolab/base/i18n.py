"""The learner's language: English, or Chinese for the Chinese edition of the course.

Both editions share every code cell, so the language cannot come from code: it is the notebook's own metadata,
`metadata.zerolab.language` ("zh" in lessons/zh/ and solutions/zh/), read from the notebook this kernel runs.
That survives `nbgrader autograde`, which replaces locked cells but keeps the submission's notebook metadata.
The kernel finds its notebook by, in order:
  1. ZEROLAB_LANG (en or zh), to force one;
  2. JPY_SESSION_NAME, the notebook path Jupyter Server gives the kernels it starts (JupyterLab, Notebook 7,
     ModelScope);
  3. on Colab, the open notebook as Colab's frontend returns it;
  4. the notebooks in the working directory (nbclient and nbgrader run a kernel beside its notebook): Chinese
     when every one of them is. (zerolab grade's sandbox hides that notebook and sets ZEROLAB_LANG from it.)

Messages: `tr(text)` gives the Chinese of an English message from the catalogs in zerolab/base/locale/zh/*.json.
A catalog key is the English text with each value written `{}`; its value is the Chinese with the same `{}` in
the same order (or `{0}`, `{1}` ... to reorder). `activate()`, run by every lesson's setup cell, also rewrites
the message of a failing test's AssertionError the same way, so the test cells stay identical in both editions.
"""
import functools
import json
import os
import re
from pathlib import Path

LANGUAGES = ("en", "zh")
LOCALE = Path(__file__).resolve().parent / "locale"


def notebook_language(nb):
    language = (nb.get("metadata", {}).get("zerolab") or {}).get("language", "en")
    return language if language in LANGUAGES else "en"


def _read_notebook(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _colab_notebook():
    try:
        from google.colab import _message  # only on Colab
        return _message.blocking_request("get_ipynb", timeout_sec=5)["ipynb"]
    except Exception:  # not on Colab, or the frontend did not answer: fall through to the working directory
        return None


@functools.lru_cache(maxsize=1)
def language():
    forced = os.environ.get("ZEROLAB_LANG")
    if forced in LANGUAGES:
        return forced
    session = os.environ.get("JPY_SESSION_NAME")
    nb = _read_notebook(session) if session and session.endswith(".ipynb") else None
    nb = nb or _colab_notebook()
    if nb:
        return notebook_language(nb)
    return folder_language(Path.cwd())


def folder_language(folder):
    """The language of the notebooks in `folder`: Chinese when every one of them is, else English. The grading
    sandbox hides a submission's notebook from its kernel (it holds the hidden tests), so the grader reads it
    and passes the language on in ZEROLAB_LANG (zerolab/grading/sandbox.py)."""
    found = [_read_notebook(path) for path in sorted(Path(folder).glob("*.ipynb"))]
    languages = {notebook_language(nb) for nb in found if nb}
    return "zh" if languages == {"zh"} else "en"


@functools.lru_cache(maxsize=None)
def catalog(lang="zh"):
    merged = {}
    for path in sorted((LOCALE / lang).glob("*.json")):
        merged.update(json.loads(path.read_text(encoding="utf-8")))
    return merged


@functools.lru_cache(maxsize=None)
def _patterns(lang="zh"):
    """(regex of an English template, its translation), longest templates first so the most specific wins."""
    compiled = []
    for english, translated in sorted(catalog(lang).items(), key=lambda item: -len(item[0])):
        if "{}" in english and english.replace("{}", ""):  # a value alone is no template (and would recurse)
            parts = [re.escape(part) for part in english.split("{}")]
            compiled.append((re.compile("(.+?)".join(parts) + r"\Z", re.DOTALL), translated))
    return compiled


def translate(text, lang="zh"):
    """`text` in `lang` when a catalog has it, else unchanged.

    A template's values are translated too when a catalog has them (bare identifiers excepted): a message made of
    parts, such as zerolab.lesson.checks' "{} is not right: {}" with the default name "your answer" and a hint, comes out
    whole."""
    if lang == "en" or not isinstance(text, str):
        return text
    exact = catalog(lang).get(text)
    if exact is not None:
        return exact
    for pattern, translated in _patterns(lang):
        match = pattern.match(text)
        if match:
            # a bare identifier ("stage", "fp16") is code, not words: it stays as written
            return translated.format(*(value if value.isidentifier() else translate(value, lang)
                                       for value in match.groups()))
    return text


def tr(text):
    """An English message in the learner's language."""
    return translate(text, language())


def _translated_assertion(shell, etype, value, tb, tb_offset=None):
    if value.args and isinstance(value.args[0], str):
        value.args = (tr(value.args[0]),) + value.args[1:]
    # IPython discards what a custom handler returns: the handler must show the error itself, or the kernel sends
    # no error output and nbgrader, which grades by the error outputs, would count the failed test as passed.
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
    return []


def activate():
    """In a Chinese-edition kernel: translate failing tests' messages and give matplotlib a CJK font."""
    if language() != "zh":
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((AssertionError,), _translated_assertion)
    from zerolab.base import fonts
    fonts.use_cjk_font()
