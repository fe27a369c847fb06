#!/usr/bin/env python3
"""Runs the built xport-bench in local mode as scripts do: every operation with --check on shm and
tcp;ofi_rxm (loopback), put_signal round trips, --memory cuda (run where a GPU is, refused with
exit 3 where none is), several comms per peer (--comms) and the alltoall pattern under every
--groups, the slots puts and gets cycle through (the same at every depth unless --slots),
the JSON and CSV shapes of docs/tools.md with the pool counters, --check catching a
corrupted byte, --expect-* verdicts, size lists and ranges, and the exit codes of bad usage (2).
Every run has a timeout; nothing sleeps."""
import json
import os
import subprocess
import sys

from checks import check, failures

tool = sys.argv[1]
FIELDS = {"op", "size", "rails", "provider", "lat_us_p50", "lat_us_p99", "bw_bytes_per_s",
          "msg_per_s", "lat_us_max", "lat_us_mean", "link_bits_per_s", "link_fraction",
          "iterations", "warmup", "depth", "check", "mode", "comms", "pool"}
POOL = {"groups", "channels_per_group", "channels", "cqs", "comms_attached", "primaries",
        "secondaries", "routing_misses", "channel_ops", "busiest_channel_ops"}
# Eager (8 KiB default), rendezvous, and at the stripe threshold (256 KiB) and above.
SIZES = "8,12K,256K,1M"


