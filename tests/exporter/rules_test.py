#!/usr/bin/env python3
"""The Prometheus files of exporters/prometheus: `promtool check rules` on the recording and
alerting rules, `promtool test rules` on their unit tests (per-instance aggregation of two
nodes, a rail down, lost peers, an exporter down fire with the labels that name node, process
and rail), and `promtool check config` on the example scrape config that loads them.
Exit 77 (skip) without promtool (Debian package prometheus; scripts/dev.sh installs it)."""
import shutil
import subprocess
import sys

from metrics_doc import ROOT


def main():
    promtool = shutil.which("promtool")
    if not promtool:
        print("SKIP: needs promtool (the Debian package prometheus; scripts/dev.sh installs it)")
        return 77
    prom = ROOT / "exporters" / "prometheus"
    rules = prom / "rules"
    failures = []
    for args, cwd in ((["check", "rules", "xport-recording.yml", "xport-alerts.yml"], rules),
                      (["test", "rules", "xport-rules.test.yml"], rules),
                      (["check", "config", "prometheus.yml"], prom)):
        r = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
        print(f"promtool {' '.join(args)}: exit {r.returncode}")
        if r.returncode != 0 or "SUCCESS" not in r.stdout + r.stderr:
            failures.append(f"promtool {' '.join(args)}: {r.stdout[-2000:]} {r.stderr[-2000:]}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
