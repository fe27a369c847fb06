#!/usr/bin/env python3
"""Runs the Meson test suite of one build directory and prints failures' logs."""
import subprocess
import sys

build = sys.argv[1]
# Further arguments name the tests to run (default: all).
cmd = ["meson", "test", "-C", build, "--print-errorlogs", "--num-processes", "2"] + sys.argv[2:]
print("== " + " ".join(cmd), flush=True)
sys.exit(subprocess.call(cmd))
