#!/usr/bin/env python3
"""End to end: xport-loopback processes publish, xport-exporter serves, a real Prometheus
scrapes (honor_labels: false: the processes are told apart by rank, their pids are on
xport_process_info, which joins up on instance), Prometheus's HTTP API answers; then a SIGKILLed
process is dropped and counted, and the status page (with its channel pool tables) loads in
headless Chromium (screenshot kept as an artifact; status_page_test.py checks the page itself).
Usage: e2e_test.py XPORT_EXPORTER XPORT_LOOPBACK ARTIFACT_DIR. Exit 77 (skip) without the
`prometheus` or `chromium` binaries (Debian packages of the same names; scripts/dev.sh installs
them). Everything listens on 127.0.0.1 only; every wait has a deadline."""
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

POLL = 0.25  # seconds between polls of a condition that has a deadline


class Failure(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_for(what, deadline_s, fn):
    """Polls fn() until it returns a true value; raises Failure naming `what` at the deadline."""
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # a server not up yet, a connection refused: keep polling
            last = e
        time.sleep(POLL)
    raise Failure(f"timed out after {deadline_s} s waiting for {what}" + (f" (last error: {last})" if last else ""))


def line_reader(stream):
    q = queue.Queue()

    def pump():
        for line in iter(stream.readline, b""):
            q.put(line.decode(errors="replace"))
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def read_line(q, what, deadline_s, match):
    end = time.monotonic() + deadline_s
    seen = []
    while time.monotonic() < end:
        try:
            line = q.get(timeout=max(0.05, end - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            raise Failure(f"{what}: stream closed; output was:\n{''.join(seen)[-3000:]}")
        seen.append(line)
        if match(line):
            return line
    raise Failure(f"timed out after {deadline_s} s waiting for {what}; output so far:\n{''.join(seen)[-3000:]}")


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr):
        url = self.base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        _, body = http_get(url)
        data = json.loads(body)
        if data.get("status") != "success":
            raise Failure(f"Prometheus query {expr!r} failed: {body[:500]}")
        return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in data["data"]["result"]}

    def scalar(self, expr):
        r = self.query(expr)
        return next(iter(r.values())) if r else None


def loopback_totals(report):
    """Bytes the loopback's own counters (both devices, every endpoint and op) counted."""
    total = 0
    for dev in report["stats"]:
        for ep in dev["endpoints"]:
            total += sum(v for k, v in ep.items() if k.endswith("_bytes"))
    return total


def main():
    exporter, loopback, artifacts = sys.argv[1], sys.argv[2], sys.argv[3]
    prom_bin, chromium = shutil.which("prometheus"), shutil.which("chromium")
    if not prom_bin or not chromium:
        print(f"SKIP: needs the prometheus and chromium binaries (found prometheus={prom_bin}, "
              f"chromium={chromium}); scripts/dev.sh installs the Debian packages")
        return 77
    tmp = tempfile.mkdtemp(prefix="xport-e2e-")
    shm = os.path.join(tmp, "shm")
    os.mkdir(shm, 0o700)
    procs = []

    def spawn(args, **kw):
        p = subprocess.Popen(args, **kw)
        procs.append(p)
        return p

    try:
        # 1. The exporter on a port it picks; it says which.
        exp = spawn([exporter, "--listen", "127.0.0.1:0", "--shm-dir", shm],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        line = read_line(line_reader(exp.stderr), "xport-exporter's 'listening on' line", 30,
                         lambda l: "listening on" in l)
        exp_port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
        exp_url = f"http://127.0.0.1:{exp_port}"
        status, _ = http_get(exp_url + "/metrics")
        if status != 200:
            raise Failure(f"/metrics answered {status}")
        try:
            http_get(exp_url + "/nothing")
            raise Failure("/nothing did not answer 404")
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise Failure(f"/nothing answered {e.code}, expected 404")

        # 2. Prometheus scraping it every second.
        prom_port = free_port()
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: xport
    static_configs:
      - targets: ['127.0.0.1:{exp_port}']
""")
        prom_log = open(os.path.join(tmp, "prometheus.log"), "w")
        prom_proc = spawn([prom_bin, f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{prom_port}",
                           f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}", "--log.level=warn"],
                          stdout=prom_log, stderr=subprocess.STDOUT)
        prom = Prometheus(prom_port)

        def prom_ready():
            if prom_proc.poll() is not None:
                raise Failure("prometheus exited: " + open(prom_log.name).read()[-2000:])
            return http_get(prom.base + "/-/ready")[0] == 200

        wait_for("Prometheus to be ready", 90, prom_ready)
        wait_for("Prometheus to scrape the exporter (target up)", 60,
                 lambda: prom.scalar('up{job="xport"}') == 1.0)

        # 3. Two libxport processes under steady load. The first stops after its --duration,
        #    prints its totals and holds its devices open so the final counters get scraped.
        env = dict(os.environ, XPORT_TELEMETRY_DIR=shm, XPORT_JOB="e2e",
                   XPORT_TELEMETRY_INTERVAL_MS="100")
        lb1 = spawn([loopback, "--bytes", "64K", "--duration", "30", "--hold", "20", "--json"],
                    env=dict(env, XPORT_RANK="0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lb2 = spawn([loopback, "--bytes", "64K", "--duration", "300", "--json"],
                    env=dict(env, XPORT_RANK="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lb1_out = line_reader(lb1.stdout)
        pids = {str(lb1.pid), str(lb2.pid)}
        ranks = {"0", "1"}

        # Processes apart by rank (no pid label: docs/metrics.md); the scrape's job and instance
        # are the target's (honor_labels: false), the process's job is xport_job.
        def rates():
            r = prom.query('sum by (rank) (rate(xport_endpoint_bytes_total{job="xport", xport_job="e2e"}[5s]))')
            got = {json.loads(k)["rank"]: v for k, v in r.items()}
            for p in (lb1, lb2):
                if p.poll() is not None:
                    raise Failure(f"xport-loopback {p.pid} exited early ({p.returncode}): "
                                  + p.stderr.read().decode()[-2000:])
            return got if ranks <= got.keys() and all(got[r] > 0 for r in ranks) else None

        got = wait_for("positive per-rail byte rates of both processes in Prometheus", 60, rates)
        print("rate(xport_endpoint_bytes_total[5s]) by rank:",
              {p: f"{v / 1e6:.1f} MB/s" for p, v in got.items()})
        per_rail = prom.query('sum by (instance, rank, device, rail) (rate(xport_endpoint_bytes_total{xport_job="e2e"}[5s]))')
        print("per rail:", {k: f"{v / 1e6:.1f} MB/s" for k, v in per_rail.items()})
        found = prom.query('count by (rank) (xport_process_devices{xport_job="e2e"})')
        if len(found) != 2:
            raise Failure(f"expected ranks 0 and 1 in xport_process_devices, got {list(found)}")
        # The pids are on xport_process_info alone, and join to the up series of the target.
        info = prom.query('xport_process_info{xport_job="e2e"} * on(instance, job) group_left() up')
        seen = {json.loads(k).get("pid") for k in info}
        if seen != pids:
            raise Failure(f"xport_process_info joined with up has pids {seen}, expected {pids}")

        # 4. The status page in headless Chromium, both processes on it.
        os.makedirs(artifacts, exist_ok=True)
        shot = os.path.join(artifacts, "status-page.png")
        chrome = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", f"--user-data-dir={os.path.join(tmp, 'chromium')}",
                  "--window-size=1200,900"]
        dom = subprocess.run(chrome + ["--dump-dom", exp_url + "/"], capture_output=True, text=True,
                             timeout=120).stdout
        for p in pids:
            if f'id="pid-{p}"' not in dom:
                raise Failure(f"status page in Chromium does not show pid {p}:\n{dom[:3000]}")
        if dom.count("<h3>Channel pool</h3>") < len(pids):
            raise Failure(f"status page in Chromium has no channel pool table per process:\n{dom[:3000]}")
        subprocess.run(chrome + [f"--screenshot={shot}", exp_url + "/"], capture_output=True,
                       timeout=120)
        if not os.path.exists(shot) or os.path.getsize(shot) == 0:
            raise Failure("Chromium wrote no screenshot")
        print("status page screenshot:", shot)

        # 5. SIGKILL the second process: the exporter drops its series, removes its segment and
        #    counts it as dead.
        lb2.send_signal(signal.SIGKILL)
        lb2.wait(timeout=30)
        seg2 = os.path.join(shm, f"xport-{os.geteuid()}-{lb2.pid}")

        def dropped():
            _, text = http_get(exp_url + "/metrics")
            gone = f'pid="{lb2.pid}"' not in text
            dead = re.search(r'xport_exporter_segments_rejected_total\{reason="dead"\} (\d+)', text)
            return gone and dead and int(dead.group(1)) >= 1 and not os.path.exists(seg2)

        wait_for(f"the exporter to drop killed pid {lb2.pid} and count it as dead", 30, dropped)
        wait_for("Prometheus to see the dead segment counted", 30,
                 lambda: (prom.scalar('xport_exporter_segments_rejected_total{reason="dead"}') or 0) >= 1)
        print(f"killed pid {lb2.pid}: dropped, segment removed, counted as dead")

        # 6. The first process's own totals against what Prometheus stored.
        report = json.loads(read_line(lb1_out, "xport-loopback's JSON summary", 120,
                                      lambda l: l.startswith("{")))
        if not report.get("ok"):
            raise Failure(f"xport-loopback failed: {report.get('error')}")
        own = loopback_totals(report)
        expr = 'sum(xport_endpoint_bytes_total{xport_job="e2e", rank="0"})'

        # The process holds its devices open after the summary, so the last scrape carries the
        # exact final counters; a sample within 5% is accepted if the exact one is not seen.
        def final():
            v = prom.scalar(expr)
            return v if v is not None and v == own else None

        try:
            stored = wait_for("Prometheus's last sample to equal the loopback's totals", 15, final)
        except Failure:
            stored = prom.scalar(expr)
            if stored is None or abs(stored - own) > 0.05 * own:
                raise Failure(f"{expr} = {stored}, loopback counted {own} bytes (more than 5% apart)")
        run_rate = prom.scalar('max_over_time(sum(rate(xport_endpoint_bytes_total{xport_job="e2e", rank="0"}[5s]))[2m:1s])')
        print(f"pid {lb1.pid}: loopback counted {own} bytes over {report['rounds']} rounds; "
              f"Prometheus has {stored:.0f} ({100 * (stored - own) / own:+.2f}%); "
              f"peak rate {run_rate / 1e6 if run_rate else 0:.1f} MB/s")

        # The pool's counters: what the process's devices report of themselves (channels, comms
        # attached, primaries and secondaries) is what Prometheus stored from the exporter.
        for field, metric in (("channels", "xport_pool_channels"),
                              ("comms_attached", "xport_pool_comms_attached"),
                              ("primaries", "xport_pool_primaries_total"),
                              ("secondaries", "xport_pool_secondaries_total"),
                              ("routing_misses", "xport_pool_routing_misses_total")):
            want = sum(dev["pool"][field] for dev in report["stats"])
            pexpr = f'sum({metric}{{xport_job="e2e", rank="0"}})'

            def same(pexpr=pexpr, want=want):
                v = prom.scalar(pexpr)
                return True if v is not None and v == want else None

            wait_for(f"{pexpr} to equal the loopback's own {field} ({want})", 15, same)
        print(f"pid {lb1.pid}: pool counters in Prometheus equal the loopback's own "
              f"({', '.join(str(dev['pool']) for dev in report['stats'])})")

        # 7. Normal exit removes the segment.
        lb1.wait(timeout=60)
        if lb1.returncode != 0:
            raise Failure(f"xport-loopback exited with {lb1.returncode}; its stderr: "
                          + lb1.stderr.read().decode(errors="replace")[-3000:])
        seg1 = os.path.join(shm, f"xport-{os.geteuid()}-{lb1.pid}")
        if os.path.exists(seg1):
            raise Failure(f"{seg1} still exists after a normal exit")
        print("OK")
        return 0
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
