"""What every layer of zerolab may use: messages in both editions (i18n, with its catalogs in locale/), the CJK font
for figures (fonts), and the interpreter's own tools and environment (interpreter).

May import: the standard library and zerolab.errors. Nothing else of zerolab.
"""
