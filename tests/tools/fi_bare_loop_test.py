#!/usr/bin/env python3
"""Runs the built fi-bare-loop (the bare libfabric loops docs/benchmarks.md compares libxport
with) in the modes the benchmarks use: send and fi_writedata ping-pongs on shm and tcp;ofi_rxm
(inject-sized and not), the 8-byte write rate with --work on either side, the put loops' slots,
--batch and page-aligned target region, and the exit code (2) and message of bad usage. Short
runs: this checks that each loop runs and reports, not how fast. Every run has a timeout (the
tool's own watchdog ends a stalled wait after 10 s)."""
import json
import os
import subprocess
import sys

from checks import check, failures

tool = sys.argv[1]


def run(*args, timeout=120):
    env = dict(os.environ)
    env.setdefault("FI_TCP_IFACE", "lo")
    try:
        return subprocess.run([tool, *args], capture_output=True, text=True, env=env,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, -1, "", f"no exit within {timeout} s")


def report(where, *args):
    r = run(*args, "--json")
    if not check(r.returncode == 0, f"{where}: exit 0 (got {r.returncode}: {r.stderr.strip()})"):
        return {}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        check(False, f"{where}: no JSON line in {r.stdout!r}")
        return {}


for provider in ("shm", "tcp;ofi_rxm"):
    # Sizes under and over the provider's inject size (4 KiB on shm; 64 KiB is never injected).
    for size, n in (("8", "400"), ("64K", "100"), ("1M", "20")):
        for writedata in (False, True):
            where = f"{provider} pingpong {size}" + (" --writedata" if writedata else "")
            args = ["--provider", provider, "--mode", "pingpong", "--size", size,
                    "--iterations", n, "--warmup", "4"] + (["--writedata"] if writedata else [])
            p = report(where, *args)
            if not p:
                continue
            check(p.get("op") == ("writedata" if writedata else "send"),
                  f"{where}: op {p.get('op')!r}")
            check(p.get("lat_us_p50", 0) > 0, f"{where}: no latency ({p})")
            check(p.get("iterations") == int(n), f"{where}: iterations {p.get('iterations')}")
            check(isinstance(p.get("eagain_retries"), int) and p["eagain_retries"] >= 0,
                  f"{where}: eagain_retries {p.get('eagain_retries')!r}")
            if size == "64K":
                check(p.get("inject") is False, f"{where}: a 64 KiB message injected ({p})")

# --work: CPU time per message on either side; the loop still counts every write.
for work in ("0,0", "50,0", "0,50"):
    where = f"shm put-rate --writedata --work {work}"
    p = report(where, "--provider", "shm", "--mode", "put-rate", "--writedata", "--size", "8",
               "--iterations", "20000", "--work", work)
    if p:
        check(p.get("msg_per_s", 0) > 0 and p.get("op") == "writedata", f"{where}: {p}")
p = report("shm send-rate --work 20,20", "--mode", "send-rate", "--size", "8",
           "--iterations", "20000", "--work", "20,20")
if p:
    check(p.get("msg_per_s", 0) > 0, f"send-rate --work: {p}")

# --time-calls: the mean ns per posted write in the post and in the wait for room in the
# window, both within the run's time per write; injected writes have no posts to time.
for provider in ("shm", "tcp;ofi_rxm"):
    for writedata in (False, True):
        where = f"{provider} put-bw 64K --time-calls" + (" --writedata" if writedata else "")
        p = report(where, "--provider", provider, "--mode", "put-bw", "--size", "64K",
                   "--iterations", "200", "--window", "8", "--time-calls",
                   *(["--writedata"] if writedata else []))
        if p and check("time_calls" in p, f"{where}: time_calls reported ({p})"):
            t, per_write_ns = p["time_calls"], 1e9 / p["msg_per_s"]
            check(0 < t["call_ns"] and 0 <= t["wait_ns"] and
                  t["call_ns"] + t["wait_ns"] <= per_write_ns * 1.01,
                  f"{where}: {t} against {per_write_ns:.0f} ns per write")
p = report("shm put-rate 8 --time-calls", "--provider", "shm", "--mode", "put-rate", "--size",
           "8", "--iterations", "2000", "--time-calls")
if p:
    check(p.get("inject") is True and "time_calls" not in p,
          f"injected writes: no time_calls ({p})")

# Put modes: the writes land at the start of a page of the target's region (behind the 8-byte
# ack area they were 8 bytes into one, every copy misaligned and a page longer: slower than the
# same writes of fabtests' fi_rma_bw); they cycle through 16 slots whatever the window (as
# xport-bench's puts), or --slots; --batch posts the window, then waits for all of it.
for provider in ("shm", "tcp;ofi_rxm"):
    for size, window, extra, slots, batch in (
            ("64K", "64", [], 16, False), ("1M", "64", [], 16, False), ("1M", "4", [], 16, False),
            ("64K", "64", ["--slots", "1", "--batch"], 1, True),
            ("64K", "8", ["--slots", "3", "--writedata"], 3, False),
            ("8", "64", ["--slots", "5"], 5, False)):
        where = f"{provider} put-bw {size} --window {window} {' '.join(extra)}"
        p = report(where, "--provider", provider, "--mode", "put-bw", "--size", size,
                   "--iterations", "40", "--warmup", "4", "--window", window, *extra)
        if not p:
            continue
        check(p.get("dst_page_offset") == 0,
              f"{where}: the target's region starts {p.get('dst_page_offset')} bytes into a page")
        check(p.get("slots") == slots and p.get("batch") is batch,
              f"{where}: slots {p.get('slots')} (expected {slots}), batch {p.get('batch')}")
        check(p.get("bw_bytes_per_s", 0) > 0, f"{where}: no bandwidth ({p})")

# Bad usage: exit 2 and a message naming what was wrong.
for args, says in (
        (["--mode", "put-rate", "--work", "5"], "--work wants I,T"),
        (["--mode", "put-rate", "--work", "1,x"], "--work wants I,T"),
        (["--mode", "put-rate", "--work", "2000000,0"], "0..1000000"),
        (["--mode", "pingpong", "--work", "1,1"], "--work goes with the rate and bandwidth"),
        (["--mode", "send-rate", "--writedata"], "--writedata goes with pingpong, put-rate"),
        (["--mode", "put-rate", "--cpus", "1"], "--cpus wants A,B"),
        (["--mode", "send-bw", "--time-calls"], "--time-calls goes with put-rate and put-bw"),
        (["--mode", "put-bw", "--threads", "2", "--time-calls"], "one thread"),
        (["--mode", "send-bw", "--slots", "2"], "--slots and --batch go with put-rate and put-bw"),
        (["--mode", "pingpong", "--batch"], "--slots and --batch go with put-rate and put-bw"),
        (["--mode", "put-bw", "--slots", "0"], "--slots wants 1..4096"),
        (["--mode", "put-bw", "--size", "1M", "--slots", "65"], "at most 64 MiB")):
    r = run(*args)
    check(r.returncode == 2, f"{args}: exit 2 (got {r.returncode})")
    check(says in r.stderr, f"{args}: stderr names the problem ({says!r}): {r.stderr.strip()!r}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("fi-bare-loop: every loop ran and reported; bad usage refused")
