#!/usr/bin/env python3
"""Runs the built xport-topology: the live node (exit 0, empty plan explained on a machine
without GPU or RDMA NIC), a fixture (JSON shape of docs/tools.md), the override and the exit
codes for errors (1) and bad usage (2)."""
import json
import os
import pathlib
import subprocess
import sys

from checks import check, failures

tool = sys.argv[1]
root = pathlib.Path(os.environ.get("XPORT_SOURCE_ROOT", "."))
fixtures = root / "tests" / "fixtures" / "topology"


def run(*args, env_extra=None):
    env = dict(os.environ)
    env.pop("XPORT_NICS", None)
    env.update(env_extra or {})
    return subprocess.run([tool, *args], capture_output=True, text=True, env=env, timeout=60)


def shape(doc, where):
    check(isinstance(doc.get("gpus"), list) and isinstance(doc.get("nics"), list),
          f"{where}: gpus and nics are lists")
    check(isinstance(doc.get("explanation"), str) and isinstance(doc.get("notes"), list),
          f"{where}: explanation and notes present")
    for g in doc["gpus"]:
        check(isinstance(g["pci"], str) and (g["numa"] is None or isinstance(g["numa"], int)),
              f"{where}: gpu pci/numa types")
        for r in g["rails"]:
            check(set(r) >= {"nic", "pci", "distance"} and r["distance"] in
                  {"PIX", "PXB", "PHB", "NODE", "SYS"}, f"{where}: rail fields {r}")
    for n in doc["nics"]:
        check(set(n) >= {"name", "pci", "numa"}, f"{where}: nic fields {n}")


if not (fixtures / "expected-nearest.json").exists():
    print(f"FAIL: topology fixtures not found at {fixtures}")
    sys.exit(1)

# Live node.
live = run("--json")
check(live.returncode == 0, f"live --json exits 0 (got {live.returncode}: {live.stderr})")
doc = json.loads(live.stdout)
shape(doc, "live")
check(doc["source"] == "live", "live source")
if not doc["gpus"] or not doc["nics"]:
    check("the plan is empty" in doc["explanation"], "live empty plan is explained")
text = run()
check(text.returncode == 0, "live table exits 0")
check("Topology (live)" in text.stdout, "live table header")

# A fixture, all three renderings.
p4d = str(fixtures / "hwloc" / "aws-p4d.24xlarge.xml")
out = run("--input", p4d, "--json")
check(out.returncode == 0, f"fixture --json exits 0: {out.stderr}")
doc = json.loads(out.stdout)
shape(doc, "p4d")
check(len(doc["gpus"]) == 8 and len(doc["nics"]) == 4, "p4d has 8 GPUs and 4 NICs")
first = doc["gpus"][0]
check(first["pci"] == "0000:10:1c.0" and first["numa"] == 0, "p4d first GPU")
check([r["nic"] for r in first["rails"]] == ["rdmap16s27"] and
      first["rails"][0]["pci"] == "0000:10:1b.0" and first["rails"][0]["distance"] == "PHB",
      f"p4d first GPU's rail: {first['rails']}")
table = run("--input", p4d)
check(table.returncode == 0 and "G0  0000:10:1c.0  ->  rdmap16s27 (PHB)" in table.stdout,
      "p4d plan line in the table")
dot = run("--input", p4d, "--dot")
check(dot.returncode == 0 and dot.stdout.startswith("graph topology {") and
      "style=dashed" in dot.stdout, "p4d --dot")
nccl = run("--input", str(fixtures / "nccl" / "mi300x-8cx7.xml"), "--json")
check(nccl.returncode == 0 and json.loads(nccl.stdout)["source"] == "nccl-xml", "NCCL detected")

# Overrides: flag and environment, good and bad.
over = run("--input", p4d, "--json", "--nics", "rdmap144s27")
check(over.returncode == 0 and all(g["rails"][0]["nic"] == "rdmap144s27"
                                   for g in json.loads(over.stdout)["gpus"]), "--nics override")
env_over = run("--input", p4d, "--json", env_extra={"XPORT_NICS": "0000:10:1c.0=rdmap32s27"})
check(env_over.returncode == 0 and
      json.loads(env_over.stdout)["gpus"][0]["rails"][0]["nic"] == "rdmap32s27", "XPORT_NICS")
bad = run("--input", p4d, env_extra={"XPORT_NICS": "mlx5_9"})
check(bad.returncode == 1 and "unknown NIC 'mlx5_9'" in bad.stderr and
      len(bad.stderr.strip().splitlines()) == 1, f"bad XPORT_NICS: one line, exit 1: {bad.stderr}")

# Errors and usage.
missing = run("--input", "/nonexistent.xml")
check(missing.returncode == 1 and "/nonexistent.xml" in missing.stderr, "missing file exits 1")
usage = run("--bogus")
check(usage.returncode == 2, f"unknown option exits 2 (got {usage.returncode})")
both = run("--json", "--dot")
check(both.returncode == 2, "--json with --dot exits 2")
helped = run("--help")
check(helped.returncode == 0 and "--input" in helped.stdout, "--help exits 0")

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
