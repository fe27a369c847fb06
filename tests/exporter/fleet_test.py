#!/usr/bin/env python3
"""A fleet of two nodes: two xport-exporters (each its own segment directory and port, as two
nodes would be), an xport-loopback publishing on each, and a real Prometheus scraping both with
honor_labels: false (its default). Every query of the Grafana dashboard (exporters/grafana/
xport.json, its variables set to "all") must return series of both nodes, told apart by the
target's instance label; no series may carry exported_job or exported_instance (a library label
colliding with a target label); up{job="xport"} joins the library series on instance.
Queries of metrics only GPU processes serve (docs/metrics.md marks them) are run but may be
empty. Usage: fleet_test.py XPORT_EXPORTER XPORT_LOOPBACK. Exit 77 without prometheus."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from e2e_test import Failure, Prometheus, free_port, http_get, line_reader, read_line, wait_for
from metrics_doc import ROOT, documented, gpu_only, names_in_expr

VARIABLES = {"$job": "xport", "$instance": ".*", "$xport_job": ".*", "$rank": ".*",
             "$__rate_interval": "5s", "$__range": "1m"}


def dashboard_queries():
    dash = json.loads((ROOT / "exporters" / "grafana" / "xport.json").read_text())
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                e = t["expr"]
                for k, v in VARIABLES.items():
                    e = e.replace(k, v)
                out.append((p["title"], e))

    walk(dash["panels"])
    return out


def main():
    exporter, loopback = sys.argv[1], sys.argv[2]
    prom_bin = shutil.which("prometheus")
    if not prom_bin:
        print("SKIP: needs the prometheus binary (Debian package prometheus; scripts/dev.sh)")
        return 77
    tmp = tempfile.mkdtemp(prefix="xport-fleet-")
    procs = []

    def spawn(args, **kw):
        p = subprocess.Popen(args, **kw)
        procs.append(p)
        return p

    try:
        instances = []
        for node in ("a", "b"):
            shm = os.path.join(tmp, f"shm-{node}")
            os.mkdir(shm, 0o700)
            exp = spawn([exporter, "--listen", "127.0.0.1:0", "--shm-dir", shm],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            line = read_line(line_reader(exp.stderr), f"exporter {node}: listening", 30,
                             lambda l: "listening on" in l)
            instances.append("127.0.0.1:" + re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
            # One process per node, of the same job and rank: only the instance tells them apart.
            spawn([loopback, "--bytes", "64K", "--duration", "120"],
                  env=dict(os.environ, XPORT_TELEMETRY_DIR=shm, XPORT_JOB="fleet",
                           XPORT_RANK="0", XPORT_TELEMETRY_INTERVAL_MS="100"),
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        prom_port = free_port()
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: xport
    honor_labels: false
    static_configs:
      - targets: {json.dumps(instances)}
""")
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        prom_proc = spawn([prom_bin, f"--config.file={cfg}",
                           f"--web.listen-address=127.0.0.1:{prom_port}",
                           f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}", "--log.level=warn"],
                          stdout=log, stderr=subprocess.STDOUT)
        prom = Prometheus(prom_port)

        def ready():
            if prom_proc.poll() is not None:
                raise Failure("prometheus exited: " + open(log.name).read()[-2000:])
            return http_get(prom.base + "/-/ready")[0] == 200

        wait_for("Prometheus to be ready", 90, ready)
        want = set(instances)

        def both(expr):
            got = {json.loads(k).get("instance") for k in prom.query(expr)}
            return got == want

        # Rates need a few scrapes of both nodes' traffic.
        wait_for("both nodes' byte rates", 60, lambda: both(
            'sum by (instance) (rate(xport_endpoint_bytes_total{job="xport"}[5s])) > 0'))
        if not both('xport_process_info * on(instance, job) group_left() up{job="xport"}'):
            raise Failure("xport_process_info does not join up{job=\"xport\"} on both instances")
        for label in ("exported_job", "exported_instance"):
            clash = prom.query(f'count by (__name__) ({{{label}!=""}})')
            if clash:
                raise Failure(f"series with {label} (a label colliding with the target's): {clash}")

        docs = documented()
        optional = gpu_only() | {n for n, reserved in docs.items() if reserved}
        checked = skipped = 0
        problems = []
        for title, expr in dashboard_queries():
            names = names_in_expr(expr)
            result = prom.query(expr)
            got = {json.loads(k).get("instance") for k in result}
            if not result and names <= optional:
                skipped += 1
                continue
            # Queries mixing a served metric with a GPU-only one (a + b) may be empty too.
            if not result and names & optional:
                skipped += 1
                continue
            checked += 1
            if got != want:
                problems.append(f"'{title}': {expr}\n    instances {sorted(got, key=str)}, "
                                f"expected {sorted(want)}")
        for p in problems:
            print("FAIL:", p)
        print(f"{checked} dashboard queries show both nodes apart; {skipped} GPU-only queries "
              "empty here")
        return 1 if problems else 0
    except Failure as f:
        print("FAIL:", f)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
