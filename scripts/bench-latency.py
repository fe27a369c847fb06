#!/usr/bin/env python3
"""xport-bench send/recv ping-pong next to Debian's fi_pingpong, interleaved runs, medians.

  scripts/bench-latency.py [--build build] [--rounds 5] [--providers shm,tcp;ofi_rxm]
                           [--sizes 8,4096,1048576]

Both report one-way latency as half the round trip (xport-bench's lat_us_mean, fi_pingpong's
usec/xfer). Each round runs every (provider, size) once with each tool, so slow phases of the
machine hit both. Prints one line per run and a median table (markdown) at the end.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PINGPONG_PORT = 47592  # fi_pingpong's default out-of-band port



def first_point(stdout):
    """The first measured point of JSON Lines output: xport-bench's come after its header record
    ("record": "header"); fi-bare-loop's have no record field."""
    for line in stdout.splitlines():
        r = json.loads(line)
        if r.get("record", "point") == "point":
            return r
    sys.exit(f"no measured point in: {stdout[-2000:]}")

def listening(port):
    """True when a TCP socket listens on `port` (from /proc/net/tcp{,6}: state 0A)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def run_bench(bench, provider, size, iterations):
    out = subprocess.run([bench, "--provider", provider, "--op", "send", "--size", str(size),
                          "--iterations", str(iterations), "--warmup", str(iterations),
                          "--json"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"xport-bench failed ({provider}, {size}): {out.stderr.strip()}")
    return first_point(out.stdout)["lat_us_mean"]


def run_pingpong(provider, size, iterations):
    env = dict(os.environ, FI_TCP_IFACE="lo")
    args = ["fi_pingpong", "-p", provider, "-e", "rdm", "-I", str(iterations), "-S", str(size)]
    server = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline = time.monotonic() + 30
        while not listening(PINGPONG_PORT):
            if server.poll() is not None:
                sys.exit(f"fi_pingpong server exited: {server.stderr.read().strip()}")
            if time.monotonic() > deadline:
                sys.exit("fi_pingpong server did not listen within 30 s")
            time.sleep(0.01)  # polling a port, not synchronising on a guess
        out = subprocess.run(args + ["127.0.0.1"], env=env, capture_output=True, text=True,
                             timeout=300)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    if out.returncode != 0:
        sys.exit(f"fi_pingpong failed ({provider}, {size}): {out.stderr.strip()}")
    # last line: bytes iters =iters total time MB/sec usec/xfer Mxfers/sec
    return float(out.stdout.strip().splitlines()[-1].split()[-2])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--providers", default="shm,tcp;ofi_rxm")
    p.add_argument("--sizes", default="8,4096,1048576")
    a = p.parse_args()
    bench = os.path.join(a.build, "tools", "xport-bench")
    providers = a.providers.split(",")
    sizes = [int(s) for s in a.sizes.split(",")]
    results = {}
    for r in range(1, a.rounds + 1):
        for prov in providers:
            for size in sizes:
                iterations = 2000 if size >= 1 << 20 else 10000
                ours = run_bench(bench, prov, size, iterations)
                theirs = run_pingpong(prov, size, iterations)
                results.setdefault((prov, size), []).append((ours, theirs))
                print(f"round {r} {prov:12} {size:>8} B  xport-bench {ours:9.2f} us  "
                      f"fi_pingpong {theirs:9.2f} us", flush=True)
    print("\n| provider | size | xport-bench one-way, median (µs) | fi_pingpong, median (µs) "
          "| xport vs fi_pingpong |")
    print("|---|---|---|---|---|")
    for (prov, size), runs in results.items():
        ours = statistics.median(o for o, _ in runs)
        theirs = statistics.median(t for _, t in runs)
        print(f"| {prov} | {size} | {ours:.2f} | {theirs:.2f} | {100 * (ours / theirs - 1):+.1f}% |")


if __name__ == "__main__":
    main()
