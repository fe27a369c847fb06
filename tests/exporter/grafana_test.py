#!/usr/bin/env python3
"""exporters/grafana/xport.json parses, has a Prometheus datasource variable and the panels the
issue asks for (a "Channel pool" row among them), and queries only metrics docs/metrics.md documents; the example scrape config
targets the exporter's default address with honor_labels."""
import json
import sys

from metrics_doc import ROOT, documented, names_in_expr


def main():
    dash = json.loads((ROOT / "exporters" / "grafana" / "xport.json").read_text())
    docs = documented()
    failures = []
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        failures.append("no datasource variable of type prometheus")
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
    if row is None or not pool_exprs:
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
                   "error"]:
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
    scrape = (ROOT / "exporters" / "prometheus" / "prometheus.yml").read_text()
    if "127.0.0.1:9876" not in scrape or "honor_labels: true" not in scrape:
        failures.append("exporters/prometheus/prometheus.yml: no 127.0.0.1:9876 target with honor_labels")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(exprs)} queries over {len(used)} metrics, all documented" if not failures else
          f"{len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
