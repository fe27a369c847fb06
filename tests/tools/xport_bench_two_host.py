#!/usr/bin/env python3
"""xport-bench's two-host mode across network namespaces (run by tests/multirail/run_netns.sh:
this runs in namespace A, XTEST_PEER_WRAP enters namespace B, each joined by veth rails).
The server in B, the client in A, over every rail with --check, and alltoall over 4 comms each
way; then the deadlines: a client with no server and a server with no client both exit 1 in
time with a clear message."""
import json
import os
import shlex
import subprocess
import sys
import time

from checks import check, failures

bench = sys.argv[1]
wrap = shlex.split(os.environ["XTEST_PEER_WRAP"])
rails_a = os.environ["XTEST_IF_A"]
rails_b = os.environ["XTEST_IF_B"]
server_ip = "10.231.0.2"  # run_netns.sh's address of namespace B on the first rail


def link_rate(ifaces):
    """What the kernel of this namespace says, in bits/s; 0 when any is unknown."""
    total = 0
    for name in ifaces.split(","):
        try:
            mbps = int(open(f"/sys/class/net/{name}/speed").read().strip())
        except (OSError, ValueError):
            return 0
        if mbps <= 0:
            return 0
        total += mbps * 1000000
    return total


common = ["--provider", "tcp;ofi_rxm", "--timeout", "30"]
port = 18600
# (op, client's extra options, server's): the last two are alltoall, both sides initiating.
runs = [("send", [], []), ("put", [], []), ("get", [], []),
        ("send", ["--pattern", "alltoall", "--comms", "4", "--groups", "0"], ["--groups", "0"]),
        ("put", ["--pattern", "alltoall", "--comms", "4", "--groups", "2"], ["--groups", "2"])]
for op, client_extra, server_extra in runs:
    port += 1
    server = subprocess.Popen([*wrap, bench, "--server", "--port", str(port), "--nics", rails_b,
                               *server_extra, *common], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    where = " ".join([op, *client_extra])
    try:
        # 1 MiB is striped over both rails; 12 KiB goes by rendezvous, 8 B eagerly.
        client = subprocess.run([bench, "--connect", f"{server_ip}:{port}", "--nics", rails_a,
                                 "--op", op, "--size", "8,12K,1M", "--iterations", "20",
                                 "--warmup", "2", "--check", "--json", *client_extra, *common],
                                capture_output=True, text=True, timeout=120)
        s_out, s_err = server.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.communicate()
        check(False, f"{where}: two-host run did not finish in time")
        continue
    check(client.returncode == 0, f"{where}: client exit 0 (got {client.returncode}: {client.stderr})")
    check(server.returncode == 0, f"{where}: server exit 0 (got {server.returncode}: {s_err})")
    points = [x for x in map(json.loads, client.stdout.splitlines())
              if x.get("record") == "point"]
    check([p["size"] for p in points] == [8, 12288, 1048576], f"{where}: points {client.stdout}")
    alltoall = "alltoall" in client_extra
    expected_link = link_rate(rails_a)
    for p in points:
        check(p["op"] == op and p["rails"] == 2 and p["mode"] == "two-host" and p["check"] is True
              and p["provider"] == "tcp;ofi_rxm", f"{where}: identity {p}")
        check(p["rail_names"] == rails_a.split(","), f"{where}: rails by interface name {p}")
        check(p["lat_us_p50"] > 0 and p["bw_bytes_per_s"] > 0, f"{where}: figures {p}")
        check(p["pool"]["routing_misses"] == 0, f"{where}: nothing misrouted {p['pool']}")
        if alltoall:
            groups = int(client_extra[client_extra.index("--groups") + 1])
            check(p["pattern"] == "alltoall" and p["streams"] == 2 and p["comms"] == 4 and
                  p["pool"]["groups"] == groups, f"{where}: alltoall fields {p}")
            # Data arrives on both sides' rails: their rates (the server sends its own) add up;
            # the veths of both ends report the same speed.
            check(p["link_bits_per_s"] in (None, 2 * expected_link), f"{where}: link rate {p}")
            continue
        if expected_link:
            # veth reports a speed: the fraction is of the discovered rate, not of a constant.
            check(p["link_bits_per_s"] == expected_link and
                  abs(p["link_fraction"] - p["bw_bytes_per_s"] * 8 / expected_link) < 1e-3,
                  f"{where}: link fraction of {expected_link} b/s: {p}")
        else:
            check(p["link_bits_per_s"] is None and p["link_fraction"] is None,
                  f"{where}: unknown link rate gives no fraction {p}")

# No server: the client retries until its deadline, then names what did not happen.
t0 = time.monotonic()
r = subprocess.run([bench, "--connect", f"{server_ip}:{port + 10}", "--timeout", "2",
                    "--provider", "tcp;ofi_rxm", "--nics", rails_a], capture_output=True,
                   text=True, timeout=60)
elapsed = time.monotonic() - t0
check(r.returncode == 1 and f"no xport-bench server at {server_ip}:{port + 10} within 2 s" in r.stderr,
      f"absent server: exit 1 with a clear error (got {r.returncode}: {r.stderr.strip()})")
check(1.5 < elapsed < 15, f"absent server: gave up after its 2 s deadline (took {elapsed:.1f} s)")

# No client: the server gives up at its deadline.
t0 = time.monotonic()
r = subprocess.run([*wrap, bench, "--server", "--port", str(port + 11), "--timeout", "2",
                    "--provider", "tcp;ofi_rxm", "--nics", rails_b], capture_output=True,
                   text=True, timeout=60)
elapsed = time.monotonic() - t0
check(r.returncode == 1 and f"no client connected to port {port + 11} within 2 s" in r.stderr,
      f"absent client: exit 1 with a clear error (got {r.returncode}: {r.stderr.strip()})")
check(1.5 < elapsed < 15, f"absent client: gave up after its 2 s deadline (took {elapsed:.1f} s)")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("ok")
