"""The command line as the installed package has it: the wheel (and the container image) carries `bench`
but not the test suite, so every command, `livefuse eval`'s included, must build its parser without
`tests` importable (deploy/image_check.py builds `serve`'s services the same way)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

NO_TESTS = """
import importlib.abc, sys
class NoTests(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "tests" or name.startswith("tests."):
            raise ModuleNotFoundError(f"No module named {name!r} (as in the installed package)")
sys.meta_path.insert(0, NoTests())
from streamer.app.cli import build_parser
parser = build_parser()
for argv in (["serve"], ["eval", "edits"], ["eval", "fusion"], ["eval", "prompts"], ["bench", "avatar"]):
    parser.parse_args(argv)
print("parsed")
"""


def test_every_command_parses_without_the_test_suite():
    r = subprocess.run([sys.executable, "-c", NO_TESTS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "parsed" in r.stdout, r.stderr[-3000:]
