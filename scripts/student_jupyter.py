"""Configure the Jupyter of an environment for students (scripts/setup.sh and binder/postBuild run this).

    python scripts/student_jupyter.py [PREFIX]      PREFIX: the environment (default: this interpreter's)

Writes, under PREFIX (files owned by the course, safe to write again):
  etc/jupyter/labconfig/page_config.json         nbgrader's instructor UI hidden (formgrader, Create Assignment,
                                                 course list); its Validate button and its Nbgrader menu stay: on
                                                 a hub the menu is how students open the Assignment List (its
                                                 plugin adds the command to no palette or launcher), and it shows
                                                 no item for the hidden plugins
  etc/jupyter/jupyter_server_config.d/zerolab-students.json
                                                 the formgrader and course-list server parts off
  etc/jupyter/jupyter_server_config.json         allow_root, so the README's start command also works in a root
                                                 container (Jupyter reads only extension switches from the .d folder)
  share/jupyter/lab/settings/overrides.json      widget state saved with the notebook, so a lesson reopened
                                                 later shows its last figure instead of "model not found";
                                                 no "Jupyter news?" pop-up over the lesson
An instructor who wants the formgrader back: `jupyter labextension enable @jupyter/nbgrader:formgrader` and
delete zerolab-students.json.
"""
import json
import sys
from pathlib import Path

HIDDEN_LAB_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:course-list")
SHOWN_LAB_PLUGINS = ("@jupyter/nbgrader:menu",)  # hidden by earlier versions of this script: shown again
SERVER_EXTENSIONS = {"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": False,
                                                           "nbgrader.server_extensions.course_list": False}}}
SERVER_CONFIG = {"ServerApp": {"allow_root": True}}
LAB_SETTINGS = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
                "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}


def _merged(path, update):
    """The JSON file at path (if any) with update merged in one level deep."""
    data = json.loads(path.read_text()) if path.exists() else {}
    for key, value in update.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return data


def configure(prefix):
    prefix = Path(prefix)
    written = []
    for path, update in (
        (prefix / "etc/jupyter/labconfig/page_config.json",
         {"disabledExtensions": {**{name: True for name in HIDDEN_LAB_PLUGINS},
                                 **{name: False for name in SHOWN_LAB_PLUGINS}}}),
        (prefix / "etc/jupyter/jupyter_server_config.d/zerolab-students.json", SERVER_EXTENSIONS),
        (prefix / "etc/jupyter/jupyter_server_config.json", SERVER_CONFIG),
        (prefix / "share/jupyter/lab/settings/overrides.json", LAB_SETTINGS),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_merged(path, update), indent=2) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in configure(sys.argv[1] if len(sys.argv) > 1 else sys.prefix):
        print(f"student Jupyter: wrote {path}")
