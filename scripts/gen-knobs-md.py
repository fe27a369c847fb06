#!/usr/bin/env python3
"""Writes docs/knobs.md from libxport/src/core/knob_table.inc (run after adding a knob)."""
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
table = "\n".join(l for l in (root / "libxport/src/core/knob_table.inc").read_text().splitlines() if not l.lstrip().startswith("//"))
types = {"boolean": "bool", "integer": "int", "size": "size", "string": "string",
         "duration_ms": "duration_ms", "auto_integer": "int or auto"}
rows = []
for m in re.finditer(r'XPORT_KNOB\(\s*(\w+),\s*(\w+),\s*"([^"]+)",\s*"([^"]*)",\s*((?:"[^"]*"\s*)+)\)', table):
    _, typ, name, default, desc = m.groups()
    text = " ".join(re.findall(r'"([^"]*)"', desc)).replace("  ", " ")
    rows.append(f"| `{name}` | {types[typ]} | `{default}` | {text.replace('|', '/')} |")
doc = """# Knobs

Every `XPORT_*` environment variable libxport reads. Each is typed, has a default, and reports
where its current value came from (`default` or `environment`): `xport::knob_list()` returns
them, and `xport-probe` prints those in effect. A value that does not parse, or one outside the
range its description states, makes `Context::open` fail with an error naming the variable and
the bound (`XPORT_RX_BUFFERS='8': at least 16 is allowed`). Three knobs hold the value to
their range instead, as their descriptions say: `XPORT_WINDOW_CREDITS` and
`XPORT_TELEMETRY_INTERVAL_MS` (clamped, as they always were), and `XPORT_STRIPE_MIN`, raised to
twice `XPORT_STRIPE_ALIGN`. The NCCL plugin's knobs are checked by the plugin when NCCL loads
it. An unknown `XPORT_*` name is
logged as a warning. Sizes accept `K`, `M`, `G` (binary) suffixes; durations accept `ms` or
`s`.

This file is generated from `libxport/src/core/knob_table.inc` by `scripts/gen-knobs-md.py`;
a unit test fails when a knob is missing here.

| knob | type | default | meaning |
|---|---|---|---|
""" + "\n".join(rows) + "\n"
(root / "docs/knobs.md").write_text(doc)
print(f"docs/knobs.md: {len(rows)} knobs")
