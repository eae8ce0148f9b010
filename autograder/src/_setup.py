# Setup: on Colab and ModelScope this installs the zerolab package (and what this lesson needs) when it is missing;
# anywhere else it only checks that zerolab is importable. It never reinstalls torch or numpy.
def _zerolab_setup(install_url, needs):
    import importlib
    import importlib.util
    import os
    import subprocess
    import sys

    if os.path.isdir("/content") and importlib.util.find_spec("google.colab") is not None:
        where = "Colab"
    elif os.path.isdir("/mnt/workspace") or any(key.startswith("MODELSCOPE") for key in os.environ):
        where = "ModelScope"
    else:
        where = None
    missing = [] if importlib.util.find_spec("zerolab") else [f"zerolab @ {install_url}"]
    missing += [package for package in needs if importlib.util.find_spec(package) is None]
    if missing and where is None:
        print("zerolab setup: missing " + ", ".join(missing) + ". In the course folder run: pip install -r requirements.txt")
        return
    if missing:
        print(f"zerolab setup ({where}): installing " + ", ".join(missing))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
        importlib.invalidate_caches()
    if where == "Colab":
        from google.colab import output
        output.enable_custom_widget_manager()
    import zerolab
    print(f"zerolab {zerolab.__version__} ready" + (f" on {where}" if where else ""))


_zerolab_setup(INSTALL_URL, NEEDS)
del _zerolab_setup
