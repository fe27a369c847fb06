#!/usr/bin/env python3
"""Runs the built xport-probe as an operator would: the plain checklist (exit 0 on this host),
the --json schema of docs/tools.md (checked by hand), FAILs that must appear when something
required is missing (an unknown XPORT_PROVIDER, a low `ulimit -l` with CAP_IPC_LOCK dropped, a
bad knob value), a check that hangs (the deadlines end the run) and the exit codes.

Probe runs stay on loopback: inside a network namespace of this test's own (only `lo`) when
`unshare -n` works, else with `--nics lo`."""
import json
import os
import re
import shutil
import subprocess
import sys

from checks import check, failures

tool = sys.argv[1]
STATUSES = {"PASS", "WARN", "FAIL", "SKIP"}
NODE_CHECKS = ["libfabric", "knobs", "topology", "provider", "capabilities", "progress",
               "memlock", "host-registration", "gpu-registration"]


def netns_works():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return False
    r = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True,
                       timeout=30)
    return r.returncode == 0


NETNS = netns_works()
print(f"running the probe {'in a private network namespace' if NETNS else 'with --nics lo'}")


def run(*args, env_extra=None, prefix="", wrapper="", net=True):
    """Runs the probe; `prefix`: shell commands first in the same shell (ulimit); `wrapper`: a
    command the probe runs under (setpriv)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPORT_")}
    env.update(env_extra or {})
    argv = [tool, *args]
    if net and "--test-hang" not in args:
        # A loaded CI machine (or the ASan build) can take longer than the default 3 s per rail.
        argv.append("--loopback-timeout=9")
    if net and not NETNS:
        argv.append("--nics=lo")
    script = (prefix + " && " if prefix else "") + f'exec {wrapper} "$@"'
    if net and NETNS:
        script = "ip link set lo up && " + script
        cmd = ["unshare", "-n", "sh", "-c", script, "probe", *argv]
    else:
        cmd = ["sh", "-c", script, "probe", *argv]
    # The timeout is a safety net against a hang, not a measurement.
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def by_name(doc, name, rail=None):
    return [c for c in doc["checks"] if c["name"] == name and (rail is None or c["rail"] == rail)]


def schema(doc, where):
    """docs/tools.md, xport-probe JSON."""
    top = {"tool": str, "version": str, "host": str, "budget_s": (int, float),
           "elapsed_s": (int, float), "checks": list, "knobs": list, "summary": dict,
           "exit_status": int}
    for key, t in top.items():
        check(isinstance(doc.get(key), t), f"{where}: top-level '{key}' is {t}")
    check(doc.get("tool") == "xport-probe", f"{where}: tool name")
    checks = doc.get("checks", [])
    for c in checks:
        check(set(c) == {"name", "rail", "status", "reason", "seconds", "details"},
              f"{where}: check fields {sorted(c)}")
        check(isinstance(c.get("name"), str) and c.get("name"), f"{where}: check name {c}")
        check(c.get("rail") is None or isinstance(c.get("rail"), str), f"{where}: rail {c}")
        check(c.get("status") in STATUSES, f"{where}: status {c.get('status')}")
        check(isinstance(c.get("reason"), str) and c["reason"] and "\n" not in c["reason"],
              f"{where}: one-line reason in {c.get('name')}")
        check(isinstance(c.get("seconds"), (int, float)) and c["seconds"] >= 0,
              f"{where}: seconds in {c.get('name')}")
        check(isinstance(c.get("details"), dict), f"{where}: details object in {c.get('name')}")
        if c.get("name") in ("link", "loopback") and c.get("status") != "SKIP":
            check(isinstance(c.get("rail"), str), f"{where}: per-rail check names its rail")
    names = [c["name"] for c in checks]
    for n in NODE_CHECKS + ["loopback"]:
        check(n in names, f"{where}: check '{n}' present")
    for k in doc.get("knobs", []):
        check(set(k) == {"name", "value", "source", "error"} and k["name"].startswith("XPORT_")
              and k["source"] in ("default", "environment"), f"{where}: knob row {k}")
    summary = doc.get("summary", {})
    check(set(summary) == {"pass", "warn", "fail", "skip"}, f"{where}: summary keys")
    for s in STATUSES:
        check(summary.get(s.lower()) == sum(c["status"] == s for c in checks),
              f"{where}: summary counts {s}")
    check(doc.get("exit_status") == (1 if summary.get("fail") else 0),
          f"{where}: exit_status follows the FAILs")
    check(doc.get("elapsed_s", 1e9) <= doc.get("budget_s", 0),
          f"{where}: finished within its budget ({doc.get('elapsed_s')} s)")


def json_run(*args, **kw):
    r = run("--json", *args, **kw)
    try:
        doc = json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"--json {args}: stdout is one JSON object: {r.stdout[:200]!r} {r.stderr}")
        return r, {"checks": [], "knobs": [], "summary": {}}
    schema(doc, f"--json {' '.join(args)}")
    check(r.returncode == doc.get("exit_status"), f"--json {args}: exit code = exit_status")
    return r, doc


# The plain checklist: exit 0 on this host, every line a status.
plain = run()
check(plain.returncode == 0,
      f"plain run exits 0 (got {plain.returncode}):\n{plain.stdout}{plain.stderr}")
lines = plain.stdout.splitlines()
start = next((i for i, l in enumerate(lines) if l.split()[:3] == ["STATUS", "CHECK", "REASON"]),
             None)
check(start is not None, "table header STATUS CHECK REASON")
rows = []
for l in lines[(start or 0) + 1:]:
    if not l.strip():
        break
    if l.startswith("    ") and rows:  # a long reason goes on under its REASON column
        rows[-1] += " " + l.strip()
        continue
    rows.append(l)
check(len(rows) >= len(NODE_CHECKS) + 2, f"one line per check ({len(rows)} lines)")
for l in rows:
    check(re.match(r"^  (PASS|WARN|FAIL|SKIP) +\S+( \S+)? +\S", l) is not None,
          f"status line: {l!r}")
check(any(l.split()[:2] == ["PASS", "loopback"] for l in rows), "loopback line PASSes")
# Compact: no line past 100 characters (reasons wrap under their column; one was 294), and the
# knob table (46 lines) only on request.
check(all(len(l) <= 100 for l in lines), "table lines fit 100 columns: " +
      repr([l for l in lines if len(l) > 100]))
check("knobs in effect" not in plain.stdout and "--knobs" in plain.stdout,
      "no knob table unless asked for (the summary says how)")
knobbed = run("--knobs")
check("knobs in effect" in knobbed.stdout and "XPORT_EAGER_MAX" in knobbed.stdout and
      all(len(l) <= 100 for l in knobbed.stdout.splitlines()), "--knobs: the knob table")
check(re.search(r"\d+ PASS, \d+ WARN, 0 FAIL, \d+ SKIP in [\d.]+ s: exit 0", plain.stdout),
      "summary line")
print(plain.stdout)

# JSON: the schema, and what a healthy run says.
r, doc = json_run()
check(r.returncode == 0, f"--json exits 0 (got {r.returncode}): {r.stderr}")
loops = by_name(doc, "loopback")
check(loops and all(c["status"] == "PASS" for c in loops), f"loopback PASS: {loops}")
for c in loops:
    d = c["details"]
    check(d.get("verified") is True and d.get("bytes", 0) > d.get("eager_max", 1 << 62)
          and d.get("rdma_writes", 0) >= 1 and d.get("write_bytes_landed", 0) >= d.get("bytes", 1)
          and d.get("rtt_us_p50", 0) > 0, f"loopback went by rendezvous, verified: {d}")
check(len(doc["knobs"]) >= 20 and all(k["source"] == "default" for k in doc["knobs"]),
      "every knob listed, from its default")
telemetry = [k for k in doc["knobs"] if k["name"] == "XPORT_TELEMETRY"]
check(telemetry and telemetry[0]["value"] == "1",
      "XPORT_TELEMETRY reported as the job sees it, not the probe's own 0")
gpu = by_name(doc, "gpu-registration")
topo = by_name(doc, "topology")
if topo and topo[0]["details"].get("gpus") == 0:
    check(gpu and gpu[0]["status"] == "SKIP", "no GPU: gpu-registration SKIPs")
    check(topo[0]["status"] in ("WARN", "SKIP", "PASS"), "no GPU is not a FAIL")
check(gpu and gpu[0]["details"].get("gpu_memory_path") == "staged"
      and "host memory only" not in gpu[0]["reason"],
      "gpu-registration says GPU memory is staged by default (XPORT_GPU_MEMORY=auto)")

# A provider that does not exist: the provider check FAILs naming it; exit 1.
r, doc = json_run(env_extra={"XPORT_PROVIDER": "doesnotexist"})
check(r.returncode == 1, f"unknown provider exits 1 (got {r.returncode})")
prov = by_name(doc, "provider")
check(prov and prov[0]["status"] == "FAIL" and "doesnotexist" in prov[0]["reason"],
      f"provider FAIL names it: {prov}")
r = run(env_extra={"XPORT_PROVIDER": "doesnotexist"})
check(r.returncode == 1 and re.search(r"^  FAIL +provider .*doesnotexist", r.stdout, re.M),
      "table shows the provider FAIL")

# A bad knob value: FAIL naming the knob; an unknown knob name only WARNs.
r, doc = json_run(env_extra={"XPORT_EAGER_MAX": "12X"})
knobs = by_name(doc, "knobs")
check(r.returncode == 1 and knobs and knobs[0]["status"] == "FAIL" and
      "XPORT_EAGER_MAX" in knobs[0]["reason"], f"bad knob FAILs by name: {knobs}")
row = [k for k in doc["knobs"] if k["name"] == "XPORT_EAGER_MAX"]
check(row and "12X" in row[0]["error"], f"knob row carries the rejected value: {row}")
r, doc = json_run(env_extra={"XPORT_PROGRESS": "sometimes"})
knobs = by_name(doc, "knobs")
check(r.returncode == 1 and knobs and "XPORT_PROGRESS" in knobs[0]["reason"] and
      "expected native, auto or manual" in knobs[0]["reason"],
      f"XPORT_PROGRESS outside native/auto/manual FAILs: {knobs}")
for name, expected in (("XPORT_WAIT", "spin or block"),
                       ("XPORT_CONTROL_ENDPOINT", "auto, shared or separate"),
                       ("XPORT_ATOMICS", "auto, native or emulated")):
    r, doc = json_run(env_extra={name: "sideways"})
    knobs = by_name(doc, "knobs")
    check(r.returncode == 1 and knobs and f"{name}='sideways': expected {expected}" in
          knobs[0]["reason"], f"{name} outside its words FAILs by name: {knobs}")
# Values the library refuses are FAILs by name (it took XPORT_LOG_LEVEL=loud and
# XPORT_TIMEOUT_MS=0); with an unknown name beside them, the table names all three (it dropped
# the unknown one, which only the JSON had).
r = run(env_extra={"XPORT_LOG_LEVEL": "loud", "XPORT_TIMEOUT_MS": "0", "XPORT_TYPO": "1"},
        net=False)
knob_line = " ".join(l.strip() for l in r.stdout.splitlines()
                     if re.match(r"^  FAIL +knobs", l) or l.startswith(" " * 20))
check(r.returncode == 1 and "XPORT_LOG_LEVEL='loud': expected error, warn, info, debug or trace"
      in knob_line and "XPORT_TIMEOUT_MS='0': at least 1 ms" in knob_line and
      "XPORT_TYPO" in knob_line, f"table names the rejected and the unknown knobs:\n{r.stdout}")
r, doc = json_run(env_extra={"XPORT_EAGERMAX": "64K"})
knobs = by_name(doc, "knobs")
check(r.returncode == 0 and knobs and knobs[0]["status"] == "WARN" and
      "XPORT_EAGERMAX" in knobs[0]["reason"], f"unknown knob WARNs: {knobs}")
r, doc = json_run(env_extra={"XPORT_EAGER_MAX": "64K"})
loops = by_name(doc, "loopback")
check(r.returncode == 0 and loops and loops[0]["details"].get("bytes", 0) > 65536,
      "the loopback message stays above XPORT_EAGER_MAX")

# Locked memory: CAP_IPC_LOCK makes the limit moot (root here); without it a low limit FAILs.
if os.geteuid() == 0 and shutil.which("setpriv"):
    drop = "setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock --ambient-caps=-ipc_lock"
    r, doc = json_run()
    mem = by_name(doc, "memlock")
    check(mem and mem[0]["status"] == "PASS" and "CAP_IPC_LOCK" in mem[0]["reason"],
          f"root: memlock PASS by CAP_IPC_LOCK: {mem}")
    r, doc = json_run(prefix="ulimit -l 64", wrapper=drop)
    mem = by_name(doc, "memlock")
    check(r.returncode == 1 and mem and mem[0]["status"] == "FAIL" and
          "64 KiB" in mem[0]["reason"] and mem[0]["details"].get("cap_ipc_lock") is False,
          f"low ulimit -l without CAP_IPC_LOCK FAILs: {mem}")
    # Control, and what an ordinary user has: Linux's default 8 MiB limit on default knobs does
    # not FAIL (libxport's own buffers fit with room to spare), so the FAIL above came from the
    # comparison, not from dropping the capability. The reason says what one rail registers.
    r, doc = json_run(prefix="ulimit -l 8192", wrapper=drop)
    mem = by_name(doc, "memlock")
    check(r.returncode == 0 and mem and mem[0]["status"] in ("WARN", "PASS") and
          mem[0]["details"].get("cap_ipc_lock") is False and
          mem[0]["details"].get("needed_bytes", 1 << 40) <= 6656 * 1024 and
          mem[0]["details"].get("bytes_per_rail", 0) > 0 and "per rail" in mem[0]["reason"],
          f"the default 8 MiB limit does not FAIL on default knobs: {r.returncode} {mem}")
else:
    print("SKIP: memlock checks need root and setpriv (util-linux)")

# A check that hangs: FAILed as abandoned, the run still ends within its budget.
r, doc = json_run("--timeout", "3", "--test-hang", "loopback")
hung = by_name(doc, "loopback")
check(r.returncode == 1 and hung and hung[0]["status"] == "FAIL" and
      "abandoned" in hung[0]["reason"], f"hung check FAILs as abandoned: {hung}")
check(by_name(doc, "provider") and by_name(doc, "provider")[0]["status"] == "PASS",
      "the checks before the hang still report")
r, doc = json_run("--skip-loopback")
check(r.returncode == 0 and by_name(doc, "loopback")[0]["status"] == "SKIP", "--skip-loopback")

# Usage: exit 2 and one readable line naming the option, what was given and what is allowed.
for bad, says in ((["--bogus"], "unknown option or argument: --bogus"),
                  (["--timeout", "0"], "--timeout: '0' is out of range: seconds from 1 to 600"),
                  (["--timeout", "abc"], "--timeout: 'abc' is not a number: seconds from 1 to 600"),
                  (["extra"], "unknown option or argument: extra"),
                  (["--timeout"], "--timeout needs a value"),
                  (["--loopback-timeout", "0"], "'0' is out of range: seconds from 0.1 to 600"),
                  (["--loopback-timeout", "abc"], "'abc' is not a number")):
    r = run(*bad, net=False)
    check(r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and
          r.stderr.startswith("xport-probe: ") and says in r.stderr,
          f"bad usage {bad}: exit 2, one line saying {says!r} (got {r.returncode}: {r.stderr!r})")
r = run("--help", net=False)
check(r.returncode == 0 and "--json" in r.stdout and "--test-hang" not in r.stdout, "--help")
# The help shows placeholders and defaults, not the parser's notation (FLOAT:FLOAT in [1 - 600]).
check("--timeout SECONDS" in r.stdout and "(default 10)" in r.stdout and "(default 3)" in r.stdout
      and not re.search(r"FLOAT|INT\b|TEXT|in \[", r.stdout), f"--help is plain:\n{r.stdout}")

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
