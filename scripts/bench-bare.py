#!/usr/bin/env python3
"""xport-bench next to fi-bare-loop (bare libfabric): latency, message rate, bandwidth; medians.

  scripts/bench-bare.py [--build build] [--rounds 5] [--providers shm,tcp;ofi_rxm]
                        [--rows pingpong,send-rate,put-rate,wakeup,put-bw,send-bw]
                        [--taskset 2-5]
                        [--rate-window 64] [--bw-window 16] [--latency p50] [--quick]
                        [--xport-args "--single-thread"] [--variant NAME=BUILD[:ARGS]]...
                        [--progress] [--os-counters] [--pin A,B]

The rows of issue 14, each run once with xport-bench and once with fi-bare-loop per round (the
order alternating round by round), so slow phases of the machine hit both:
  pingpong-8, -4K, -1M      one-way latency (half the round trip; --latency: each run's p50 or
                            mean), xport-bench --op send vs fi-bare-loop --mode pingpong
  send-rate-8, put-rate-8   messages/s with --rate-window in flight (xport-bench --depth)
  wakeup-8                  what a sleeping target's wake-up adds to an 8-byte round trip:
                            2 x (p50 asleep - p50 spinning), the initiator idle 200 µs before
                            each ping; xport-bench with XPORT_WAIT=spin and =block against
                            fi-bare-loop without and with --block (providers whose CQs have a
                            wait object: not shm); target under 10 µs, an absolute bound
  put-bw-64K, -1M, -64M     GB/s with --bw-window writes in flight
  send-bw-64K, -1M, -64M    GB/s with --bw-window sends in flight (both tools cap sends in
                            flight at the 64 MiB of slots / size: one at 64 MiB)
Both keep a sliding window of that many writes: xport-bench's puts with --sliding (each new put
waits for the oldest to be locally complete; puts within the inject size are complete at once;
one quiet, to delivery, ends the phase and is timed; the --warmup puts before it are not),
fi-bare-loop's fi_write/fi_writedata (fi_inject_write, without a window, where it fits; one
fi_read ends its phase). Each round of a put row runs both its fi_write and its fi_writedata
loop (--bare-put); a round's line shows the better run, the table reads the row against the
loop with the better median over the call. Each tool's figure is the one its --json reports
(lat_us_p50 or lat_us_mean, msg_per_s, bw_bytes_per_s); FI_TCP_IFACE defaults to lo for both.
--xport-args adds arguments to every xport-bench run (e.g. --single-thread: a device opened
with ContextOptions::thread_safe = false). --variant (repeatable) compares libxport builds or
arguments in the same rounds: each NAME runs BUILD/tools/xport-bench with ARGS (space-separated)
in turn with the others and the bare loop (from --build), and gets its own rows in the table;
words of ARGS of the form XPORT_NAME=VALUE are that variant's environment (knobs), not arguments.
--pin A,B runs the initiator on CPU A and the target on CPU B in both tools (with --taskset, inside
it): rounds then differ by the machine, not by where the scheduler put the two processes.
--progress adds each xport-bench run's progress counters to its line (whole-run totals of its
device: CQ polls, posts, -FI_EAGAIN retries, window operations held).
--os-counters adds, per run of every tool, what the kernel saw of its two processes over the
whole run (start-up included) per message sent (iterations + warm-up): user and system CPU µs,
voluntary and involuntary context switches (getrusage of the waited-for children), and the
host's TCP segments sent and TcpExt counters moved (/proc/net/snmp, /proc/net/netstat: on the
quiet host, loopback traffic is the runs' own), to tell what a row's fast and slow runs differ
by.
--time-calls (a diagnostic; put bandwidth rows) has both tools read the clock around each posted
write or put call and each wait for room in their window, in the timed phase, and prints each
run's mean ns per write in both (xport-bench --time-calls, fi-bare-loop --time-calls), and
their medians over the rounds at the end: whether a row's gap is in the calls or in the waits.
The clock reads themselves cost both tools the same few tens of ns per write.
--rows takes row names or their prefixes. Prints one line per run and, at the end, a markdown
table: medians, their ratio (which the target is read against), the median and quartiles of
the rounds' own ratios (each round's libxport run over that round's bare figure: a row whose
runs fall in two modes moves the ratio of medians more than it moves these), each tool's
min-max across rounds, the issue's target, met or not; and for put rows with both bare loops,
libxport against each loop alone and against each round's better run (median and quartiles
of the per-round ratios).
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys

K, M = 1 << 10, 1 << 20



def first_point(stdout):
    """The first measured point of JSON Lines output: xport-bench's come after its header record
    ("record": "header"); fi-bare-loop's have no record field."""
    for line in stdout.splitlines():
        r = json.loads(line)
        if r.get("record", "point") == "point":
            return r
    sys.exit(f"no measured point in: {stdout[-2000:]}")

