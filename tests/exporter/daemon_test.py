#!/usr/bin/env python3
"""xport-exporter as a daemon people deploy: `--listen :PORT` listens on every interface (as
node_exporter's :9100; it bound loopback), a malformed --listen is bad usage (exit 2, it was 1),
a --shm-dir that does not exist is an error (exit 1, one line; it served an empty node), /metrics
is gzipped when the client asks (and only then), /healthz answers 200 while the directory can be
read and 503 naming it when it cannot, and the systemd unit of exporters/systemd passes
`systemd-analyze verify` and starts the exporter with its own arguments.
Usage: daemon_test.py XPORT_EXPORTER. Every wait has a deadline."""
import gzip
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from metrics_doc import ROOT

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def start(exporter, *args):
    """Starts the exporter; returns (process, port) once it says where it listens."""
    p = subprocess.Popen([exporter, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    line = p.stderr.readline()  # its first line, or EOF when it exits (bounded by its startup)
    m = re.search(r"listening on http://(\S+):(\d+)/", line)
    if not m:
        p.kill()
        p.wait(timeout=30)
        return None, None, line
    return p, int(m.group(2)), m.group(1)


def get(url, headers=None, method="GET"):
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def main():
    exporter = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="xport-daemon-")
    procs = []
    try:
        shm = os.path.join(tmp, "shm")
        os.mkdir(shm, 0o700)
        # Usage and a missing directory: one line each, exit 2 and 1.
        for args, rc, says in ((["--listen", "nonsense"], 2, "--listen 'nonsense'"),
                               (["--listen", "1.2.3:80"], 2, "not an IPv4 address"),
                               (["--listen", ":99999"], 2, "port '99999'"),
                               (["--max-processes", "0"], 2, "--max-processes: '0' is out of range"),
                               (["--shm-dir", os.path.join(tmp, "nope"), "--once"], 1,
                                "No such file or directory"),
                               (["--shm-dir", os.path.join(tmp, "nope")], 1,
                                "No such file or directory")):
            r = subprocess.run([exporter, *args], capture_output=True, text=True, timeout=30)
            check(r.returncode == rc and r.stderr.count("\n") == 1 and
                  r.stderr.startswith("xport-exporter: ") and says in r.stderr,
                  f"{args}: exit {rc} and one line naming {says!r} (got {r.returncode}: {r.stderr!r})")

        # :PORT is every interface.
        p, port, host = start(exporter, "--listen", ":0", "--shm-dir", shm)
        if check(p is not None, f"--listen :0 starts (got {host!r})"):
            procs.append(p)
            check(host == "0.0.0.0", f"--listen :0 listens on 0.0.0.0, not {host}")
            base = f"http://127.0.0.1:{port}"
            status, headers, body = get(base + "/healthz")
            check(status == 200 and body == b"ok\n", f"/healthz: 200 ok (got {status} {body!r})")
            status, headers, body = get(base + "/healthz", method="HEAD")
            check(status == 200 and body == b"", f"HEAD /healthz: 200, no body ({status})")
            # gzip only when asked for.
            status, headers, plain = get(base + "/metrics")
            check(status == 200 and "Content-Encoding" not in headers and
                  plain.startswith(b"# HELP"), f"/metrics plain without Accept-Encoding: {headers}")
            status, headers, body = get(base + "/metrics", {"Accept-Encoding": "gzip, deflate"})
            ok = status == 200 and headers.get("Content-Encoding") == "gzip"
            if check(ok, f"/metrics gzipped when asked: {status} {headers}"):
                text = gzip.decompress(body)
                check(b"xport_build_info{" in text and len(body) < len(text),
                      "the gzipped exposition decompresses to the metrics, smaller")
            status, headers, body = get(base + "/metrics", {"Accept-Encoding": "gzip;q=0"})
            check("Content-Encoding" not in headers, f"gzip;q=0 is a refusal: {headers}")
            # The directory goes away: /healthz says so within a tick or two.
            os.rmdir(shm)
            end, status = time.monotonic() + 10, 0
            while time.monotonic() < end:
                status, _, body = get(base + "/healthz")
                if status == 503:
                    break
                time.sleep(0.2)  # the exporter's tick is 1 s; bounded by the deadline
            check(status == 503 and shm.encode() in body,
                  f"/healthz: 503 naming the directory once it is gone (got {status} {body!r})")
            os.mkdir(shm, 0o700)
            p.send_signal(signal.SIGTERM)
            check(p.wait(timeout=30) == 0, "SIGTERM: a clean stop, exit 0")

        # The systemd unit: it verifies, and its ExecStart runs as written (the binary's path
        # and the directory replaced, an ephemeral port).
        unit = (ROOT / "exporters" / "systemd" / "xport-exporter.service").read_text()
        m = re.search(r"^ExecStart=(\S+) (.*)$", unit, re.M)
        if check(m is not None, "the unit has an ExecStart"):
            args = m.group(2).split()
            check("--listen" in args and args[args.index("--listen") + 1].startswith(":"),
                  f"the unit listens on every interface: {args}")
            local = unit.replace(m.group(1), os.path.abspath(exporter))
            path = os.path.join(tmp, "xport-exporter.service")
            with open(path, "w") as f:
                f.write(local)
            if shutil.which("systemd-analyze"):
                r = subprocess.run(["systemd-analyze", "verify", path], capture_output=True,
                                   text=True, timeout=60)
                check(r.returncode == 0 and "xport-exporter.service" not in r.stderr,
                      f"systemd-analyze verify: {r.returncode} {r.stderr}")
            else:
                print("SKIP: systemd-analyze verify (systemd not installed)")
            args[args.index("--listen") + 1] = ":0"
            if "--shm-dir" in args:
                args[args.index("--shm-dir") + 1] = shm
            p, port, host = start(exporter, *args)
            if check(p is not None, f"the unit's arguments start the exporter ({host!r})"):
                procs.append(p)
                status, _, _ = get(f"http://127.0.0.1:{port}/healthz")
                check(status == 200, f"the unit's exporter is healthy ({status})")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
