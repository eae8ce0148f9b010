# zerolab setup. On Colab and ModelScope: installs zerolab and this lesson's packages when missing (never torch or
# numpy). Elsewhere: checks that zerolab is there (set up with `bash scripts/setup.sh`, see the README).
def _setup(url, needs):
    import importlib, importlib.util as spec, os, subprocess, sys  # noqa: E401

    on_colab = os.path.isdir(os.environ.get("ZEROLAB_COLAB_CONTENT", "/content")) and bool(
        spec.find_spec("google") and spec.find_spec("google.colab"))
    on_modelscope = os.path.isdir("/mnt/workspace") or any(key.startswith("MODELSCOPE") for key in os.environ)
    where = "Colab" if on_colab else "ModelScope" if on_modelscope else None
    url = os.environ.get("ZEROLAB_INSTALL_URL", url)
    missing = [] if spec.find_spec("zerolab") else [f"zerolab @ {url}"]
    missing += [package for package in needs if spec.find_spec(package) is None]
    if missing and not where:
        return print(f"zerolab setup: {', '.join(missing)} missing. In the course folder run: bash scripts/setup.sh")
    if where and url is None and not spec.find_spec("zerolab"):
        return print(f"zerolab setup: this copy of the course is not published, so {where} has nowhere to install "
                     "zerolab from: open the lesson from the badge in the published course's README instead")
    if missing:
        print(f"zerolab setup ({where}): installing {', '.join(missing)} ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)
        importlib.invalidate_caches()
    if on_colab:
        from google.colab import output
        output.enable_custom_widget_manager()
    import zerolab
    from zerolab.base import i18n
    if i18n.language() == "zh" and where and not spec.find_spec("mplfonts"):  # a CJK font for the plots
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "mplfonts"], check=True)
    i18n.activate()
    print(i18n.tr(f"zerolab {zerolab.__version__} ready" + (f" on {where}" if where else "")))


_setup(INSTALL_URL, NEEDS)
del _setup
