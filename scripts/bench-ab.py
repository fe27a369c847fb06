#!/usr/bin/env python3
"""Two xport-bench binaries side by side (before/after a change): interleaved rounds, medians.

  scripts/bench-ab.py --a OLD/xport-bench --b build/tools/xport-bench [--rounds 5] [--latency p50]
                      [--providers shm,tcp;ofi_rxm] [--cases send:8,send:4096,send:1048576,
                      put:65536,put:1048576]

Each binary spawns its own peer (the same binary), so binaries of different wire versions can
be compared. send: one-way latency (half the ping-pong round trip, lat_us_mean); put: bandwidth
(bytes/s, to local completion). Each round runs every case once with each binary, alternating
which goes first, so slow phases of the machine hit both. Prints one line per run and a
markdown table of medians.
"""
import argparse
import json
import statistics
import subprocess
import sys



def first_point(stdout):
    """The first measured point of JSON Lines output: xport-bench's come after its header record
    ("record": "header"); fi-bare-loop's have no record field."""
    for line in stdout.splitlines():
        r = json.loads(line)
        if r.get("record", "point") == "point":
            return r
    sys.exit(f"no measured point in: {stdout[-2000:]}")

def run(bench, provider, op, size, taskset, latency_key="lat_us_mean"):
    big = size >= 1 << 20
    iterations = {"send": 2000 if big else 20000, "put": 2000 if big else 20000}[op]
    cmd = [bench, "--provider", provider, "--op", op, "--size", str(size),
           "--iterations", str(iterations), "--warmup", str(iterations // 4), "--json"]
    if taskset:
        cmd = ["taskset", "-c", taskset] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"{bench} failed ({provider} {op} {size}): {out.stderr.strip()[-2000:]}")
    r = first_point(out.stdout)
    return r[latency_key] if op == "send" else r["bw_bytes_per_s"] / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="the 'before' xport-bench")
    p.add_argument("--b", required=True, help="the 'after' xport-bench")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--providers", default="shm,tcp;ofi_rxm")
    p.add_argument("--cases", default="send:8,send:4096,send:1048576,put:65536,put:1048576")
    p.add_argument("--taskset", default="", help="CPU list for both processes (taskset -c)")
    p.add_argument("--latency", choices=["mean", "p50"], default="mean",
                   help="which one-way latency of each run: its mean (default) or its median")
    a = p.parse_args()
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in a.cases.split(",")]
    results = {}
    for r in range(a.rounds):
        for prov in a.providers.split(","):
            for op, size in cases:
                order = [("a", a.a), ("b", a.b)] if r % 2 == 0 else [("b", a.b), ("a", a.a)]
                got = {}
                for name, bench in order:
                    got[name] = run(bench, prov, op, size, a.taskset, f"lat_us_{a.latency}")
                results.setdefault((prov, op, size), []).append((got["a"], got["b"]))
                unit = "us" if op == "send" else "GB/s"
                print(f"round {r + 1} {prov:12} {op:4} {size:>8} B  a {got['a']:9.3f} {unit}  "
                      f"b {got['b']:9.3f} {unit}", flush=True)
    print("\n| provider | measure | size | a (median) | b (median) | b vs a |")
    print("|---|---|---|---|---|---|")
    for (prov, op, size), runs in results.items():
        ma = statistics.median(x for x, _ in runs)
        mb = statistics.median(y for _, y in runs)
        what = (f"one-way latency (µs, {a.latency} of a run)" if op == "send"
                else "put bandwidth (GB/s, local)")
        print(f"| {prov} | {what} | {size} | {ma:.3f} | {mb:.3f} | {100 * (mb / ma - 1):+.1f}% |")


if __name__ == "__main__":
    main()
