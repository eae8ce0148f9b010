"""nbgrader's own command line without jsonschema's slow "iri" checker, as zerolab's grading workers start it
(zerolab.base.interpreter.skip_the_slow_iri_checker): `python tests/nbgrader_cli.py autograde LESSON` is
`python -m nbgrader autograde LESSON` a second or two sooner. The suite starts nbgrader about forty times;
tests/test_tools_startup.py checks that no schema nbgrader reads uses the formats the checker serves."""
from zerolab.base.interpreter import skip_the_slow_iri_checker

skip_the_slow_iri_checker()
from nbgrader.apps.nbgraderapp import main  # noqa: E402

main()
