#!/usr/bin/env python3
"""Runs the built xport-scale as an operator does, at small N: one-sided (windows by the
target's key, rounds of put_signal, latency samples) and two-sided (comms to one listener, 4 KiB
and 1 MiB sends) on shm and tcp;ofi_rxm, once with the initiators in two processes and two
threads each; the JSON Lines and table shapes of docs/tools.md; that every byte and signal was
verified; the exit codes (0 ok; 1 a window that did not open, or wrong data; 2 bad usage); and
that a target whose CQ room holds fewer first grants than there are streams
(XPORT_CQ_ENTRIES=64) still opens every window and serves every round, sharing its room. Every
run has a timeout; nothing sleeps."""
import json
import os
import subprocess
import sys
import time

from checks import check, failures

tool = sys.argv[1]
FIELDS = {"tool", "version", "mode", "peers", "provider", "rails", "procs", "threads", "rounds",
          "devices", "opened", "all_opened", "open_s", "open_ms_per_peer", "open_ms_max",
          "open_slowest_peer", "error", "error_code", "errors", "bytes_verified", "bad", "verified", "ok", "progress", "target",
          "initiator", "knobs"}
ONE_SIDED = {"size", "rounds_done", "rounds_s", "rounds_per_s_per_initiator",
             "put_signals_per_s", "round_ms_max", "lat_us_p50", "lat_us_p99", "lat_samples",
             "lat_peers", "signals_verified"}
TWO_SIDED = {"sends", "messages_verified"}
TARGET = {"rss_before_bytes", "rss_after_bytes", "rss_per_peer_bytes", "registered_before_bytes",
          "registered_after_bytes", "registered_per_peer_bytes", "device_registered_bytes",
          "cq_room_per_peer", "cq_entries", "window_credits", "window_streams", "peers",
          "pool_channels", "cqs", "endpoints", "deferred_posts", "signals_applied",
          "window_cq_room", "window_streams_waiting", "window_take_backs"}
INITIATOR = {"rss_per_device_bytes", "registered_per_device_bytes", "rss_per_open_bytes",
             "registered_per_open_bytes", "window_ops_held", "deferred_posts"}
PASSES = {"passes", "mean_us", "p50_us", "p99_us", "max_us"}
TCP = ["--provider", "tcp;ofi_rxm", "--nics", "lo"]
SHM = ["--provider", "shm"]
# Quick runs: few rounds, few latency samples, few idle passes; each phase's deadline 20 s.
QUICK = ["--timeout", "20", "--idle-passes", "2000"]


