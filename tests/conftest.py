import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from tests.submissions.graded import graded_corpus  # noqa: E402,F401 (one unsharded corpus run per session)
