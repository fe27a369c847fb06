#!/usr/bin/env python3
"""Prints one closing line over every build's results: 'N passed, N failed, N skipped'."""
import json
import pathlib
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
for d in map(pathlib.Path, sys.argv[1:]):
    junit = d / "meson-logs" / "testlog.junit.xml"
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    fuzz = d / "fuzz-results.json"
    if fuzz.exists():
        for r in json.loads(fuzz.read_text()):
            if r["result"] == "OK":
                passed += 1
            else:
                failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
