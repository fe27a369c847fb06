#!/usr/bin/env python3
"""xport-bench streams its results and keeps them whatever ends the run (local mode, shm):
on a pipe, each row is printed as measured (the first point within seconds of the header, while
the sweep goes on); the JSON header record carries tool, version, build, host, time, provider,
rails and the knobs in effect; killing the peer mid-sweep leaves every finished row on stdout,
one stderr line naming the peer's death by SIGKILL, an end record, exit 1; SIGINT and SIGTERM
likewise (exit 130 and 143, the peer ended too); a stopped peer ends the run at --timeout with
the rows kept; a long point shows a status line on a terminal's stderr only; the spawned peer
publishes its telemetry as xport-bench (it was "exe").
Usage: xport_bench_stream_test.py XPORT_BENCH XPORT_EXPORTER. Every wait has a deadline."""
import json
import os
import pty
import queue
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from checks import check, failures

bench, exporter = sys.argv[1], sys.argv[2]
SWEEP = ["--op", "put", "--size", "1:64M"]  # 27 points: about 15 s here


def env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("XPORT_")}
    e.update(extra)
    return e


class Run:
    """xport-bench with its stdout read line by line as it comes, each line timestamped."""

    def __init__(self, *args, timeout="20", stderr=subprocess.PIPE, **kw):
        self.t0 = time.monotonic()
        self.p = subprocess.Popen([bench, "--timeout", timeout, *args], stdout=subprocess.PIPE,
                                  stderr=stderr, text=True, env=kw.get("env", env()))
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.seen = []

    def _pump(self):
        for line in self.p.stdout:
            self.lines.put((time.monotonic() - self.t0, line.rstrip("\n")))
        self.lines.put(None)

    def until(self, n, deadline_s=30):
        """Waits until `n` lines have come; returns them as (seconds, line)."""
        end = time.monotonic() + deadline_s
        while len(self.seen) < n and time.monotonic() < end:
            try:
                item = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                break
            self.seen.append(item)
        return self.seen

    def finish(self, deadline_s=30):
        try:
            self.p.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            check(False, f"{self.p.args}: no exit within {deadline_s} s")
        self.until(10 ** 6, 5)
        err = self.p.stderr.read() if self.p.stderr else ""
        return self.p.returncode, [l for _, l in self.seen], err

    def peer(self):
        """The pid of the spawned peer (this process's child)."""
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                with open(f"/proc/{self.p.pid}/task/{self.p.pid}/children") as f:
                    kids = f.read().split()
                if kids:
                    return int(kids[0])
            except OSError:
                pass
            time.sleep(0.05)  # the peer starts at once; bounded by the deadline
        return None


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


# 1. A JSON sweep on a pipe: rows come as measured; then the peer is SIGKILLed.
tmp = tempfile.mkdtemp(prefix="xport-stream-")
shm = os.path.join(tmp, "shm")
os.mkdir(shm, 0o700)
r = Run(*SWEEP, "--json", env=env(XPORT_TELEMETRY_DIR=shm, XPORT_EAGER_MAX="16K"))
seen = r.until(5)
records = [json.loads(l) for _, l in seen]
if check(len(records) == 5 and records[0].get("record") == "header",
         f"a header record, then points, as they come: {records[:2]}"):
    h = records[0]
    check(h["tool"] == "xport-bench" and re.match(r"\d+\.\d+\.\d+", h["version"]) and h["build"]
          and h["host"] == socket.gethostname() and h["provider"] == "shm" and
          h["rails"] == ["shm"] and h["mode"] == "local" and h["points"] == 27 and
          re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", h["time"]) and
          h["knobs"].get("XPORT_EAGER_MAX") == "16K" and "XPORT_TIMEOUT_MS" in h["knobs"] and
          h["argv"][1:] == ["--timeout", "20", *SWEEP, "--json"], f"header record: {h}")
    first = seen[1][0] - seen[0][0]
    # The header comes before the sessions connect; the 1 B point itself takes well under a
    # second (the margin is for a loaded machine and the sanitizer builds).
    check(records[1]["record"] == "point" and records[1]["size"] == 1 and first < 5,
          f"the first point {first:.2f} s after the header (connecting, then a point of 1 B)")
    check(r.p.poll() is None, "rows arrive while the sweep still runs")
# The peer publishes its telemetry as the executable's name.
exp = subprocess.run([exporter, "--once", "--shm-dir", shm], capture_output=True, text=True,
                     timeout=30).stdout