def run(*args, timeout=180):
    env = dict(os.environ)
    for k in ("XPORT_PROVIDER", "XPORT_RAILS", "XPORT_DOMAIN", "XPORT_POOL_GROUPS",
              "XPORT_POOL_CHANNELS"):
        env.pop(k, None)
    try:
        return subprocess.run([tool, "--timeout", "30", *args], capture_output=True, text=True,
                              env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        failures.append(f"{args}: no exit within {timeout} s")
        print(f"FAIL: {args}: no exit within {timeout} s", flush=True)
        return subprocess.CompletedProcess(e.cmd, -1, "", "")


def json_points(r, where):
    """The points of a --json run: JSON Lines, a header record first, a point record per size as
    measured, an end record last (docs/tools.md)."""
    if not check(r.returncode == 0, f"{where}: exit 0 (got {r.returncode}: {r.stderr.strip()})"):
        return []
    records = []
    for line in r.stdout.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            check(False, f"{where}: not a JSON line: {line!r}")
    kinds = [x.get("record") for x in records]
    check(kinds[:1] == ["header"] and kinds[-1:] == ["end"] and
          set(kinds[1:-1]) <= {"point"}, f"{where}: header, points, end: {kinds}")
    if records and records[-1].get("record") == "end":
        end = records[-1]
        check(end["status"] == "complete" and end["exit_status"] == 0 and
              end["points"] == end["planned"] == kinds.count("point"), f"{where}: end {end}")
    points = [x for x in records if x.get("record") == "point"]
    for p in points:
        check(FIELDS <= set(p), f"{where}: fields missing: {FIELDS - set(p)}")
        check(POOL <= set(p.get("pool", {})), f"{where}: pool fields missing: {p.get('pool')}")
    return points


providers = [("shm", []), ("tcp;ofi_rxm", ["--nics", "lo"])]
for prov, extra in providers:
    for op in ("send", "put", "get", "put-signal", "atomic"):
        where = f"{prov} {op} --check"
        pts = json_points(run("--provider", prov, *extra, "--op", op, "--size", SIZES,
                              "--iterations", "20", "--warmup", "2", "--check", "--json"), where)
        check([p["size"] for p in pts] == [8, 12288, 262144, 1048576],
              f"{where}: one point per size, in order: {[p['size'] for p in pts]}")
        for p in pts:
            check(p["op"] == op and p["provider"] == prov and p["rails"] == 1 and p["check"] is True,
                  f"{where}: identity fields {p}")
            check(p["lat_us_p50"] > 0 and p["lat_us_p99"] >= p["lat_us_p50"] and
                  p["bw_bytes_per_s"] > 0 and p["msg_per_s"] > 0, f"{where}: figures {p}")
            check(p["iterations"] == 20 and p["warmup"] == 2, f"{where}: counts {p}")
            # Loopback and shm have no link rate: no fraction, never one of a constant.
            check(p["link_bits_per_s"] is None and p["link_fraction"] is None,
                  f"{where}: link rate unknown {p}")
    # A ping-pong whose peer sleeps between pings (--gap-us with XPORT_WAIT=block), checked.
    os.environ["XPORT_WAIT"] = "block"
    pts = json_points(run("--provider", prov, *extra, "--op", "send", "--size", "8,64K",
                          "--iterations", "20", "--warmup", "2", "--gap-us", "300", "--check",
                          "--json"), f"{prov} send --gap-us 300, XPORT_WAIT=block")
    del os.environ["XPORT_WAIT"]
    check(len(pts) == 2 and all(p["lat_us_p50"] > 0 for p in pts),
          f"{prov} send --gap-us 300: two points with latencies {pts}")
    # A device opened without the engine lock (--single-thread, both processes), checked.
    for op in ("send", "put"):
        pts = json_points(run("--provider", prov, *extra, "--op", op, "--size", "8,64K",
                              "--iterations", "50", "--warmup", "2", "--single-thread",
                              "--check", "--json"), f"{prov} {op} --single-thread")
        check(len(pts) == 2 and all(p["lat_us_p50"] > 0 for p in pts),
              f"{prov} {op} --single-thread: two checked points {pts}")
    # Both processes pinned (--cpu, --peer-cpu: the first and the last CPU this test may use),
    # every byte checked.
    cpus = sorted(os.sched_getaffinity(0))
    pts = json_points(run("--provider", prov, *extra, "--op", "put", "--size", "8,64K",
                          "--iterations", "20", "--warmup", "2", "--check", "--cpu",
                          str(cpus[0]), "--peer-cpu", str(cpus[-1]), "--json"),
                      f"{prov} put --cpu {cpus[0]} --peer-cpu {cpus[-1]}")
    check(len(pts) == 2 and all(p["lat_us_p50"] > 0 for p in pts),
          f"{prov} put, pinned: two checked points {pts}")
    # Puts and gets with a sliding window (no --check: slots are reused in flight).
    for op in ("put", "get"):
        pts = json_points(run("--provider", prov, *extra, "--op", op, "--size", "8,64K",
                              "--depth", "8", "--iterations", "200", "--warmup", "2",
                              "--sliding", "--json"), f"{prov} {op} --sliding")
        check(len(pts) == 2 and all(p["sliding"] is True and p["msg_per_s"] > 0 and
                                    p["depth"] == 8 for p in pts),
              f"{prov} {op} --sliding: two points, sliding, with a rate {pts}")
        # The device's progress counters from the start of the run to each point (they only
        # grow): by the last, each of the 2 x 200 timed operations was handed to the provider,
        # and a poll that found something read at least one completion.
        g = pts[-1]["progress"]
        check(all(a["progress"][k] <= b["progress"][k] for a, b in zip(pts, pts[1:])
                  for k in g) and g["posts"] >= 400 and
              g["cq_completions"] > 0 and
              0 < g["cq_polls"] - g["cq_empty_polls"] <= g["cq_completions"] and
              g["window_ops_held"] <= g["posts"],
              f"{prov} {op} --sliding: progress counters {g}")
    # --time-calls: the mean ns per operation in the put call and in the window's wait; the
    # calls take time, and both means fit in the run's time per operation.
    pts = json_points(run("--provider", prov, *extra, "--op", "put", "--size", "64K",
                          "--depth", "8", "--iterations", "200", "--warmup", "2", "--sliding",
                          "--time-calls", "--json"), f"{prov} put --sliding --time-calls")
    if check(len(pts) == 1 and "time_calls" in pts[0], f"{prov} --time-calls: reported {pts}"):
        t, per_op_ns = pts[0]["time_calls"], 1e9 / pts[0]["msg_per_s"]
        check(0 < t["call_ns"] and 0 <= t["wait_ns"] and
              t["call_ns"] + t["wait_ns"] <= per_op_ns * 1.01,
              f"{prov} --time-calls: {t} against {per_op_ns:.0f} ns per put")
    pts = json_points(run("--provider", prov, *extra, "--op", "put", "--size", "64K",
                          "--depth", "8", "--iterations", "20", "--warmup", "2", "--sliding",
                          "--json"), f"{prov} put --sliding")
    check(len(pts) == 1 and "time_calls" not in pts[0],
          f"{prov}: no time_calls without --time-calls {pts}")
    # Slots: unchecked puts and gets cycle through 16 whatever the depth (at most 64 MiB of
    # them), so a deeper window moves more operations over the same memory (one slot per
    # operation made --depth 64 at 1 MiB copy between 128 MiB of buffers where --depth 16 used
    # 32); --slots N instead; checked operations each have a slot of their own.
    for op, depth, args, size, slots in (
            ("put", 4, [], "64K", 16), ("put", 64, [], "64K", 16), ("put", 64, [], "1M", 16),
            ("put", 64, [], "8M", 8), ("get", 64, ["--sliding"], "1M", 16),
            ("put", 64, ["--slots", "1"], "1M", 1), ("get", 16, ["--slots", "3"], "64K", 3),
            ("put", 64, ["--check"], "1M", 64), ("put", 8, ["--check"], "64K", 8)):
        where = f"{prov} {op} --depth {depth} --size {size} {' '.join(args)}"
        pts = json_points(run("--provider", prov, *extra, "--op", op, "--size", size,
                              "--depth", str(depth), "--iterations", "20", "--warmup", "2",
                              *args, "--json"), where)
        check(len(pts) == 1 and pts[0].get("slots") == slots and pts[0]["depth"] == depth,
              f"{where}: {slots} slots at depth {depth}: "
              f"{[(p.get('slots'), p['depth']) for p in pts]}")
    # A depth beyond what one window holds in flight (256 operations): the batch finishes what
    # is in flight and goes on, batched and sliding (it exited with "try again" before).
    for args in ([], ["--sliding"]):
        where = f"{prov} put --depth 300 {' '.join(args)}"
        pts = json_points(run("--provider", prov, *extra, "--op", "put", "--size", "4K",
                              "--depth", "300", "--iterations", "900", "--warmup", "2",
                              *args, "--json"), where)
        check(len(pts) == 1 and pts[0]["depth"] == 300 and pts[0]["msg_per_s"] > 0,
              f"{where}: measured {pts}")
    # Streaming sends (depth > 1), checked.
    pts = json_points(run("--provider", prov, *extra, "--op", "send", "--size", "8,64K",
                          "--depth", "4", "--iterations", "40", "--warmup", "4", "--check",
                          "--json"), f"{prov} send --depth 4")
    check([p["depth"] for p in pts] == [4, 4], f"{prov} send --depth 4: depth reported")
    # Several comms to the peer: messages and one-sided ops round-robin over them, checked.
    for op, depth in (("send", "1"), ("send", "4"), ("put", "16")):
        where = f"{prov} {op} --depth {depth} --comms 4"
        pts = json_points(run("--provider", prov, *extra, "--op", op, "--size", SIZES,
                              "--depth", depth, "--comms", "4", "--iterations", "20",
                              "--warmup", "2", "--check", "--json"), where)
        check([p["size"] for p in pts] == [8, 12288, 262144, 1048576], f"{where}: points {pts}")
        for p in pts:
            check(p["comms"] == 4 and "pattern" not in p and p["pool"]["routing_misses"] == 0,
                  f"{where}: comms, no pattern, no routing miss {p}")
    # alltoall: both processes initiate at once, over 8 comms each way, under every grouping.
    # The pool's counters are not asserted beyond what --groups sets and that nothing was
    # misrouted: the pool fills them as it is built. Unshared on tcp;ofi_rxm, 2 comms: each
    # opens rxm endpoints at both ends (8 took 16 s here, most of this test under ASan).
    for groups in ("0", "1", "2"):
        for op in ("send", "put") if groups == "1" else ("send",):
            comms = 2 if groups == "0" and prov == "tcp;ofi_rxm" else 8
            where = f"{prov} alltoall {op} --comms {comms} --groups {groups}"
            pts = json_points(run("--provider", prov, *extra, "--pattern", "alltoall", "--op", op,
                                  "--comms", str(comms), "--groups", groups, "--size", SIZES,
                                  "--iterations", "20", "--warmup", "2", "--check", "--json"),
                              where)
            check([p["size"] for p in pts] == [8, 12288, 262144, 1048576],
                  f"{where}: one point per size: {[p['size'] for p in pts]}")
            for p in pts:
                check(p["mode"] == "local" and p["pattern"] == "alltoall" and p["ranks"] == 2 and
                      p["streams"] == 2 and p["comms"] == comms and p["op"] == op and
                      p["provider"] == prov and p["check"] is True, f"{where}: fields {p}")
                check(p["bw_bytes_per_s"] > 0 and p["msg_per_s"] > 0 and p["lat_us_p50"] > 0,
                      f"{where}: figures {p}")
                pool = p["pool"]
                check(pool["groups"] == int(groups) and pool["channels_per_group"] == 4 and
                      pool["routing_misses"] == 0, f"{where}: pool {pool}")

# put_signal round trips from the host (--round-trip: the shape --initiator device measures),
# checked both ways (the peer verifies the ping, the initiator the echo). On tcp;ofi_rxm
# (manual progress) the first ping used to reach the peer while it was still joining, so it
# counted from 1 and waited for a second ping for ever: the target now reads its baseline at
# the start of each point and says so before the first ping goes.
for prov, extra in providers:
    where = f"{prov} put-signal --round-trip --check"
    pts = json_points(run("--provider", prov, *extra, "--op", "put-signal", "--round-trip",
                          "--size", SIZES, "--iterations", "20", "--warmup", "2", "--check",
                          "--json"), where)
    check([p["size"] for p in pts] == [8, 12288, 262144, 1048576], f"{where}: points {pts}")
    for p in pts:
        check(p["op"] == "put-signal" and p["round_trip"] is True and p["memory"] == "host" and
              p["initiator"] == "host" and p["iterations"] == 20, f"{where}: identity {p}")
        check(p["lat_us_p50"] > 0 and p["lat_us_p99"] >= p["lat_us_p50"] and
              p["bw_bytes_per_s"] > 0, f"{where}: figures {p}")
    # Several points in a row on the same signal word (counts carry over), and the table.
    r = run("--provider", prov, *extra, "--op", "put-signal", "--round-trip", "--size", "8,16,8",
            "--iterations", "50")
    check(r.returncode == 0 and "one whole round trip" in r.stdout and
          "host memory, host-initiated" in r.stdout, f"{prov} round-trip table: {r.stdout} {r.stderr}")
# The plain put-signal reports it is no round trip.
pts = json_points(run("--op", "put-signal", "--size", "8", "--iterations", "20", "--json"),
                  "put-signal")
check(all(p["round_trip"] is False and p["memory"] == "host" for p in pts), f"put-signal: {pts}")

# --memory cuda: with a GPU here (and CUDA in the build) it runs, checked; without, it ends at
# once with exit 3 naming why (no CUDA in this build, or no usable GPU). A GPU that does not
# exist is refused the same way everywhere.
r = run("--memory", "cuda", "--op", "put", "--size", "8,1M", "--iterations", "20", "--check",
        "--json")
if r.returncode == 0:
    pts = json_points(r, "--memory cuda")
    check(all(p["memory"] == "cuda" for p in pts) and len(pts) == 2, f"--memory cuda: {pts}")
    for args in (["--op", "send"], ["--op", "put-signal", "--round-trip"],
                 ["--op", "put", "--initiator", "device"],
                 ["--op", "put", "--initiator", "device", "--device-scope", "warp"],
                 ["--op", "put-signal", "--initiator", "device"]):
        pts = json_points(run("--memory", "cuda", *args, "--size", "8,1M", "--iterations", "20",
                              "--check", "--json"), f"--memory cuda {args}")
        check(len(pts) == 2 and all(p["lat_us_p50"] > 0 for p in pts), f"cuda {args}: {pts}")
else:
    check(r.returncode == 3 and "--memory cuda" in r.stderr and
          ("no usable GPU" in r.stderr or "built without CUDA" in r.stderr),
          f"--memory cuda without a GPU: exit 3 naming why (got {r.returncode}: {r.stderr})")
    r = run("--memory", "cuda", "--op", "put-signal", "--initiator", "device", "--size", "8")
    check(r.returncode == 3 and "--memory cuda --initiator device" in r.stderr,
          f"--initiator device without a GPU: exit 3 naming why ({r.returncode}: {r.stderr})")
r = run("--memory", "cuda", "--gpu", "1023", "--size", "8", "--iterations", "5")
check(r.returncode == 3 and ("GPU 1023 does not exist" in r.stderr or "no usable GPU" in r.stderr
                             or "built without CUDA" in r.stderr),
      f"--gpu 1023: exit 3 naming why ({r.returncode}: {r.stderr})")

# --check catches a wrong byte, wherever the op verifies it, and names size, iteration, offset.
for op, who in (("send", "target"), ("put", "target"), ("get", "initiator"),
                ("put-signal", "target"), ("put-signal --round-trip", "initiator")):
    r = run("--op", *op.split(), "--size", "4K", "--iterations", "20", "--warmup", "2", "--check",
            "--test-corrupt", "7")
    check(r.returncode == 1, f"corrupted {op}: exit 1 (got {r.returncode})")
    check("size 4096, iteration 7: first bad byte at offset 2048" in r.stderr and who in r.stderr,
          f"corrupted {op}: message names size, iteration, offset, side: {r.stderr.strip()}")
# ... and over several comms, and in alltoall (both sides' streams carry the corruption).
for args in (["--op", "send", "--comms", "4"], ["--op", "send", "--comms", "4", "--depth", "4"],
             ["--op", "put", "--comms", "3"], ["--pattern", "alltoall", "--comms", "2"]):
    r = run(*args, "--size", "4K", "--iterations", "20", "--warmup", "2", "--check",
            "--test-corrupt", "7")
    check(r.returncode == 1 and "size 4096, iteration 7: first bad byte at offset 2048" in r.stderr,
          f"corrupted {args}: exit 1 naming size, iteration, offset ({r.returncode}: {r.stderr})")
# The same corruption without --check goes unnoticed: the detection above is the check's.
r = run("--op", "put", "--size", "4K", "--iterations", "20", "--test-corrupt", "7")
check(r.returncode == 0, f"corruption without --check: exit 0 (got {r.returncode}: {r.stderr})")

# CSV and table.
r = run("--op", "put", "--size", "8,4K", "--iterations", "20", "--csv")
lines = r.stdout.splitlines()  # the header line, then a row per point (no end line in CSV)
check(r.returncode == 0 and len(lines) == 3, f"--csv: header + 2 rows (got {lines})")
if lines:
    header = lines[0].split(",")
    check(header[:11] == ["op", "size", "rails", "provider", "mode", "lat_us_p50", "lat_us_p99",
                          "lat_us_max", "lat_us_mean", "bw_bytes_per_s", "msg_per_s"] and
          "link_fraction" in header and "iterations" in header and
          header[-14:-3] == ["comms", "pool_groups", "pool_channels_per_group", "pool_channels",
                             "pool_cqs", "pool_comms_attached", "pool_primaries",
                             "pool_secondaries", "pool_routing_misses", "pool_channel_ops",
                             "pool_busiest_channel_ops"] and
          header[-3:] == ["memory", "initiator", "round_trip"], f"--csv header: {header}")
    check(all(len(l.split(",")) == len(header) for l in lines[1:]), "--csv rows match the header")
r = run("--op", "get", "--size", "4K", "--iterations", "20")
check(r.returncode == 0 and "p50_us" in r.stdout and "n/a" in r.stdout and "link rate unknown" in r.stdout,
      f"table: header and n/a link fraction: {r.stdout}")
r = run("--op", "put", "--size", "4K", "--iterations", "20", "--comms", "2", "--groups", "0")
check(r.returncode == 0 and "2 comms per peer and direction" in r.stdout and
      "channel pool (this process's device, comms still open): groups 0 x 4" in r.stdout and
      "routing misses 0" in r.stdout, f"table: comms and pool counters: {r.stdout}")

# Sizes: ranges are powers of two, inclusive; lists and ranges mix; duplicates dropped.
pts = json_points(run("--op", "put", "--size", "1:64", "--iterations", "5", "--json"), "1:64")
check([p["size"] for p in pts] == [1, 2, 4, 8, 16, 32, 64], f"1:64 sweep: {[p['size'] for p in pts]}")
pts = json_points(run("--op", "put", "--size", "8,4K:16K,8", "--iterations", "5", "--json"), "mix")
check([p["size"] for p in pts] == [8, 4096, 8192, 16384], f"8,4K:16K,8: {[p['size'] for p in pts]}")
# Without --iterations, large sizes run fewer iterations (1 GiB per point), and say so.
pts = json_points(run("--op", "put", "--size", "8,64M", "--json"), "auto iterations")
if check(len(pts) == 2, "auto iterations: two points"):
    check(pts[0]["iterations"] == 10000 and pts[1]["iterations"] == 16 and pts[1]["warmup"] == 1,
          f"auto iterations: 10000 at 8 B, 16 at 64 MiB: {pts}")

# Acceptance thresholds.
r = run("--op", "put", "--size", "8,4K", "--iterations", "20", "--expect-bw", "100000")
check(r.returncode == 1 and "size 8 fell short of --expect-bw" in r.stderr and
      "size 4096 fell short of --expect-bw" in r.stderr, f"--expect-bw unreachable: {r.returncode} {r.stderr}")
r = run("--op", "send", "--size", "8", "--iterations", "20", "--expect-lat", "0.0001")
check(r.returncode == 1 and "size 8 fell short of --expect-lat" in r.stderr,
      f"--expect-lat unreachable: {r.returncode} {r.stderr}")
r = run("--op", "send", "--size", "8", "--iterations", "20", "--expect-lat", "1000000",
        "--expect-bw", "0.000000001")
check(r.returncode == 0, f"--expect-* met: exit 0 (got {r.returncode}: {r.stderr})")

# Bad usage: exit 2, naming what was wrong.
for args, names in ((["--size", "12X"], "'12X'"), (["--size", "0"], "'0' is zero"),
                    (["--size", "64M:1M"], "'64M:1M' is reversed"), (["--size", "8G"], "'8G'"),
                    (["--size", "8,,9"], "empty item"), (["--op", "scatter"], "scatter"),
                    (["--server", "--connect", "127.0.0.1:18515"], "--server and --connect"),
                    (["--port", "0"], "--port"), (["--port", "70000"], "--port"),
                    (["--connect", "127.0.0.1"], "HOST:PORT"), (["--json", "--csv"], "--csv"),
                    (["--iterations", "0"], "--iterations"), (["--no-such-option"], "no-such-option"),
                    (["--comms", "0"], "--comms"), (["--comms", "257"], "--comms"),
                    (["--groups", "-1"], "--groups"),
                    (["--op", "put", "--gap-us", "100"], "--gap-us belongs to the send ping-pong"),
                    (["--depth", "4", "--gap-us", "100"], "--gap-us belongs to the send ping-pong"),
                    (["--sliding"], "--sliding belongs to --op put and get"),
                    (["--op", "put", "--sliding", "--check"], "--sliding belongs to --op put and get"),
                    (["--op", "put", "--time-calls"], "--time-calls goes with --sliding"),
                    (["--op", "send", "--slots", "2"], "--slots belongs to --op put and get"),
                    (["--op", "put", "--slots", "2", "--check"],
                     "--slots belongs to --op put and get, without --check"),
                    (["--op", "put", "--slots", "0"], "--slots"),
                    (["--server", "--pattern", "alltoall"], "--pattern belongs to --connect"),
                    (["--connect", "127.0.0.1:18515", "--pattern", "fan-in"], "excludes --server"),
                    (["--memory", "gpu"], "--memory"), (["--initiator", "kernel"], "--initiator"),
                    (["--initiator", "device", "--op", "get", "--memory", "cuda"],
                     "--initiator device belongs to --op put and --op put-signal, not --op get"),
                    (["--initiator", "device", "--memory", "cuda"], "not --op send"),
                    (["--initiator", "device", "--op", "atomic", "--memory", "cuda"],
                     "not --op atomic"),
                    (["--initiator", "device", "--op", "put"], "needs --memory cuda"),
                    (["--initiator", "device", "--op", "put", "--memory", "cuda", "--comms", "2"],
                     "no --comms above 1"),
                    (["--op", "put", "--device-scope", "warp"], "--device-scope belongs to"),
                    (["--initiator", "device", "--op", "put", "--memory", "cuda",
                      "--single-thread"], "--single-thread and --initiator device"),
                    (["--initiator", "device", "--op", "put-signal", "--memory", "cuda",
                      "--device-scope", "block"], "--device-scope belongs to"),
                    (["--op", "put", "--round-trip"], "--round-trip belongs to --op put-signal"),
                    (["--memory", "cuda", "--pattern", "alltoall"], "not with --pattern"),
                    (["--peer-gpu", "1"], "--peer-gpu belongs to local mode"),
                    (["--cpu", "0"], "--cpu in local mode needs --peer-cpu too"),
                    (["--cpu", "0", "--peer-cpu", "0", "--connect", "127.0.0.1:18515"],
                     "--peer-cpu belongs to local mode"),
                    (["--cpu", "4095", "--peer-cpu", "0"],
                     "CPU 4095 is not one this process may run on"),
                    (["--cpu", "4096", "--peer-cpu", "0"], "--cpu"),
                    (["--memory", "cuda", "--peer-gpu", "1", "--server"],
                     "--peer-gpu belongs to local mode")):
    r = run(*args)
    check(r.returncode == 2 and names in r.stderr, f"{args}: exit 2 naming {names} "
          f"(got {r.returncode}: {r.stderr.strip()})")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
