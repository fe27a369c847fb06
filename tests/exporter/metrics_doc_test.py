#!/usr/bin/env python3
"""docs/metrics.md and xport-exporter agree, both ways: the exporter's list of names equals the
documented names, and what it serves from the segment of a real libxport process
(xport-loopback) is documented, while everything documented is served except rows marked
(reserved) or (GPU) (served by processes using GPU memory); and no served series carries a label with an empty value (the loopback runs without
XPORT_RANK and without a GPU); the label contract (no job, instance or pid label but on
xport_process_info, a process label, no space in a value); `promtool check metrics` finds
nothing to say about the exposition. Usage: metrics_doc_test.py XPORT_EXPORTER XPORT_LOOPBACK"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from metrics_doc import documented, gpu_only


def served_names(exporter, shm):
    out = subprocess.run([exporter, "--once", "--shm-dir", shm], check=True, capture_output=True,
                         text=True, timeout=30).stdout
    return set(re.findall(r"^# TYPE (\S+) ", out, re.M)), out


def empty_labels(text):
    """Series lines of an exposition with a label whose value is empty (rank=\"\", gpu=\"\")."""
    return [l for l in text.splitlines()
            if not l.startswith("#") and re.search(r'[{,][a-zA-Z_][a-zA-Z0-9_]*=""[,}]', l)]


def label_problems(text):
    """Series that break the label contract of docs/metrics.md: a label the scrape target owns
    (job, instance: joins with up need honor_labels: false), a pid outside xport_process_info (new
    series on every restart), a library series without its process ordinal, a label value with a
    space (endpoint="rail lo data", cq="cq lo" repeated the rail)."""
    out = []
    for line in text.splitlines():
        m = re.match(r'^(xport_[a-z0-9_]+)\{(.*)\} ', line)
        if not m:
            continue
        name, labels = m.group(1), dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', m.group(2)))
        if "job" in labels or "instance" in labels:
            out.append(f"a target label in {line}")
        if "pid" in labels and name != "xport_process_info":
            out.append(f"pid outside xport_process_info: {line}")
        if not name.startswith("xport_exporter_") and name != "xport_build_info" and \
                "process" not in labels:
            out.append(f"no process label: {line}")
        if any(" " in v for v in labels.values()):
            out.append(f"a label value with a space: {line}")
    return out


def main():
    exporter, loopback = sys.argv[1], sys.argv[2]
    docs = documented()
    reserved = {n for n, r in docs.items() if r}
    needs_gpu = gpu_only()
    failures = []
    listed = set(subprocess.run([exporter, "--list-metrics"], check=True, capture_output=True,
                                text=True, timeout=30).stdout.split())
    for n in sorted(listed - docs.keys()):
        failures.append(f"{n}: the exporter can serve it, docs/metrics.md does not list it")
    for n in sorted(docs.keys() - listed):
        failures.append(f"{n}: documented, but the exporter knows no such metric")

    tmp = tempfile.mkdtemp(prefix="xport-metrics-doc-")
    shm = os.path.join(tmp, "shm")
    os.mkdir(shm, 0o700)
    env = dict(os.environ, XPORT_TELEMETRY_DIR=shm, XPORT_JOB="metrics-doc",
               XPORT_TELEMETRY_INTERVAL_MS="50")
    # No rank and no GPU: the exposition must leave those labels out rather than serve them empty.
    env.pop("XPORT_RANK", None)
    proc = subprocess.Popen([loopback, "--bytes", "64K", "--duration", "2", "--hold", "60"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        served, text = set(), ""
        while time.monotonic() < deadline:
            served, text = served_names(exporter, shm)
            if 'op="write"' in text and re.search(r'xport_endpoint_bytes_total\{[^}]*op="write"[^}]*\} [1-9]', text):
                break
            if proc.poll() is not None:
                failures.append(f"xport-loopback exited early ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
                break
            time.sleep(0.2)  # polling interval, bounded by the deadline
        else:
            failures.append("no endpoint byte counters served within 60 s of starting xport-loopback")
        for n in sorted(served - docs.keys()):
            failures.append(f"{n}: served, but docs/metrics.md does not list it")
        for n in sorted(docs.keys() - served - reserved - needs_gpu):
            failures.append(f"{n}: documented, but not served for a running xport-loopback")
        for n in sorted(served & reserved):
            failures.append(f"{n}: served now: drop '(reserved)' from its row in docs/metrics.md")
        empty = empty_labels(text)
        for line in empty[:5]:
            failures.append(f"a series with an empty label (leave the label out): {line}")
        if len(empty) > 5:
            failures.append(f"... and {len(empty) - 5} more series with an empty label")
        # promtool's lint of the exposition (names, units, help, types), where it is installed.
        promtool = shutil.which("promtool")
        if promtool:
            lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                                  text=True, timeout=60)
            if lint.returncode != 0 or lint.stdout.strip() or lint.stderr.strip():
                failures.append(f"promtool check metrics: {lint.stdout[-2000:]} {lint.stderr[-2000:]}")
        else:
            print("SKIP: promtool check metrics (promtool not installed)")
        problems = label_problems(text)
        failures += problems[:5] + ([f"... and {len(problems) - 5} more"] if len(problems) > 5 else [])
        if not re.search(r'^xport_process_info\{[^}]*pid="%d"[^}]*program="xport-loopback"' % proc.pid,
                         text, re.M):
            failures.append(f"no xport_process_info naming pid {proc.pid} and program xport-loopback")
        if not re.search(r'^xport_build_info\{[^}]*version="\d+\.\d+\.\d+"', text, re.M):
            failures.append("no xport_build_info with the exporter's version")
        if not re.search(r'^xport_pool_channels\{[^}]*device="0"', text, re.M):
            failures.append("no xport_pool_channels series of device 0")
        print(f"documented {len(docs)} ({len(reserved)} reserved), exporter lists {len(listed)}, "
              f"served {len(served)}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
