#!/usr/bin/env python3
"""xport-bench's MPI mode: 4 ranks on this host (--oversubscribe, Open MPI's own traffic kept on
loopback), every pattern with --check on shm, one on tcp;ofi_rxm, alltoall over 2 comms per pair
and direction; rank 0 prints one aggregate point per size; a corrupted byte fails the run; one
rank is a usage error."""
import json
import os
import subprocess
import sys

from checks import check, failures

mpirun, bench = sys.argv[1], sys.argv[2]
MPI = [mpirun, "--oversubscribe", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
       "--mca", "oob_tcp_if_include", "lo", "--mca", "pml", "ob1", "--mca", "mtl", "^ofi"]
STREAMS = {"pairwise": 2, "alltoall": 12, "fan-in": 3}  # initiator-target pairs among 4 ranks


def run(ranks, *args, timeout=240):
    env = dict(os.environ)
    for k in ("XPORT_PROVIDER", "XPORT_RAILS", "XPORT_DOMAIN"):
        env.pop(k, None)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # Open MPI's runtime leaks by design at MPI_Finalize; the sanitizer build's leak check of
    # xport-bench's own code runs in tool-xport-bench (local mode, the same sessions and ops).
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    try:
        return subprocess.run([*MPI, "-np", str(ranks), bench, "--timeout", "60", *args],
                              capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{args}: mpirun did not finish within {timeout} s")
        return subprocess.CompletedProcess(args, -1, "", "")


cases = [(p, op, "shm", []) for p in STREAMS for op in ("send", "put", "get")]
cases.append(("alltoall", "put", "tcp;ofi_rxm", ["--nics", "lo"]))
cases.append(("alltoall", "send", "shm", ["--comms", "2"]))
for pattern, op, prov, extra in cases:
    where = f"{pattern} {op} {prov} {' '.join(extra)}"
    comms = int(extra[1]) if extra[:1] == ["--comms"] else 1
    r = run(4, "--pattern", pattern, "--op", op, "--provider", prov, *extra, "--size", "8,12K",
            "--iterations", "10", "--warmup", "1", "--check", "--json")
    if not check(r.returncode == 0, f"{where}: exit 0 (got {r.returncode}: {r.stderr[-800:]})"):
        continue
    records = list(map(json.loads, r.stdout.splitlines()))
    points = [x for x in records if x.get("record") == "point"]
    check([p["size"] for p in points] == [8, 12288], f"{where}: rank 0 alone prints, one line per size: {r.stdout}")
    check([x["record"] for x in records] == ["header", "point", "point", "end"] and
          records[0]["mode"] == "mpi" and records[-1]["status"] == "complete",
          f"{where}: a header record, a point per size, an end record: {r.stdout[:300]}")
    for p in points:
        check(p["mode"] == "mpi" and p["pattern"] == pattern and p["ranks"] == 4 and
              p["streams"] == STREAMS[pattern] and p["op"] == op and p["provider"] == prov and
              p["check"] is True and p["comms"] == comms and p["pool"]["routing_misses"] == 0,
              f"{where}: fields {p}")
        check(p["lat_us_p50"] > 0 and p["bw_bytes_per_s"] > 0 and p["msg_per_s"] > 0,
              f"{where}: figures {p}")

r = run(4, "--pattern", "fan-in", "--op", "put", "--size", "4K", "--iterations", "10",
        "--check", "--test-corrupt", "3")
check(r.returncode != 0 and "size 4096, iteration 3: first bad byte at offset 2048" in r.stderr,
      f"corrupted put under MPI: fails naming the byte (got {r.returncode}: {r.stderr[-800:]})")
r = run(1, "--pattern", "pairwise", "--size", "8")
check(r.returncode != 0 and "at least 2 MPI ranks" in r.stderr,
      f"one rank: usage error (got {r.returncode}: {r.stderr[-400:]})")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