def run(*args, env=None, timeout=100):
    # As an operator runs it: no XPORT_* variable of the test harness (unknown knobs warn).
    e = {k: v for k, v in os.environ.items() if not k.startswith("XPORT_")}
    e.update(env or {})
    start = time.monotonic()
    try:
        r = subprocess.run([tool, *args], capture_output=True, text=True, env=e, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{args}: no exit within {timeout} s")
        return subprocess.CompletedProcess(args, -1, "", ""), timeout
    for bad in ("terminate called", "Segmentation", "Aborted", "exception"):
        check(bad not in r.stderr, f"{args}: no crash ({bad!r} in {r.stderr!r})")
    return r, time.monotonic() - start


def records(r, where, rc=0):
    check(r.returncode == rc, f"{where}: exit {rc} (got {r.returncode}: {r.stderr.strip()})")
    out = []
    for line in r.stdout.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            check(False, f"{where}: not a JSON line: {line!r}")
    for p in out:
        check(FIELDS <= set(p), f"{where}: fields missing: {FIELDS - set(p)}")
        check((ONE_SIDED if p.get("mode") == "one-sided" else TWO_SIDED) <= set(p),
              f"{where}: mode fields missing in {sorted(p)}")
        check(TARGET <= set(p.get("target", {})), f"{where}: target fields {p.get('target')}")
        check(INITIATOR <= set(p.get("initiator", {})),
              f"{where}: initiator fields {p.get('initiator')}")
        for state in ("alone", "idle", "serving"):
            check(PASSES <= set(p.get("progress", {}).get(state, {})),
                  f"{where}: progress {state} fields {p.get('progress')}")
        check(p["tool"] == "xport-scale", f"{where}: tool name {p['tool']}")
    return out


def healthy(p, where, provider, peers):
    """A run where everything opened and was verified, with its figures in range."""
    check(p["peers"] == peers and p["provider"] == provider, f"{where}: identity {p}")
    check(p["ok"] is True and p["verified"] is True and p["all_opened"] is True and
          p["opened"] == peers and p["devices"] == peers and p["bad"] == 0 and
          p["error"] is None and p["errors"] == [], f"{where}: all opened and verified {p}")
    check(p["open_s"] > 0 and p["open_ms_max"] >= 0, f"{where}: open times {p}")
    t = p["target"]
    check(t["rss_after_bytes"] > 0 and t["rss_per_peer_bytes"] is not None and
          t["registered_per_peer_bytes"] is not None and
          ((t["cq_room_per_peer"] is None) if p["mode"] == "two-sided" else
           (0 < t["cq_room_per_peer"] <= 128)) and t["window_streams_waiting"] == 0 and
          t["cq_entries"] == "8192" and t["window_credits"] == "128" and
          t["device_registered_bytes"] > 0 and t["peers"] >= peers, f"{where}: target {t}")
    check(p["initiator"]["rss_per_device_bytes"] > 0, f"{where}: initiator {p['initiator']}")
    pr = p["progress"]
    check(pr["alone"]["passes"] == 2000 and pr["idle"]["passes"] == 2000 and
          pr["serving"]["passes"] > 0 and pr["idle"]["mean_us"] > 0, f"{where}: passes {pr}")
    check(p["knobs"] == {}, f"{where}: no knob changed {p['knobs']}")


def one_sided(p, where, provider, peers, rounds, samples):
    healthy(p, where, provider, peers)
    check(p["mode"] == "one-sided" and p["size"] == 4096 and p["rounds_done"] == rounds,
          f"{where}: rounds {p}")
    lat_peers = min(4, peers)
    check(p["lat_peers"] == lat_peers and p["lat_samples"] == lat_peers * samples,
          f"{where}: latency samples {p}")
    # Every put_signal of every round and sample: its word seen at its value, its bytes checked.
    signals = peers * rounds + p["lat_samples"]
    check(p["signals_verified"] == signals and p["bytes_verified"] == signals * 4096,
          f"{where}: verified counts {p}")
    check(p["target"]["signals_applied"] == signals,
          f"{where}: the target's own count of signals applied {p['target']}")
    check(p["target"]["window_streams"] >= peers, f"{where}: window streams {p['target']}")
    check(p["lat_us_p50"] > 0 and p["lat_us_p99"] >= p["lat_us_p50"] and
          p["rounds_per_s_per_initiator"] > 0, f"{where}: figures {p}")


def two_sided(p, where, provider, peers, rounds):
    healthy(p, where, provider, peers)
    check(p["mode"] == "two-sided", f"{where}: mode {p}")
    check([(s["size"], s["rounds"], s["messages"]) for s in p["sends"]] ==
          [(4096, rounds, peers * rounds), (1 << 20, rounds, peers * rounds)],
          f"{where}: sends {p['sends']}")
    check(p["messages_verified"] == 2 * peers * rounds and
          p["bytes_verified"] == peers * rounds * (4096 + (1 << 20)), f"{where}: verified {p}")
    check(all(s["msgs_per_s"] > 0 for s in p["sends"]), f"{where}: rates {p['sends']}")


# One-sided, shm, two N in one invocation (each N a fresh run).
r, _ = run(*SHM, *QUICK, "--peers", "4,16", "--rounds", "3", "--latency-samples", "5", "--json")
recs = records(r, "shm one-sided 4,16")
check([p["peers"] for p in recs] == [4, 16], f"shm one-sided: one record per N in order {recs}")
for p in recs:
    one_sided(p, f"shm one-sided N={p['peers']}", "shm", p["peers"], 3, 5)

# One-sided, tcp;ofi_rxm, the initiators in two processes of two threads each.
r, _ = run(*TCP, *QUICK, "--peers", "4", "--procs", "2", "--threads", "2", "--rounds", "3",
           "--latency-samples", "5", "--json")
for p in records(r, "tcp one-sided --procs 2"):
    one_sided(p, "tcp one-sided --procs 2", "tcp;ofi_rxm", 4, 3, 5)
    check(p["procs"] == 2 and p["threads"] == 2, f"tcp one-sided --procs 2: settings {p}")

# Two-sided on both providers: 4 KiB (eager) and 1 MiB (rendezvous) from every initiator.
for prov, args in (("shm", SHM), ("tcp;ofi_rxm", TCP)):
    r, _ = run(*args, *QUICK, "--mode", "two-sided", "--peers", "4", "--rounds", "2", "--json")
    recs = records(r, f"{prov} two-sided")
    check(len(recs) == 1, f"{prov} two-sided: one record {recs}")
    for p in recs:
        two_sided(p, f"{prov} two-sided", prov, 4, 2)

# The table: version, settings, knobs, the device's own registration, column names, a row per N.
r, _ = run(*SHM, *QUICK, "--peers", "2,3", "--rounds", "2", "--latency-samples", "2")
lines = r.stdout.splitlines()
check(r.returncode == 0, f"table: exit 0 (got {r.returncode}: {r.stderr})")
check(len(lines) == 7, f"table: 5 header lines and 2 rows {lines}")
if len(lines) == 7:
    check(lines[0].startswith("xport-scale ") and "one-sided, provider shm" in lines[1] and
          lines[2] == "knobs: all at their defaults" and "each device registers" in lines[3] and
          lines[4].split()[:2] == ["N", "windows"], f"table: header {lines[:5]}")
    for line, n in zip(lines[5:], ("2", "3")):
        w = line.split()
        check(w[0] == n and w[1] == n and "ok" in w, f"table: row for N={n}: {line!r}")

# A target whose CQ room holds fewer first grants than there are streams (XPORT_CQ_ENTRIES=64:
# 48 entries for window streams, 4 to each new one, 16 initiators): every window opens, every
# round lands and is verified; the target took unused credits back for the streams that waited.
cq = {"XPORT_CQ_ENTRIES": "64"}
r, took = run(*SHM, *QUICK, "--peers", "16", "--rounds", "3", "--latency-samples", "2", "--json",
              env=cq)
for p in records(r, "XPORT_CQ_ENTRIES=64"):
    check(p["all_opened"] is True and p["opened"] == 16 and p["ok"] is True and
          p["error"] is None and p["errors"] == [], f"XPORT_CQ_ENTRIES=64: every window opened {p}")
    check(p["verified"] is True and p["rounds_done"] == 3 and
          p["signals_verified"] == 3 * 16 + p["lat_samples"],
          f"XPORT_CQ_ENTRIES=64: every round verified {p}")
    t = p["target"]
    check(t["window_take_backs"] > 0 and t["window_cq_room"] <= 48 and
          t["window_streams_waiting"] == 0,
          f"XPORT_CQ_ENTRIES=64: the room shared, never more than 48 entries held {t}")
    check(p["knobs"].get("XPORT_CQ_ENTRIES", "").startswith("64 (default"),
          f"XPORT_CQ_ENTRIES=64: the knob in effect is shown {p['knobs']}")
check(took < 60, f"XPORT_CQ_ENTRIES=64: ended in {took:.1f} s, not at a deadline")

# Wrong data is caught, named, and exits 1 (a test-only option flips one byte of initiator 0).
r, _ = run(*SHM, *QUICK, "--peers", "3", "--rounds", "3", "--latency-samples", "2",
           "--test-corrupt", "2", "--json")
for p in records(r, "one-sided --test-corrupt 2", rc=1):
    check(p["bad"] == 1 and p["verified"] is False and p["all_opened"] is True and
          "initiator 0's slot differs" in (p["error"] or "") and p["error_code"] == "data",
          f"one-sided --test-corrupt 2: the bad slot named {p}")
r, _ = run(*SHM, *QUICK, "--mode", "two-sided", "--peers", "3", "--rounds", "1",
           "--test-corrupt", "1", "--json")
for p in records(r, "two-sided --test-corrupt 1", rc=1):
    check(p["bad"] == 2 and p["verified"] is False and "differs at byte" in (p["error"] or ""),
          f"two-sided --test-corrupt 1: both bad messages counted, the first named {p}")

# Bad usage: exit 2, the option named, nothing run.
for args, words in ((["--peers", "0"], "--peers"), (["--peers", "4,x"], "--peers"),
                    (["--peers", "4,,8"], "--peers"), (["--mode", "bogus"], "--mode"),
                    (["--size", "0"], "--size"), (["--size", "2M"], "--size"),
                    (["--sizes", "4K,4"], "--sizes"), (["--procs", "-1"], "--procs"),
                    (["--threads", "0"], "--threads"), (["--timeout", "0"], "--timeout")):
    r, _ = run(*args)
    check(r.returncode == 2 and words in r.stderr and r.stdout == "",
          f"{args}: exit 2 naming {words} (got {r.returncode}: {r.stderr!r})")
# A failure before any run: one line, exit 1.
r, _ = run("--provider", "nosuch", "--peers", "4")
check(r.returncode == 1 and r.stderr.count("\n") == 1 and "'nosuch'" in r.stderr,
      f"--provider nosuch: one line, exit 1 (got {r.returncode}: {r.stderr!r})")

if failures:
    sys.exit(1)
print("xport-scale: every check passed")
