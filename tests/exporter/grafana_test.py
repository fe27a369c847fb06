#!/usr/bin/env python3
"""exporters/grafana/xport.json is what exporters/grafana/make_dashboard.py writes, parses, has a
Prometheus datasource variable and variables for the scrape job, the instance (node), the
process's job (xport_job) and rank; every query selects by instance and groups by it (a fleet's
nodes stay apart: they merged when `sum by` dropped instance), names no pid (no such label), and
queries only metrics docs/metrics.md documents; the panels the issues ask for are there (per
node throughput and failures, the channel pool row, the failure counters: peers lost, rail
quarantines and error completions, staging copy errors, telemetry blocks dropped, registered
bytes); the example scrape config scrapes with honor_labels false and loads the rules."""
import json
import re
import subprocess
import sys
import tempfile

from metrics_doc import ROOT, documented, names_in_expr

AGGREGATIONS = re.compile(r"\b(sum|max|min|count|avg)\s+by\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\b(xport_[a-z0-9_]+)\{([^}]*)\}")


def main():
    failures = []
    grafana = ROOT / "exporters" / "grafana"
    with tempfile.TemporaryDirectory() as tmp:
        fresh = subprocess.run([sys.executable, str(grafana / "make_dashboard.py"), f"{tmp}/x.json"],
                               capture_output=True, text=True, timeout=60)
        if fresh.returncode != 0 or open(f"{tmp}/x.json").read() != (grafana / "xport.json").read_text():
            failures.append("exporters/grafana/xport.json differs from what make_dashboard.py writes "
                            f"(run it): {fresh.stderr[-500:]}")
    dash = json.loads((grafana / "xport.json").read_text())
    docs = documented()
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        failures.append("no datasource variable of type prometheus")
    for name, label in (("job", "job"), ("instance", "instance"), ("xport_job", "xport_job"),
                        ("rank", "rank")):
        v = variables.get(name)
        if not v or f", {label})" not in v.get("definition", ""):
            failures.append(f"no variable '{name}' listing label values of {label}")
    exprs = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            if p.get("type") == "row":
                continue
            if p.get("datasource", {}).get("uid") != "${datasource}":
                failures.append(f"panel '{p.get('title')}' does not use the datasource variable")
            targets = p.get("targets", [])
            if not targets:
                failures.append(f"panel '{p.get('title')}' has no query")
            for t in targets:
                exprs.append((p.get("title"), t.get("expr", "")))

    walk(dash.get("panels", []))
    # The channel pool row: the panels after it (up to the next row) cover the pool's sharing.
    pool_exprs, row = [], None
    for p in dash.get("panels", []):
        if p.get("type") == "row":
            row = p.get("title")
            continue
        if row == "Channel pool":
            pool_exprs += [(p.get("title"), t.get("expr", "")) for t in p.get("targets", [])]
    if not pool_exprs:
        failures.append("no 'Channel pool' row with panels")
    pool_titles = " | ".join(t for t, _ in pool_exprs).lower()
    for needed in ["channels", "comms attached", "primaries vs secondaries", "routing misses",
                   "ops per channel"]:
        if needed not in pool_titles:
            failures.append(f"'Channel pool' row: no panel about '{needed}'")
    pool_used = set().union(*(names_in_expr(e) for _, e in pool_exprs)) if pool_exprs else set()
    for n in ["xport_pool_channels", "xport_pool_cqs", "xport_pool_comms_attached",
              "xport_pool_primaries_total", "xport_pool_secondaries_total",
              "xport_pool_routing_misses_total", "xport_pool_channel_ops_total",
              "xport_pool_busiest_channel_ops"]:
        if n not in pool_used:
            failures.append(f"'Channel pool' row: no panel queries {n}")
    titles = " | ".join(t for t, _ in exprs).lower()
    for needed in ["throughput per gpu", "rail balance", "rail state", "sharing", "poll efficiency",
                   "error", "per node", "failures per node", "registered bytes"]:
        if needed not in titles:
            failures.append(f"no panel about '{needed}'")
    used = set()
    for title, e in exprs:
        names = names_in_expr(e)
        if not names:
            failures.append(f"panel '{title}': query names no xport_ metric: {e}")
        for n in sorted(names):
            used.add(n)
            if n not in docs:
                failures.append(f"panel '{title}' queries {n}, which docs/metrics.md does not list")
        # Fleet: every aggregation keeps the node, every selector takes the instance variable,
        # library series the process's job and rank too; no pid (a label no series has).
        for op, by in AGGREGATIONS.findall(e):
            if "instance" not in [x.strip() for x in by.split(",")]:
                failures.append(f"panel '{title}': '{op} by ({by})' merges the nodes: {e}")
        for metric, sel in SELECTOR.findall(e):
            if 'instance=~"$instance"' not in sel or 'job=~"$job"' not in sel:
                failures.append(f"panel '{title}': {metric} not selected by $job and $instance")
            if not metric.startswith(("xport_exporter_", "xport_build_info")) and \
                    ('xport_job=~"$xport_job"' not in sel or 'rank=~"$rank"' not in sel):
                failures.append(f"panel '{title}': {metric} not selected by $xport_job and $rank")
        if names_in_expr(SELECTOR.sub("", e)):
            failures.append(f"panel '{title}': a metric without a selector: {e}")
        if re.search(r"\bpid\b", e):
            failures.append(f"panel '{title}': pid is no label (xport_process_info has it): {e}")
    for n in ["xport_device_peers_lost_total", "xport_rail_quarantine_events_total",
              "xport_rail_error_completions_total", "xport_gpu_staging_copy_errors_total",
              "xport_telemetry_blocks_dropped_total", "xport_device_registered_bytes",
              "xport_process_info", "xport_build_info"]:
        if n not in used:
            failures.append(f"no panel queries {n}")
    scrape = (ROOT / "exporters" / "prometheus" / "prometheus.yml").read_text()
    if ":9876" not in scrape or re.search(r"honor_labels:\s*true", scrape) or \
            "rules/xport-alerts.yml" not in scrape or "rules/xport-recording.yml" not in scrape:
        failures.append("exporters/prometheus/prometheus.yml: scrape :9876 with honor_labels "
                        "false, loading rules/xport-alerts.yml and rules/xport-recording.yml")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(exprs)} queries over {len(used)} metrics, all documented, all per instance"
          if not failures else f"{len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