infos = re.findall(r'^xport_process_info\{([^}]*)\}', exp, re.M)
check(len(infos) == 2 and all('program="xport-bench"' in i and 'xport_job="xport-bench"' in i
                              for i in infos) and "exe" not in exp.replace("xport-exporter", ""),
      f"both processes publish as xport-bench (the peer was job=\"exe\"): {infos}")
peer = r.peer()
done = len(r.seen) - 1
if check(peer is not None, "the sweep still runs, its peer there to kill"):
    os.kill(peer, signal.SIGKILL)
rc, lines, err = r.finish()
recs = [json.loads(l) for l in lines] or [{}]
points = [x for x in recs if x.get("record") == "point"]
check(rc == 1, f"peer killed: exit 1 (got {rc})")
check(len(points) >= done and [p["size"] for p in points] == [2 ** i for i in range(len(points))],
      f"every finished row kept ({len(points)} >= {done}): {[p['size'] for p in points]}")
check(recs[-1].get("record") == "end" and recs[-1]["status"] == "peer_died" and
      recs[-1]["points"] == len(points) and recs[-1]["exit_status"] == 1 and
      "SIGKILL" in recs[-1]["error"], f"end record names the peer's death: {recs[-1]}")
check(err.count("\n") == 1 and f"the peer process (pid {peer}) died" in err and
      "killed by signal 9 (SIGKILL)" in err and "points measured" in err,
      f"one stderr line naming the peer's death: {err!r}")
shutil.rmtree(tmp, ignore_errors=True)

# 2. SIGINT (table) and SIGTERM (CSV): the rows so far, one line naming the signal, the peer
#    ended, exit 128 + signal.
for sig, fmt, rc_want in ((signal.SIGINT, [], 130), (signal.SIGTERM, ["--csv"], 143)):
    name = signal.Signals(sig).name
    r = Run(*SWEEP, *fmt)
    header = 1 if fmt else 3  # the CSV header; the table's description and column lines
    r.until(header + 3)
    peer = r.peer()
    if r.p.poll() is None:
        r.p.send_signal(sig)
    rc, lines, err = r.finish()
    rows = [l for l in lines[header:] if l.strip()]
    check(rc == rc_want, f"{name}: exit {rc_want} (got {rc}; {err!r})")
    check(len(rows) >= 3 and all(re.match(r"^ *(put,)?\d+[ ,]", l) for l in rows),
          f"{name}: the rows measured are on stdout: {lines}")
    check(err.count("\n") == 1 and f"interrupted by {name}" in err and
          f"of 27 points measured" in err, f"{name}: one line naming the signal: {err!r}")
    check(peer is not None and gone(peer), f"{name}: the peer {peer} is ended too")

# 3. A stopped peer: the run ends at --timeout, the rows kept, the timeout named.
r = Run(*SWEEP, "--json", timeout="3")
r.until(4)
peer = r.peer()
if check(peer is not None, "a stopped peer: the sweep still runs"):
    os.kill(peer, signal.SIGSTOP)
rc, lines, err = r.finish(deadline_s=30)
recs = [json.loads(l) for l in lines] or [{}]
check(rc == 1 and recs[-1].get("record") == "end" and recs[-1]["status"] == "failed" and
      "timeout" in recs[-1]["error"] and len([x for x in recs if x.get("record") == "point"]) >= 3,
      f"a stopped peer: exit 1 at the deadline, rows kept, the timeout named: {rc} {recs[-1]} {err!r}")
check(err.count("\n") == 1 and "timeout" in err, f"stopped peer: one stderr line: {err!r}")
check(peer is None or gone(peer), "the stopped peer was ended")

# 4. A long point: a status line on a terminal's stderr, none on a pipe.
master, slave = pty.openpty()
p = subprocess.Popen([bench, "--op", "put", "--size", "8,64M", "--iterations", "100"],
                     stdout=subprocess.PIPE, stderr=slave, env=env(), text=True)
os.close(slave)
tty, end = b"", time.monotonic() + 60
while time.monotonic() < end:
    ready, _, _ = select.select([master], [], [], 0.5)
    if ready:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        tty += chunk
    elif p.poll() is not None:
        break
out, _ = p.communicate(timeout=60)
os.close(master)
check(p.returncode == 0 and b"\r\x1b[Kxport-bench: measuring size 67108864" in tty and
      "67108864" in out, f"terminal: a status line while 64 MiB is measured: {tty[:200]!r}")
r = subprocess.run([bench, "--op", "put", "--size", "8,64M", "--iterations", "100"],
                   capture_output=True, text=True, env=env(), timeout=120)
check(r.returncode == 0 and r.stderr == "", f"pipe: no status line ({r.stderr!r})")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
