"""A matplotlib font with Chinese glyphs, for the Chinese edition's plots.

A CJK font already on the machine is used when there is one; otherwise the Noto Sans CJK SC that the `mplfonts`
package ships (requirements.txt installs it; on Colab and ModelScope the setup cell of a Chinese lesson does).
"""
import functools
from pathlib import Path

SYSTEM_FAMILIES = ("Noto Sans CJK SC", "Source Han Sans SC", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei",
                   "Microsoft YaHei", "PingFang SC", "SimHei")
BUNDLED = ("mplfonts", "fonts/NotoSansCJKsc-Regular.otf")


def bundled_font_file():
    import importlib.util
    found = importlib.util.find_spec(BUNDLED[0])
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(list(found.submodule_search_locations)[0]) / BUNDLED[1]
    return path if path.exists() else None


@functools.lru_cache(maxsize=1)  # zerolab.lesson.plots asks for every figure: scan and register the font once
def cjk_family():
    """The family name of a usable CJK font, registering the bundled one if need be; None when there is none."""
    from matplotlib import font_manager
    installed = {font.name for font in font_manager.fontManager.ttflist}
    for family in SYSTEM_FAMILIES:
        if family in installed:
            return family
    path = bundled_font_file()
    if path is None:
        return None
    font_manager.fontManager.addfont(str(path))
    return font_manager.FontProperties(fname=str(path)).get_name()


def use_cjk_font():
    """Put a CJK font first in matplotlib's sans-serif list; return its family, or None (then glyphs are boxes)."""
    import matplotlib
    family = cjk_family()
    if family is not None:
        sans = [name for name in matplotlib.rcParams["font.sans-serif"] if name != family]
        matplotlib.rcParams["font.sans-serif"] = [family, *sans]
        matplotlib.rcParams["font.family"] = "sans-serif"
        matplotlib.rcParams["axes.unicode_minus"] = False  # the CJK fonts lack U+2212
    return family
