#!/usr/bin/env python3
"""NCCL collectives between 2 GPUs through whatever network NCCL is told to use (the
environment: NCCL_NET, NCCL_NET_PLUGIN, XPORT_*), every result checked on the host.

  python nccl_gpu_check.py --out DIR [--max-bytes 1G] [--timeout 300]

Launches 2 ranks (one process per GPU) and waits for them under a deadline. Each rank runs
all_reduce, all_gather, reduce_scatter, broadcast (both roots) and send/recv (both directions
at once) for sizes 1 KiB .. --max-bytes (x4 steps), compares every element with what the host
computes, then times all_reduce at 1, 64 and 256 MiB (bus bandwidth; for 2 ranks it equals the
algorithm bandwidth). Rank 0 writes DIR/result.json; each rank's output (NCCL's INFO log
included) goes to DIR/rank<r>.log. Exit status 0 only when every check passed.
Run by scripts/nccl-gpu.sh (torch with NCCL, /opt/torch/.venv on the GPU machine).
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

WORLD = 2
BW_SIZES = [1 << 20, 64 << 20, 256 << 20]


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    os.makedirs(args.out, exist_ok=True)
    port = free_port()
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        log = open(os.path.join(args.out, f"rank{rank}.log"), "w")
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--rank", "--out", args.out, "--max-bytes",
             str(args.max_bytes), "--timeout", str(args.timeout)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + args.timeout

    def kill_all():
        for q in procs:
            if q.poll() is None:
                os.killpg(q.pid, signal.SIGKILL)  # the rank's own session (start_new_session)
        for q in procs:
            q.wait()

    # Both ranks watched at once: one that fails leaves the other waiting in NCCL until its own
    # timeout, so it is killed at once.
    while True:
        codes = [p.poll() for p in procs]
        failed = [r for r, c in enumerate(codes) if c is not None and c != 0]
        if failed:
            for r in failed:
                print(f"nccl_gpu_check: rank {r} exited with {codes[r]} (see rank{r}.log)",
                      file=sys.stderr)
            kill_all()
            return 1
        if all(c == 0 for c in codes):
            return 0
        if time.monotonic() > deadline:
            late = [r for r, c in enumerate(codes) if c is None]
            print(f"nccl_gpu_check: rank(s) {late} did not finish within {args.timeout} s: "
                  f"killed (see their logs)", file=sys.stderr)
            kill_all()
            return 124
        time.sleep(0.2)  # (a launcher polling its children; nothing waits on this)


def pattern(torch, n, seed, dtype, period=1021):
    """n integers below `period` (float32 holds them and the sum of two exactly), repeating
    with a prime period (no power-of-two misplacement maps the pattern onto itself); cheap to
    build on the host for 1 GiB."""
    base = ((torch.arange(period, dtype=torch.int64) * 7 + seed * 131) % period).to(dtype)
    return base.repeat((n + period - 1) // period)[:n]


def nccl_version(torch):
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def rank_main(args):
    import datetime
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=WORLD, device_id=dev,
                            timeout=datetime.timedelta(seconds=max(60, args.timeout - 30)))
    other = 1 - rank
    failures = []
    checks = 0

    def check(name, nbytes, got, want):
        nonlocal checks
        checks += 1
        got = got.cpu()
        if not torch.equal(got, want):
            bad = (got != want).nonzero()
            i = int(bad[0][0]) if bad.numel() else -1
            failures.append(f"{name} {nbytes} B: {bad.shape[0]} elements differ, the first at "
                            f"{i}: got {got.view(-1)[i].item()}, expected {want.view(-1)[i].item()}")
            print("FAIL", failures[-1], flush=True)

    sizes = []
    s = 1 << 10
    while s <= args.max_bytes:
        sizes.append(s)
        s *= 4
    f32 = torch.float32
    for nbytes in sizes:
        n = nbytes // 4  # float32 elements
        t0 = time.monotonic()
        # all_reduce (sum)
        x = pattern(torch, n, rank + 1, f32).to(dev)
        dist.all_reduce(x)
        check("all_reduce", nbytes, x, pattern(torch, n, 1, f32) + pattern(torch, n, 2, f32))
        del x
        # all_gather: each rank contributes n/2 elements
        h = n // WORLD
        mine = pattern(torch, h, 10 + rank, f32).to(dev)
        out = torch.empty(h * WORLD, dtype=f32, device=dev)
        dist.all_gather_into_tensor(out, mine)
        check("all_gather", nbytes, out,
              torch.cat([pattern(torch, h, 10 + r, f32) for r in range(WORLD)]))
        del mine, out
        # reduce_scatter (sum): each rank keeps its half of the sum
        full = pattern(torch, h * WORLD, 20 + rank, f32).to(dev)
        part = torch.empty(h, dtype=f32, device=dev)
        dist.reduce_scatter_tensor(part, full)
        want = pattern(torch, h * WORLD, 20, f32) + pattern(torch, h * WORLD, 21, f32)
        check("reduce_scatter", nbytes, part, want[rank * h:(rank + 1) * h])
        del full, part, want
        # broadcast from each root, every byte (uint8)
        for root in range(WORLD):
            b = pattern(torch, nbytes, 30 + root, torch.uint8, 251)
            y = b.to(dev) if rank == root else torch.zeros(nbytes, dtype=torch.uint8, device=dev)
            dist.broadcast(y, src=root)
            check(f"broadcast(root {root})", nbytes, y, b)
            del y
        # send/recv, both directions at once
        sb = pattern(torch, nbytes, 40 + rank, torch.uint8, 251).to(dev)
        rb = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
        ops = [dist.P2POp(dist.isend, sb, other), dist.P2POp(dist.irecv, rb, other)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check("send/recv", nbytes, rb, pattern(torch, nbytes, 40 + other, torch.uint8, 251))
        del sb, rb
        torch.cuda.synchronize()
        print(f"size {nbytes}: checked in {time.monotonic() - t0:.2f} s", flush=True)

    bandwidth = {}
    for nbytes in BW_SIZES:
        if nbytes > args.max_bytes:
            continue
        x = torch.ones(nbytes // 4, dtype=f32, device=dev)
        iters = 20 if nbytes <= (64 << 20) else 10
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        start.record()
        for _ in range(iters):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        sec = start.elapsed_time(end) / 1000 / iters
        algbw = nbytes / sec / 1e9
        busbw = algbw * 2 * (WORLD - 1) / WORLD
        bandwidth[str(nbytes)] = {"seconds": sec, "algbw_GBps": algbw, "busbw_GBps": busbw}
        print(f"all_reduce {nbytes} B: {sec * 1e3:.3f} ms, busbw {busbw:.2f} GB/s", flush=True)
        del x

    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(args.out, "result.json"), "w") as f:
            json.dump({"checks": checks, "failures": failures, "sizes": sizes,
                       "bandwidth": bandwidth, "torch": torch.__version__,
                       "nccl": nccl_version(torch)}, f, indent=1)
    print(f"rank {rank}: {checks} checks, {len(failures)} failed", flush=True)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-bytes", type=parse_size, default=1 << 30)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.exit(rank_main(args) if args.rank else launch(args))


if __name__ == "__main__":
    main()
