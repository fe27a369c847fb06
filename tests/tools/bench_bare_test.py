#!/usr/bin/env python3
"""Runs scripts/bench-bare.py (docs/benchmarks.md's one command per table) on the built
xport-bench and fi-bare-loop, as the benchmarks do but short (--quick, two rounds, shm): each
round prints a line per row and tool, --progress and --os-counters add their figures, the table
has every row with its target, a put row is read against one named bare loop and gets the
second table (each loop alone, each round's better run); the wake-up row runs where the CQs
have a wait object; and bad usage is refused with a message. This checks that the script runs and reports, not how fast anything is."""
import os
import re
import subprocess
import sys

from checks import check, failures

script, build = sys.argv[1], sys.argv[2]


def run(*args, timeout=400):
    env = dict(os.environ)
    env.setdefault("FI_TCP_IFACE", "lo")
    try:
        return subprocess.run([sys.executable, script, "--build", build, *args],
                              capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, -1, "", f"no exit within {timeout} s")


r = run("--providers", "shm", "--rows", "pingpong-8,put-rate", "--rounds", "2", "--quick",
        "--progress", "--os-counters")
out = r.stdout
if check(r.returncode == 0, f"exit 0 (got {r.returncode}: {r.stderr.strip()[-800:]})"):
    rounds = re.findall(r"^round (\d) shm\s+(\S+)\s+libxport\s+([\d.]+) (\S+)", out, re.M)
    check(sorted((n, row) for n, row, _, _ in rounds) ==
          [("1", "pingpong-8"), ("1", "put-rate-8"), ("2", "pingpong-8"), ("2", "put-rate-8")],
          f"one line per round and row: {rounds}")
    check(all(float(x) > 0 for _, _, x, _ in rounds), f"figures above zero: {rounds}")
    check(re.search(r"\[polls \d+ \(empty \d+\), posts \d+, eagain \d+, held \d+; "
                    r"bare eagain \d+, \d+\]", out) is not None,
          "--progress: libxport's counters and both bare put loops' -FI_EAGAIN retries")
    for tool in ("libxport", "bare", "bare-writedata"):
        check(re.search(rf"^  os {tool}\s+[\d.]+ \S+: per message user µs [\d.]+, sys µs [\d.]+, "
                        r"vol cs [\d.]+", out, re.M) is not None,
              f"--os-counters: a line for {tool}")
    check(re.search(r"^\| pingpong-8 \| shm \| [\d.]+ µs \(p50\) \| [\d.]+ µs \(p50\) \| [\d.]+ \| "
                    r"[\d.]+ \([\d.]+–[\d.]+\) \|.*\| ≤ 1.3 \| (yes|no) \|$", out, re.M) is not None,
          "table: the ping-pong row with per-round quartiles and its target")
    check(re.search(r"^\| put-rate-8 \| shm \| [\d.]+ Mmsg/s \| [\d.]+ Mmsg/s "
                    r"\(fi_(write|writedata)\) \|.*\| ≥ 0.9 \| (yes|no) \|$", out, re.M) is not None,
          "table: the put row names the bare loop it is read against")
    check(re.search(r"^\| put-rate-8 \| shm \| [\d.]+ \([\d.]+–[\d.]+\) \| [\d.]+ \([\d.]+–[\d.]+\) "
                    r"\| [\d.]+ \([\d.]+–[\d.]+\) \| [\d.]+ \|$", out, re.M) is not None,
          "second table: the put row against each loop and each round's better run")

# --time-calls: each put bandwidth round prints both tools' ns per write in calls and waits,
# and the end a table of their medians.
r = run("--providers", "shm", "--rows", "put-bw-64K", "--rounds", "1", "--quick", "--time-calls")
out = r.stdout
if check(r.returncode == 0, f"--time-calls: exit 0 (got {r.returncode}: {r.stderr.strip()[-800:]})"):
    check(re.search(r"^  ns per write in calls \+ waits: (?=.*libxport \d+ \+ \d+)"
                    r"(?=.*bare \d+ \+ \d+)(?=.*bare-writedata \d+ \+ \d+)", out, re.M)
          is not None, f"--time-calls: a line with each tool's split: {out!r}")
    for tool in ("libxport", "bare", "bare-writedata"):
        check(re.search(rf"^\| put-bw-64K \| shm \| {tool} \| \d+ \(\d+–\d+\) \| "
                        r"\d+ \(\d+–\d+\) \| 1 \|$", out, re.M) is not None,
              f"--time-calls: the medians table has {tool}")

# The wake-up row: skipped (and said so) where the CQs have no wait object; on tcp;ofi_rxm a
# figure for each tool asleep and spinning, and its absolute target in the table.
r = run("--providers", "shm,tcp;ofi_rxm", "--rows", "wakeup", "--rounds", "1", "--quick")
out = r.stdout
if check(r.returncode == 0, f"wakeup: exit 0 (got {r.returncode}: {r.stderr.strip()[-800:]})"):
    check("(wakeup-8 shm: skipped" in out, "wakeup: shm skipped with a reason")
    check(re.search(r"^round 1 tcp;ofi_rxm\s+wakeup-8\s+libxport\s+-?[\d.]+ us \(wake-up per "
                    r"round trip\)\s+bare\s+-?[\d.]+ us\s+\[one-way p50: .*libxport/block "
                    r"[\d.]+.*\]$", out, re.M) is not None,
          f"wakeup: a round line with each run's p50: {out!r}")
    check(re.search(r"^\| wakeup-8 \| tcp;ofi_rxm \| .*\| < 10.0 µs \| (yes|no|at or under bare) "
                    r"\|$", out, re.M) is not None, "wakeup: the table row with its bound")

for args, says in ((["--rows", "nosuch"], "no such rows"),
                   (["--pin", "3"], "A,B (two CPU numbers)"),
                   (["--variant", "bare=x"], "NAME=BUILD[:ARGS]")):
    r = run(*args, timeout=60)
    check(r.returncode != 0, f"{args}: refused (exit {r.returncode})")
    check(says in r.stderr, f"{args}: stderr names the problem ({says!r}): {r.stderr.strip()!r}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("bench-bare.py: rounds, counters and both tables reported; bad usage refused")
