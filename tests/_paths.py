"""Where the tests' files are (the repository, tests/, its saved caches and scripts), from any test folder."""

from __future__ import annotations

import os

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS_DIR)
DATA = os.path.join(TESTS_DIR, "data")
SCRIPTS = os.path.join(TESTS_DIR, "scripts")
