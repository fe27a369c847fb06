#!/usr/bin/env python3
"""Every xport-* tool at its edges: `--version` names the tool, the library version, the git
description and libfabric's version, exit 0; a failure before the tool's main work is one line
on stderr and exit 1, never an uncaught exception, and with --json also one JSON object naming
the error on stdout; every input error (an unknown option, a value that is no number or out of
range, a word not among the option's) is one line "tool: ..." naming it, exit 2, nothing on
stdout; --help shows placeholders, not the parser's notation (FLOAT:FLOAT in [1 - 600], INT,
TEXT). Arguments: NAME=PATH for each tool."""
import json
import os
import re
import subprocess
import sys

from checks import check, failures

tools = dict(a.split("=", 1) for a in sys.argv[1:])


def run(name, *args):
    # As an operator runs them: no XPORT_* variable of the test harness (a knob libxport does
    # not know is a warning line of its own).
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPORT_")}
    return subprocess.run([tools[name], *args], capture_output=True, text=True, timeout=60,
                          env=env)


for name in tools:
    out = run(name, "--version")
    check(out.returncode == 0, f"{name} --version exits 0 (got {out.returncode}: {out.stderr})")
    check(re.fullmatch(rf"{re.escape(name)} \d+\.\d+\.\d+ \(git \S+; libfabric \d+\.\d+\S* "
                       r"loaded, built with \d+\.\d+\.\d+\)\n", out.stdout) is not None,
          f"{name} --version says tool, version, git and libfabric: {out.stdout!r}")


def one_line_failure(name, args, mentions):
    """The failure in `args`: exit 1, one stderr line naming `mentions`, nothing thrown."""
    out = run(name, *args)
    lines = out.stderr.strip().split("\n")
    check(out.returncode == 1, f"{name} {' '.join(args)} exits 1 (got {out.returncode})")
    check(len(lines) == 1 and lines[0].startswith(name + ": ") and mentions in lines[0],
          f"{name} {' '.join(args)}: one line naming {mentions!r} (got {out.stderr!r})")
    check("terminate called" not in out.stderr and "exception" not in out.stderr,
          f"{name} {' '.join(args)}: no uncaught exception ({out.stderr!r})")
    return out


def json_failure(name, args, mentions):
    out = one_line_failure(name, args, mentions)
    try:
        doc = json.loads(out.stdout)
        check(doc.get("tool") == name and mentions in doc.get("error", ""),
              f"{name} {' '.join(args)}: the JSON names the tool and the error: {doc}")
    except json.JSONDecodeError as e:
        check(False, f"{name} {' '.join(args)}: stdout is one JSON object ({e}: {out.stdout!r})")


if "xport-loopback" in tools:
    one_line_failure("xport-loopback", ["--provider", "nosuch"], "'nosuch'")
    json_failure("xport-loopback", ["--provider", "nosuch", "--json"], "'nosuch'")
if "xport-bench" in tools:
    one_line_failure("xport-bench", ["--provider", "nosuch"], "'nosuch'")
    json_failure("xport-bench", ["--provider", "nosuch", "--json"], "'nosuch'")
if "xport-scale" in tools:
    one_line_failure("xport-scale", ["--provider", "nosuch"], "'nosuch'")
    json_failure("xport-scale", ["--provider", "nosuch", "--json"], "'nosuch'")
if "xport-topology" in tools:
    one_line_failure("xport-topology", ["--input", "/nonexistent/topo.xml"], "/nonexistent/topo.xml")
    json_failure("xport-topology", ["--input", "/nonexistent/topo.xml", "--json"],
                 "/nonexistent/topo.xml")
if "xport-probe" in tools:
    # The probe's work is the checklist: a provider that is not there is a FAIL row, exit 1,
    # and the JSON report says so.
    out = run("xport-probe", "--provider", "nosuch", "--skip-loopback", "--json")
    check(out.returncode == 1, f"xport-probe --provider nosuch exits 1 (got {out.returncode})")
    try:
        doc = json.loads(out.stdout)
        check("nosuch" in json.dumps(doc), "xport-probe's JSON names the provider")
    except json.JSONDecodeError as e:
        check(False, f"xport-probe --json prints one JSON object ({e})")
if "xport-exporter" in tools:
    one_line_failure("xport-exporter", ["--listen", "192.0.2.1:9"], "192.0.2.1:9")

# Input errors: one readable line, exit 2; help without the parser's notation.
BAD_INPUT = {
    "xport-topology": [(["--format", "yaml"], "'yaml': expected auto, hwloc or nccl"),
                       (["--json", "--dot"], "--json and --dot exclude each other")],
    "xport-loopback": [(["--iterations", "abc"], "'abc' is not a number"),
                       (["--duration", "-1"], "'-1' is out of range")],
    "xport-bench": [(["--timeout", "0"], "'0' is out of range"),
                    (["--op", "scatter"], "'scatter': expected send, put, get")],
    "xport-probe": [(["--timeout", "abc"], "'abc' is not a number: seconds from 1 to 600")],
    "xport-exporter": [(["--listen", "nonsense"], "--listen 'nonsense'"),
                       (["--max-processes", "x"], "'x' is not a number")],
}
for name in tools:
    for args, says in BAD_INPUT.get(name, []) + [(["--no-such-option"], "--no-such-option")]:
        out = run(name, *args)
        check(out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1 and
              out.stderr.startswith(name + ": ") and says in out.stderr,
              f"{name} {' '.join(args)}: exit 2 and one line saying {says!r} "
              f"(got {out.returncode}: {out.stderr!r})")
    out = run(name, "--help")
    notation = re.findall(r"\b(?:FLOAT|INT|TEXT|UINT)\b|in \[|:\{|Excludes:|Needs:", out.stdout)
    check(out.returncode == 0 and not notation,
          f"{name} --help: placeholders, not the parser's notation {notation}")

if failures:
    sys.exit(1)
print(f"tool edges: {len(tools)} tools checked")
