#!/usr/bin/env python3
"""Puts at two depths against the bare fi_write loop at its window: deeper windows never slower.

  scripts/bench-put-depth.py [--build build] [--rounds 5] [--provider shm] [--sizes 64K,1M]
                             [--depths 16,64] [--window 64] [--slots default,1] [--sliding]
                             [--fi-rma-bw PATH] [--pin 0,1] [--rt] [--pause S]
                             [--iterations-mib 2048]

Each round runs, per size and per --slots choice, in an order that rotates round by round:
  bare      fi-bare-loop --mode put-bw --window W (fi_write; on shm the writer's own CMA copy)
  bare-b    the same with --batch: W writes posted, then all awaited (fi_rma_bw's loop)
  bare-wd   the same with --writedata: fi_writedata, the target counting the CQ data (the
            provider path of libxport's puts: on shm the target's CMA copy, not the writer's)
  xb-dN     xport-bench --op put --depth N: N puts per quiet (the issue's runs; --sliding adds
            xb-sN, N in flight, each new put waiting for the oldest)
  fi_rma_bw fabtests' fi_rma_bw -o write at its window (--fi-rma-bw PATH; shm only, once per size
            and round, not per --slots: it writes one buffer both ways and reports one direction).
            Fabtests 1.17.1 built against Debian's libfabric 1.17.0 without autotools:
              cd libfabric-1.17.1/fabtests && gcc -O2 -D_GNU_SOURCE -Iinclude -Iinclude/unix \
                -o fi_rma_bw benchmarks/rma_bw.c benchmarks/benchmark_shared.c common/shared.c \
                common/hmem*.c -lfabric -lpthread -ldl -lm
            (scripts/bench-pack.sh packs it with FI_RMA_BW=PATH).
--slots: the SIZE-byte slots both tools cycle through on each side; "default" is one per
operation in flight (64 MiB at most: 64 MiB at depth 64 and 1 MiB), 1 is fi_rma_bw's single
buffer. The same slots in both tools keep the memory the copies touch equal: at 1 MiB, 16 against
64 slots is 32 against 128 MiB between the two processes, in cache or not.
--rt runs every process under chrt -f 1 (root): on a host shared with other work, a waiting
process's sched_yield otherwise hands its core to whatever else is runnable there; --pause S
sleeps S seconds after each run (the host's other work gets the cores back meanwhile).
Prints one line per run (GB/s, 1e9 bytes), then per size and slots the median of each tool over
the rounds and each cell's median per-round ratio to that round's bare run (and to bare-b,
bare-wd, fi_rma_bw), with the min and max of those ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

K, M = 1 << 10, 1 << 20


def parse_size(s):
    t = s.strip().upper()
    mult = M if t.endswith("M") else K if t.endswith("K") else 1
    if not t.rstrip("MK").isdigit() or int(t.rstrip("MK")) == 0:
        sys.exit(f"--sizes: {s!r} is not a size (64K, 1M)")
    return int(t.rstrip("MK")) * mult


def size_name(size):
    return f"{size // M}M" if size >= M else f"{size // K}K" if size >= K else str(size)


def point(stdout):
    """The first measured point of JSON Lines (xport-bench's follow its header record)."""
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("record", "point") == "point":
            return r
    sys.exit(f"no measured point in: {stdout[-2000:]}")


def run(cmd, rt, env=None):
    full = (["chrt", "-f", "1"] if rt else []) + cmd
    p = subprocess.run(full, capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        sys.exit(f"{' '.join(full)}: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def fi_rma_bw(path, size, iterations, window, pin, rt, round_no):
    """fi_rma_bw -o write, server and client on the --pin CPUs; the client's MB/s (one direction,
    both run at once) in GB/s. Ports differ per round (a port still in TIME_WAIT)."""
    port = 9300 + (round_no * 7 + size // K) % 600
    common = [path, "-p", "shm", "-e", "rdm", "-o", "write", "-S", str(size), "-I",
              str(iterations), "-W", str(window), f"-E={port}"]
    a, b = pin.split(",") if pin else ("", "")
    pre = lambda cpu: (["chrt", "-f", "1"] if rt else []) + (["taskset", "-c", cpu] if cpu else [])
    server = subprocess.Popen(pre(b) + common + ["-B", str(port + 1000)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.3)
    client = subprocess.run(pre(a) + common + ["-B", str(port + 2000), "-P", str(port + 1000),
                                               "127.0.0.1"],
                            capture_output=True, text=True, timeout=300)
    server.communicate(timeout=60)
    for line in client.stdout.splitlines():
        w = line.split()
        if len(w) >= 5 and w[0][0].isdigit() and w[1][0].isdigit():
            return float(w[4]) / 1e3  # MB/sec is bytes per µs
    sys.exit(f"fi_rma_bw: no result: {client.stdout[-1000:]}{client.stderr[-1000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--provider", default="shm")
    p.add_argument("--sizes", default="64K,1M")
    p.add_argument("--depths", default="16,64")
    p.add_argument("--window", type=int, default=64, help="the bare loop's writes in flight")
    p.add_argument("--slots", default="default",
                   help="comma-separated: default (one per operation in flight) and/or numbers")
    p.add_argument("--sliding", action="store_true",
                   help="also xport-bench --sliding at each depth (xb-sN)")
    p.add_argument("--fi-rma-bw", default="", help="path of fabtests' fi_rma_bw (shm)")
    p.add_argument("--pin", default="0,1", help="A,B: initiator on CPU A, target on CPU B")
    p.add_argument("--rt", action="store_true", help="chrt -f 1 for every process (root)")
    p.add_argument("--pause", type=float, default=0, help="seconds to sleep after each run")
    p.add_argument("--iterations-mib", type=int, default=2048,
                   help="MiB each run moves (iterations = this / size)")
    a = p.parse_args()
    bare = os.path.join(a.build, "tools", "fi-bare-loop")
    xb = os.path.join(a.build, "tools", "xport-bench")
    for tool in (bare, xb):
        if not os.access(tool, os.X_OK):
            sys.exit(f"{tool} is missing: ninja -C {a.build} tools/xport-bench tools/fi-bare-loop")
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    if not all(d.isdigit() and int(d) > 0 for d in a.depths.split(",")):
        sys.exit(f"--depths {a.depths}: positive numbers, comma-separated")
    depths = [int(d) for d in a.depths.split(",")]
    slot_choices = a.slots.split(",")
    if not all(s == "default" or (s.isdigit() and int(s) > 0) for s in slot_choices):
        sys.exit(f"--slots {a.slots}: 'default' or positive numbers, comma-separated")
    if a.pin and (len(a.pin.split(",")) != 2 or not all(x.isdigit() for x in a.pin.split(","))):
        sys.exit(f"--pin {a.pin}: A,B (two CPU numbers), or empty for no pinning")
    cpu_a, cpu_b = a.pin.split(",") if a.pin else ("", "")
    results = {}  # (size, slots, cell) -> [GB/s per round]
    for r in range(a.rounds):
        for size in sizes:
            n = max(10, a.iterations_mib * M // size)
            cells = []  # (slots, cell, command)
            for sl in slot_choices:
                sopt = [] if sl == "default" else ["--slots", sl]
                common = ["--provider", a.provider, "--size", str(size), "--iterations", str(n),
                          "--json"]
                pin_b = ["--cpus", a.pin] if a.pin else []
                pin_x = ["--cpu", cpu_a, "--peer-cpu", cpu_b] if a.pin else []
                cells.append((sl, "bare", [bare, "--mode", "put-bw", "--window", str(a.window)]
                              + common + sopt + pin_b))
                cells.append((sl, "bare-b", [bare, "--mode", "put-bw", "--window", str(a.window),
                                             "--batch"] + common + sopt + pin_b))
                cells.append((sl, "bare-wd", [bare, "--mode", "put-bw", "--window", str(a.window),
                                              "--writedata"] + common + sopt + pin_b))
                for d in depths:
                    cells.append((sl, f"xb-d{d}", [xb, "--op", "put", "--depth", str(d)] + common
                                  + sopt + pin_x))
                    if a.sliding:
                        cells.append((sl, f"xb-s{d}", [xb, "--op", "put", "--depth", str(d),
                                                       "--sliding"] + common + sopt + pin_x))
            if a.fi_rma_bw:
                cells.append(("-", "fi_rma_bw", None))
            k = r % len(cells)
            for sl, cell, cmd in cells[k:] + cells[:k]:
                if cmd is None:
                    gbs = fi_rma_bw(a.fi_rma_bw, size, n, a.window, a.pin, a.rt, r)
                else:
                    gbs = point(run(cmd, a.rt))["bw_bytes_per_s"] / 1e9
                results.setdefault((size, sl, cell), []).append(gbs)
                print(f"round {r + 1} size {size_name(size)} slots {sl} {cell}: {gbs:.3f} GB/s",
                      flush=True)
                time.sleep(a.pause)
    print()
    print("| size | slots | cell | median GB/s (min-max) | per round / bare | / bare-b "
          "| / bare-wd | / fi_rma_bw |")
    print("|---|---|---|---|---|---|---|---|")
    for size in sizes:
        rma = results.get((size, "-", "fi_rma_bw"))
        for sl in slot_choices + (["-"] if rma else []):
            for (s2, sl2, cell), v in results.items():
                if s2 != size or sl2 != sl:
                    continue
                line = (f"| {size_name(size)} | {sl} | {cell} | {statistics.median(v):.2f} "
                        f"({min(v):.2f}-{max(v):.2f}) |")
                for base in ("bare", "bare-b", "bare-wd", "fi_rma_bw"):
                    b = results.get((size, "-" if base == "fi_rma_bw" else sl, base))
                    if not b or cell == base or len(b) != len(v):
                        line += " |"
                        continue
                    ratios = [x / y for x, y in zip(v, b)]
                    line += (f" {statistics.median(ratios):.2f} ({min(ratios):.2f}-"
                             f"{max(ratios):.2f}) |")
                print(line)


if __name__ == "__main__":
    main()
