#!/usr/bin/env python3
"""Writes docs/knobs.md from libxport/src/core/knob_table.inc (run after adding a knob)."""
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
table = "\n".join(l for l in (root / "libxport/src/core/knob_table.inc").read_text().splitlines() if not l.lstrip().startswith("//"))
types = {"boolean": "bool", "integer": "int", "size": "size", "string": "string",
         "duration_ms": "duration_ms", "auto_integer": "int or auto"}
limits = dict(re.findall(r'XPORT_KNOB_LIMIT\(\s*(\w+),\s*"([^"]*)"\)', table))


def accepts(typ, limit, desc):
    """The range column: what the knob accepts beyond its type (core/knob.cc enforces it)."""
    if limit is None and "clamped" in desc:
        return "0.. (clamped)"
    if limit is None:
        return {"boolean": "1/0, true/false, yes/no, on/off"}.get(typ, "any" if typ == "string" else "0..")
    if "|" in limit:
        return ", ".join(f"`{w}`" for w in limit.split("|"))
    bounds, _, pow2 = limit.partition(" ")
    lo, hi = bounds.split("..")
    unit = " ms" if typ == "duration_ms" else ""
    text = f"{lo}..{hi}{unit}" if hi else f"at least {lo}{unit}"
    if typ == "auto_integer":
        text = "`auto` or " + text
    return text + (", a power of two" if pow2 == "pow2" else "")


rows = []
for m in re.finditer(r'XPORT_KNOB\(\s*(\w+),\s*(\w+),\s*"([^"]+)",\s*"([^"]*)",\s*((?:"[^"]*"\s*)+)\)', table):
    ident, typ, name, default, desc = m.groups()
    text = " ".join(re.findall(r'"([^"]*)"', desc)).replace("  ", " ")
    rng = accepts(typ, limits.get(ident), text)
    rows.append(f"| `{name}` | {types[typ]} | `{default}` | {rng} | {text.replace('|', '/')} |")
doc = """# Knobs

Every `XPORT_*` environment variable libxport reads. Each is typed, has a default, and reports
where its current value came from (`default` or `environment`): `xport::knob_list()` returns
them, and `xport-probe --knobs` prints those in effect. A value that does not parse, or one outside the
range or words of its `range` column (`XPORT_LOG_LEVEL=loud`, `XPORT_TIMEOUT_MS=0`), makes
`Context::open` fail with an error naming the variable and the bound or the words
(`XPORT_RX_BUFFERS='8': at least 16 is allowed`). Three knobs hold the value to
their range instead, as their descriptions say: `XPORT_WINDOW_CREDITS` and
`XPORT_TELEMETRY_INTERVAL_MS` (clamped, as they always were), and `XPORT_STRIPE_MIN`, raised to
twice `XPORT_STRIPE_ALIGN`. The NCCL plugin's knobs are checked by the plugin when NCCL loads
it. An unknown `XPORT_*` name is
logged as a warning. Sizes accept `K`, `M`, `G` (binary) suffixes; durations accept `ms` or
`s`.

This file is generated from `libxport/src/core/knob_table.inc` by `scripts/gen-knobs-md.py`:
the `range` column from the same table's `XPORT_KNOB_LIMIT` entries that `core/knob.cc`
enforces ("0..": any non-negative number; "clamped": held to the range the meaning states,
never refused); a unit test fails when a knob is missing here.

| knob | type | default | range | meaning |
|---|---|---|---|---|
""" + "\n".join(rows) + "\n"
(root / "docs/knobs.md").write_text(doc)
print(f"docs/knobs.md: {len(rows)} knobs")