def size_name(size):
    return f"{size // M}M" if size >= M else f"{size // K}K" if size >= K else str(size)


WAKE_GAP_US = 200  # the wake-up row's idle time before each ping
WAKE_PROVIDERS = ("tcp;ofi_rxm", "tcp", "sockets")  # CQs with a wait object (shm has none)


def rows(rate_window, bw_window):
    """(name, kind, size, window, xport-bench args, fi-bare-loop mode, what a run reports)."""
    out = [(f"pingpong-{size_name(s)}", "lat", s, 1, ["--op", "send"], "pingpong", "lat")
           for s in (8, 4 * K, M)]
    out.append(("send-rate-8", "rate", 8, rate_window,
                ["--op", "send", "--depth", str(rate_window)], "send-rate", "msg_per_s"))
    out.append(("put-rate-8", "rate", 8, rate_window,
                ["--op", "put", "--depth", str(rate_window), "--sliding"], "put-rate",
                "msg_per_s"))
    # What a sleeping target's wake-up adds to a round trip: 2 x (block p50 - spin p50), each
    # tool once spinning and once asleep on its CQ's wait object (libxport: XPORT_WAIT; the bare
    # loop: --block), the initiator idle (--gap-us) before each ping so the target is asleep.
    out.append(("wakeup-8", "wake", 8, 1, ["--op", "send", "--gap-us", str(WAKE_GAP_US)],
                "pingpong", "lat"))
    for op in ("put", "send"):
        for s in (64 * K, M, 64 * M):
            out.append((f"{op}-bw-{size_name(s)}", "bw", s, bw_window,
                        ["--op", op, "--depth", str(bw_window)] +
                        (["--sliding"] if op == "put" else []), f"{op}-bw", "bw_bytes_per_s"))
    return out


