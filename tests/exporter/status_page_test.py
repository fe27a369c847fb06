#!/usr/bin/env python3
"""The status page in headless Chromium, with two xport-loopback processes on the node: the
page's own script draws every chart (node throughput, operations and errors, per rail, one per
process) from data in the page, as SVG with a line per series; no table cell wraps (the ops/s
cell did); the node's totals and failure counters, the GPU-NIC plan of both processes and the
per-kind tables are there, the raw dump of metric names ("Rails and info") is not; the page
loads nothing from elsewhere. The screenshot (written to ARTIFACT_DIR, never to the source
tree) must show the charts: pixels of the first two series' colours.
Usage: status_page_test.py XPORT_EXPORTER XPORT_LOOPBACK ARTIFACT_DIR. Exit 77 without
chromium (Debian package chromium; scripts/dev.sh installs it)."""
import html
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import zlib

from e2e_test import Failure, http_get, line_reader, read_line, wait_for

CHART_COLOURS = [(0x1f, 0x77, 0xb4), (0xd6, 0x27, 0x28)]  # the page script's first two


def png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise Failure(f"{path} is not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                raise Failure(f"screenshot PNG of depth {depth}, colour type {colour}")
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def main():
    exporter, loopback, artifacts = sys.argv[1], sys.argv[2], sys.argv[3]
    chromium = shutil.which("chromium")
    if not chromium:
        print("SKIP: needs chromium (Debian package chromium; scripts/dev.sh installs it)")
        return 77
    tmp = tempfile.mkdtemp(prefix="xport-page-")
    procs = []
    try:
        shm = os.path.join(tmp, "shm")
        os.mkdir(shm, 0o700)
        exp = subprocess.Popen([exporter, "--listen", "127.0.0.1:0", "--shm-dir", shm],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(exp)
        line = read_line(line_reader(exp.stderr), "the exporter's 'listening on' line", 30,
                         lambda l: "listening on" in l)
        url = "http://" + re.search(r"(127\.0\.0\.1:\d+)", line).group(1) + "/"
        pids = []
        for rank in ("0", "1"):
            p = subprocess.Popen([loopback, "--bytes", "64K", "--duration", "60"],
                                 env=dict(os.environ, XPORT_TELEMETRY_DIR=shm, XPORT_JOB="page",
                                          XPORT_RANK=rank, XPORT_TELEMETRY_INTERVAL_MS="100"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            pids.append(p.pid)

        # Charts need a few of the exporter's one-second samples of both processes.
        def ready():
            _, page = http_get(url)
            return all(f'id="pid-{p}"' in page for p in pids) and \
                "rates after a few seconds" not in page
        wait_for("the page to have both processes and a few samples", 40, ready)

        chrome = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", f"--user-data-dir={os.path.join(tmp, 'chromium')}",
                  "--window-size=1400,1000"]
        dom = subprocess.run(chrome + ["--dump-dom", url + "#selftest"], capture_output=True,
                             text=True, timeout=120).stdout
        m = re.search(r'data-selftest="([^"]*)"', dom)
        if not m:
            raise Failure(f"the page's script left no data-selftest (did it run?):\n{dom[:2000]}")
        st = json.loads(html.unescape(m.group(1)))
        print("selftest:", st)
        failures = []

        def check(cond, what):
            if not cond:
                failures.append(what)
            return cond

        check(st["charts"] >= 3 + len(pids), f"node charts and one per process: {st}")
        check(st["drawn"] == st["charts"] and st["lines"] >= st["drawn"] + 2 + len(pids),
              f"every chart drawn, a line per series: {st}")
        check(st["wrapped"] == [], f"no table cell wraps: {st['wrapped']}")
        check(dom.count("<svg") >= st["charts"] and "<polyline" in dom, "SVG charts in the DOM")
        totals = re.search(r'<table id="node-totals">(.*?)</table>', dom, re.S)
        check(totals and re.search(r"<td[^>]*>2</td>", totals.group(1)),
              "node totals count the two processes")
        fails = re.search(r'<table id="node-failures">(.*?)</table>', dom, re.S)
        check(fails and all(h in fails.group(1) for h in
                            ("peers lost", "quarantines", "rail errors", "staging copy errors",
                             "telemetry blocks dropped")), "node failure counters")
        plan = re.search(r'<table id="plan">(.*?)</table>', dom, re.S)
        check(plan and all(f">{p}<" in plan.group(1) for p in pids) and ">shm<" in plan.group(1),
              "the GPU-NIC plan lists both processes' rails")
        for h in ("Endpoints", "Rails", "Completion queues", "Devices", "Channel pool"):
            check(dom.count(f"<h3>{h}</h3>") >= len(pids), f"a {h} table per process")
        check("Rails and info" not in dom and "xport_rail_up" not in dom,
              "no raw dump of metric names")
        check(not re.search(r'(src|href)="(https?:)?//|<link|@import|url\(', dom),
              "nothing loaded from elsewhere")

        os.makedirs(artifacts, exist_ok=True)
        shot = os.path.join(artifacts, "status-page-charts.png")
        subprocess.run(chrome + [f"--screenshot={shot}", url + "#selftest"], capture_output=True,
                       timeout=120)
        if check(os.path.exists(shot), "Chromium wrote the screenshot"):
            w, h, rows = png_pixels(shot)
            near = [0] * len(CHART_COLOURS)
            for row in rows:
                for px in row:
                    for k, c in enumerate(CHART_COLOURS):
                        if sum(abs(px[i] - c[i]) for i in range(3)) < 60:
                            near[k] += 1
            print(f"screenshot {shot} ({w}x{h}): pixels of the chart colours {near}")
            check(all(n >= 100 for n in near), f"the screenshot shows the charts' lines: {near}")
        for f in failures:
            print("FAIL:", f)
        return 1 if failures else 0
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
