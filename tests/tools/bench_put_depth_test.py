#!/usr/bin/env python3
"""Runs scripts/bench-put-depth.py (puts at two depths against the bare fi_write loop at its
window, and fabtests' fi_rma_bw) on the built xport-bench and fi-bare-loop, short (two rounds,
64 KiB, shm, no pinning), with a stand-in for fi_rma_bw that prints what fabtests prints: a line
per run and cell, a table row per cell with its per-round ratios, fi_rma_bw's figure read from
its output; bad arguments refused with a message. It checks that the script runs and reports,
not how fast anything is."""
import os
import re
import subprocess
import sys
import tempfile

from checks import check, failures

script, build = sys.argv[1], sys.argv[2]


def run(*args, timeout=400):
    try:
        return subprocess.run([sys.executable, script, "--build", build, *args],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, -1, "", f"no exit within {timeout} s")


with tempfile.TemporaryDirectory() as tmp:
    # fi_rma_bw's output: a header line, then bytes, iters, total, time and MB/sec (bytes per µs).
    stub = os.path.join(tmp, "fi_rma_bw")
    with open(stub, "w") as f:
        f.write("#!/bin/sh\necho 'bytes   iters   total       time     MB/sec    usec/xfer   "
                "Mxfers/sec'\necho '64k     128     8m          0.01s   1234.50      53.09"
                "       0.02'\n")
    os.chmod(stub, 0o755)
    r = run("--rounds", "2", "--sizes", "64K", "--depths", "4,8", "--window", "8",
            "--slots", "default,1", "--sliding", "--iterations-mib", "8", "--pin", "",
            "--fi-rma-bw", stub)
out = r.stdout
if check(r.returncode == 0, f"exit 0 (got {r.returncode}: {r.stderr.strip()[-800:]})"):
    lines = re.findall(r"^round (\d) size 64K slots (\S+) (\S+): ([\d.]+) GB/s$", out, re.M)
    cells = {(sl, c) for _, sl, c, _ in lines}
    want = {(sl, c) for sl in ("default", "1")
            for c in ("bare", "bare-b", "bare-wd", "xb-d4", "xb-d8", "xb-s4", "xb-s8")} | {
                ("-", "fi_rma_bw")}
    check(cells == want, f"a line per cell: {sorted(cells)}")
    check(len(lines) == 2 * len(want), f"every cell in both rounds: {len(lines)} lines")
    check(all(float(x) > 0 for *_, x in lines), "figures above zero")
    check(all(abs(float(x) - 1.2345) < 0.001 for _, _, c, x in lines if c == "fi_rma_bw"),
          "fi_rma_bw's MB/sec read as GB/s")
    for sl in ("default", "1"):
        check(re.search(rf"^\| 64K \| {sl} \| xb-d8 \| [\d.]+ \([\d.]+-[\d.]+\) \|"
                        + r"( [\d.]+ \([\d.]+-[\d.]+\) \|){4}$", out, re.M) is not None,
              f"table: xb-d8 with {sl} slots against bare, bare-b, bare-wd and fi_rma_bw")
    check(re.search(r"^\| 64K \| - \| fi_rma_bw \| 1.23 \(1.23-1.23\) \| \| \| \| \|$", out,
                    re.M) is not None, "table: fi_rma_bw's row")

for args, says in ((["--slots", "0"], "--slots"), (["--sizes", "64X"], "'64X'"),
                   (["--depths", "4,x"], "--depths"), (["--pin", "1"], "--pin")):
    r = run(*args)
    check(r.returncode != 0 and says in r.stderr, f"{args}: refused naming {says!r} "
          f"(got {r.returncode}: {r.stderr.strip()!r})")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("bench-put-depth: every cell ran and reported; bad arguments refused")