def counts(kind, size, quick):
    """(iterations, warmup) of one run: seconds per run, not minutes, on a quiet machine."""
    if kind == "wake":
        n = 5000
    elif kind == "lat":
        n = 2000 if size >= M else 10000
    elif kind == "rate":
        n = 50000
    else:
        n = max(16, min(20000, (1 << 30) // size))
    if quick:
        n = max(8, n // 5)
    return n, max(1, n // 10)


TCP_EXT = ("TCPAutoCorking", "TCPRcvCoalesce", "TCPBacklogCoalesce", "DelayedACKs",
           "TCPPureAcks", "TCPHPAcks")


def os_counters():
    """Cumulative: children's rusage and the host's TCP counters (name -> number)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"user_us": ru.ru_utime * 1e6, "sys_us": ru.ru_stime * 1e6,
           "vcsw": float(ru.ru_nvcsw), "ivcsw": float(ru.ru_nivcsw)}
    for path, want in (("/proc/net/snmp", {"Tcp": ("OutSegs", "InSegs")}),
                       ("/proc/net/netstat", {"TcpExt": TCP_EXT})):
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for head, vals in zip(lines[::2], lines[1::2]):
            names, nums = head.split(), vals.split()
            group = names[0].rstrip(":")
            for k, v in zip(names[1:], nums[1:]):
                if k in want.get(group, ()):
                    out[k] = float(v)
    return out


def os_line(before, after, messages):
    short = {"user_us": "user µs", "sys_us": "sys µs", "vcsw": "vol cs", "ivcsw": "invol cs",
             "OutSegs": "segs out", "InSegs": "segs in", "TCPAutoCorking": "autocork",
             "TCPRcvCoalesce": "rcv coalesce", "TCPBacklogCoalesce": "backlog coalesce",
             "DelayedACKs": "delayed acks", "TCPPureAcks": "pure acks", "TCPHPAcks": "hp acks"}
    return ", ".join(f"{short[k]} {(after[k] - before.get(k, 0.0)) / messages:.3f}"
                     for k in short if k in after)


def run(cmd, taskset, env, what):
    if taskset:
        cmd = ["taskset", "-c", taskset] + cmd
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    except subprocess.TimeoutExpired:
        sys.exit(f"{what}: no result within 600 s: {' '.join(cmd)}")
    if out.returncode != 0:
        sys.exit(f"{what} failed (exit {out.returncode}): {' '.join(cmd)}\n"
                 f"{out.stderr.strip()[-2000:]}")
    return first_point(out.stdout)


def figure(result, key, latency):
    if key == "lat":
        return result[f"lat_us_{latency}"]
    return result[key] / (1e6 if key == "msg_per_s" else 1e9)  # Mmsg/s, GB/s


def target_of(name, kind):
    """(bound, at_most): latency at most 1.3x bare (1.05x at 1 MiB), rate and bw at least 0.9x;
    the wake-up under 10 µs (an absolute bound, not a ratio)."""
    if kind == "wake":
        return 10.0, True
    if kind == "lat":
        return (1.05 if name.endswith("-1M") else 1.3), True
    return 0.9, False


def ratio_of(x, b):  # a wake-up row's bare figure can be 0 or below by noise
    return x / b if b > 0 else float("nan")


def spread(each):
    each = sorted(each)
    q = (statistics.quantiles(each, n=4, method="inclusive") if len(each) > 1
         else [each[0]] * 3)
    return f"{statistics.median(each):.3f} ({q[0]:.3f}–{q[2]:.3f})"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--providers", default="shm,tcp;ofi_rxm")
    p.add_argument("--rows", default="", help="row names or prefixes, comma-separated (all)")
    p.add_argument("--taskset", default="", help="CPU list for both processes (taskset -c)")
    p.add_argument("--rate-window", type=int, default=64,
                   help="messages in flight for the 8 B rates (xport-bench --depth)")
    p.add_argument("--bw-window", type=int, default=16,
                   help="writes or sends in flight for the bandwidth rows (xport-bench --depth)")
    p.add_argument("--latency", choices=["p50", "mean"], default="p50",
                   help="which one-way latency of each run: its median (default) or its mean")
    p.add_argument("--bare-no-inject", action="store_true",
                   help="fi-bare-loop posts fi_send/fi_write even where fi_inject* fits")
    p.add_argument("--bare-put", choices=["best", "write", "writedata"], default="best",
                   help="the bare put loop: fi_write, fi_writedata (the target counts the CQ "
                   "data), or both, the one with the better median counting (default; libxport's "
                   "puts are writes with CQ data, and neither loop is the faster at every size)")
    p.add_argument("--quick", action="store_true", help="a fifth of the iterations")
    p.add_argument("--pin", default="",
                   help="A,B: the initiator on CPU A, the target on CPU B, in both tools "
                   "(xport-bench --cpu A --peer-cpu B, fi-bare-loop --cpus A,B), so that rounds "
                   "do not differ by where the scheduler put the two processes")
    p.add_argument("--progress", action="store_true",
                   help="print each xport-bench run's progress counters (its device's CQ polls, "
                   "posts, -FI_EAGAIN retries, window operations held: whole-run totals)")
    p.add_argument("--os-counters", action="store_true",
                   help="print, per run of every tool and per message, its processes' CPU time "
                   "and context switches and the host's TCP counters (see above)")
    p.add_argument("--time-calls", action="store_true",
                   help="put bandwidth rows: print each run's ns per write in calls and in waits "
                   "(see above)")
    p.add_argument("--xport-args", default="", help="more xport-bench arguments, space-separated")
    p.add_argument("--variant", action="append", default=[],
                   help="NAME=BUILD[:ARGS]: a libxport build (and arguments; XPORT_KNOB=VALUE words "
                        "set knobs) to run beside the others (repeatable; default: "
                        "libxport=--build)")
    a = p.parse_args()
    if a.pin and (len(a.pin.split(",")) != 2 or not all(x.isdigit() for x in a.pin.split(","))):
        sys.exit(f"--pin {a.pin}: A,B (two CPU numbers)")
    bare = os.path.join(a.build, "tools", "fi-bare-loop")
    variants = []  # (name, xport-bench, extra arguments, environment)
    for v in a.variant or [f"libxport={a.build}"]:
        name, sep, rest = v.partition("=")
        if not sep or not name or name.startswith("bare"):
            sys.exit(f"--variant {v}: NAME=BUILD[:ARGS] (a name not starting with 'bare')")
        build, _, vargs = rest.partition(":")
        words = vargs.split() + a.xport_args.split()
        venv = dict(w.split("=", 1) for w in words if re.fullmatch(r"XPORT_[A-Z0-9_]+=.*", w))
        variants.append((name, os.path.join(build, "tools", "xport-bench"),
                         [w for w in words if not re.fullmatch(r"XPORT_[A-Z0-9_]+=.*", w)],
                         venv))
    if len({v[0] for v in variants}) != len(variants):
        sys.exit("--variant: each NAME once")
    for tool in [v[1] for v in variants] + [bare]:
        if not os.access(tool, os.X_OK):
            sys.exit(f"{tool} is missing: ninja -C {a.build} tools/xport-bench tools/fi-bare-loop")
    picks = [r for r in a.rows.split(",") if r]
    table = [r for r in rows(a.rate_window, a.bw_window)
             if not picks or any(r[0] == x or r[0].startswith(x + "-") for x in picks)]
    if not table:
        sys.exit(f"--rows {a.rows}: no such rows")
    env = dict(os.environ)
    env.setdefault("FI_TCP_IFACE", "lo")  # both tools on loopback, whatever the host's NICs
    results = {}
    timed = {}  # (row, provider, tool) -> [(call_ns, wait_ns)], --time-calls
    for r in range(a.rounds):
        for prov in a.providers.split(","):
            for name, kind, size, window, xargs, mode, key in table:
                if kind == "wake" and prov not in WAKE_PROVIDERS:
                    if r == 0:
                        print(f"({name} {prov}: skipped: the provider's CQs have no wait object "
                              "to sleep on)", flush=True)
                    continue
                n, warmup = counts(kind, size, a.quick)
                common = ["--provider", prov, "--size", str(size), "--iterations", str(n),
                          "--warmup", str(warmup), "--json"]
                bare_cmd = [bare, "--mode", mode, "--window", str(window)] + common + (
                    ["--cpus", a.pin] if a.pin else [])
                if a.bare_no_inject:
                    bare_cmd.append("--no-inject")
                time_calls = a.time_calls and mode == "put-bw"
                if time_calls:
                    bare_cmd.append("--time-calls")
                    xargs = xargs + ["--time-calls"]
                pin = (["--cpu", a.pin.split(",")[0], "--peer-cpu", a.pin.split(",")[1]]
                       if a.pin else [])
                cmds = [(vn, [vb] + xargs + common + pin + va, ve)
                        for vn, vb, va, ve in variants]
                bare_cmds = [("bare", bare_cmd, {})]
                if kind == "wake":
                    bare_cmd += ["--gap-us", str(WAKE_GAP_US)]
                    cmds = [(f"{vn}/{how}", c, {**ve, "XPORT_WAIT": how})
                            for how in ("spin", "block") for vn, c, ve in cmds]
                    bare_cmds = [("bare/spin", bare_cmd, {}),
                                 ("bare/block", bare_cmd + ["--block"], {})]
                if mode.startswith("put") and a.bare_put != "write":
                    wd = ("bare-writedata", bare_cmd + ["--writedata"], {})
                    bare_cmds = [wd] if a.bare_put == "writedata" else bare_cmds + [wd]
                # The order alternates round by round (and the variants rotate), so slow
                # phases of the machine hit every tool.
                k = r % len(cmds)
                cmds = cmds[k:] + cmds[:k] + bare_cmds
                got, seen = {}, {}
                for tool, cmd, venv in (cmds if r % 2 == 0 else cmds[::-1]):
                    before = os_counters() if a.os_counters else None
                    got[tool] = run(cmd, a.taskset, {**env, **venv}, f"{name} {prov} {tool}")
                    if a.os_counters:
                        seen[tool] = os_line(before, os_counters(), n + warmup)
                unit = {"lat": "us", "rate": "Mmsg/s", "bw": "GB/s", "wake": "us"}[kind]
                if kind == "wake":
                    wake = {t: 2 * (figure(got[f"{t}/block"], key, a.latency) -
                                    figure(got[f"{t}/spin"], key, a.latency))
                            for t in [v[0] for v in variants] + ["bare"]}
                    each = "  ".join(f"{t} {figure(v, key, a.latency):.3f}"
                                     for t, v in got.items())
                    for vn, *_ in variants:
                        x, b = wake[vn], wake["bare"]
                        results.setdefault((name, prov, vn), (kind, []))[1].append((x, b, {}))
                        print(f"round {r + 1} {prov:12} {name:12} {vn} {x:9.3f} us (wake-up "
                              f"per round trip)  bare {b:9.3f} us  [one-way p50: {each}]",
                              flush=True)
                else:
                    bares = [(figure(v, key, a.latency), v) for t, v in got.items()
                             if t.startswith("bare")]
                    b, best = (min if kind == "lat" else max)(bares, key=lambda fv: fv[0])
                    flight = best["in_flight"] or "inject"
                    also = "".join(f" [{v['op']} {f:.3f}]" for f, v in bares if len(bares) > 1)
                    per_loop = {v["op"]: f for f, v in bares}
                    bare_eagain = ", ".join(str(v.get("eagain_retries", "?")) for _, v in bares)
                    for vn, *_ in variants:
                        x = figure(got[vn], key, a.latency)
                        results.setdefault((name, prov, vn), (kind, []))[1].append(
                            (x, b, per_loop))
                        g = got[vn].get("progress", {})
                        counters = (f"  [polls {g['cq_polls']} (empty {g['cq_empty_polls']}), "
                                    f"posts {g['posts']}, eagain {g['eagain_retries']}, "
                                    f"held {g['window_ops_held']}; bare eagain {bare_eagain}]"
                                    if a.progress and g else "")
                        print(f"round {r + 1} {prov:12} {name:12} {vn} {x:9.3f} {unit} "
                              f"(depth {got[vn]['depth']})  bare {b:9.3f} {unit} "
                              f"({best['op']}, in flight {flight}){also}  ratio {x / b:.3f}"
                              f"{counters}", flush=True)
                if time_calls:
                    each = []
                    for tool, v in got.items():
                        t = v.get("time_calls")
                        if t:
                            timed.setdefault((name, prov, tool), []).append(
                                (t["call_ns"], t["wait_ns"]))
                            each.append(f"{tool} {t['call_ns']:.0f} + {t['wait_ns']:.0f}")
                    print(f"  ns per write in calls + waits: {', '.join(each)}", flush=True)
                for tool, line in seen.items():
                    x = figure(got[tool], key, a.latency)
                    print(f"  os {tool:16} {x:9.3f} {unit}: per message {line}", flush=True)

    many = len(variants) > 1
    print("\n| row | provider |" + (" variant |" if many else "") + " libxport median | "
          "bare median | libxport / bare | per round: median (quartiles) | libxport min–max | "
          "bare min–max | target | met |")
    print("|---|---|" + ("---|" if many else "") + "---|---|---|---|---|---|---|---|")
    for (name, prov, vn), (kind, runs) in results.items():
        xs = [x for x, _, _ in runs]
        # With two bare loops (put rows), the bare figure is the loop with the better median
        # over all rounds, and each round is read against that loop's run: the better of each
        # round's two runs is the higher of two draws, above either loop's own median in a row
        # that moves from run to run (the second table shows that figure too).
        loop = ""
        if len(runs[0][2]) > 1:
            op = max(runs[0][2], key=lambda o: statistics.median(l[o] for _, _, l in runs))
            bs = [l[op] for _, _, l in runs]
            loop = f" ({'fi_write' if op == 'put' else 'fi_' + op})"
        else:
            bs = [b for _, b, _ in runs]
        mx, mb = statistics.median(xs), statistics.median(bs)
        bound, at_most = target_of(name, kind)
        ratio = ratio_of(mx, mb)
        if kind == "wake":  # an absolute bound; a miss at or under the bare loop's own is noted
            verdict = "yes" if mx < bound else "at or under bare" if mx <= mb else "no"
        else:
            verdict = "yes" if (ratio <= bound if at_most else ratio >= bound) else "no"
        rounds = spread(ratio_of(x, b) for x, b in zip(xs, bs))
        unit = {"lat": f"µs ({a.latency})", "rate": "Mmsg/s", "bw": "GB/s",
                "wake": "µs"}[kind]
        print(f"| {name} | {prov} |" + (f" {vn} |" if many else "") +
              f" {mx:.3f} {unit} | {mb:.3f} {unit}{loop} | {ratio:.3f} | {rounds} | "
              f"{min(xs):.3f}–{max(xs):.3f} | {min(bs):.3f}–{max(bs):.3f} | "
              f"{'<' if kind == 'wake' else '≤' if at_most else '≥'} {bound}"
              f"{' µs' if kind == 'wake' else ''} | "
              f"{verdict} |")

    if timed:
        print("\n| row | provider | tool | ns per write in calls: median (min–max) | "
              "ns per write in waits: median (min–max) | runs |")
        print("|---|---|---|---|---|---|")
        for (name, prov, tool), v in timed.items():
            cs, ws = [c for c, _ in v], [w for _, w in v]
            print(f"| {name} | {prov} | {tool} | {statistics.median(cs):.0f} ({min(cs):.0f}–"
                  f"{max(cs):.0f}) | {statistics.median(ws):.0f} ({min(ws):.0f}–{max(ws):.0f}) "
                  f"| {len(v)} |")

    # Put rows with both bare loops: libxport against each loop alone (its puts are writes with
    # CQ data, fi_writedata's kind) and against the better run of each round, per-round ratios.
    both = [(k, runs) for k, (kind, runs) in results.items() if len(runs[0][2]) > 1]
    if both:
        print("\n| row | provider |" + (" variant |" if many else "") +
              " / fi_writedata per round: median (quartiles) | / fi_write per round: median "
              "(quartiles) | / the better run of each round: median (quartiles) | "
              "fi_writedata / fi_write, medians |")
        print("|---|---|" + ("---|" if many else "") + "---|---|---|---|")
        for (name, prov, vn), runs in both:
            cells = [spread(x / loops[op] for x, _, loops in runs) for op in ("writedata", "put")]
            cells.append(spread(x / b for x, b, _ in runs))
            wd = statistics.median(loops["writedata"] for _, _, loops in runs)
            wr = statistics.median(loops["put"] for _, _, loops in runs)
            print(f"| {name} | {prov} |" + (f" {vn} |" if many else "") +
                  f" {' | '.join(cells)} | {wd / wr:.3f} |")


if __name__ == "__main__":
    main()
