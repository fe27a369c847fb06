#!/usr/bin/env python3
"""Runs every libFuzzer target of a fuzz build for a bounded time, one per core at a time; a
crash fails the run."""
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys

build = pathlib.Path(sys.argv[1])
seconds = int(sys.argv[2])
root = pathlib.Path(__file__).resolve().parent.parent
targets = sorted(p for p in (build / "tests" / "fuzz").glob("fuzz-*") if os.access(p, os.X_OK) and p.is_file())


def fuzz(t):
    """One target for `seconds`: its result, and what it printed (the tail, or all on failure)."""
    corpus = root / "tests" / "fuzz" / "corpus" / t.name.removeprefix("fuzz-").replace("-", "_")
    work = build / "fuzz-work" / t.name
    work.mkdir(parents=True, exist_ok=True)
    cmd = [str(t), f"-max_total_time={seconds}", "-rss_limit_mb=2048", "-timeout=10",
           f"-artifact_prefix={work}/", str(work)]
    if corpus.is_dir():
        cmd.append(str(corpus))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ok = proc.returncode == 0
    tail = proc.stdout.strip().splitlines()[-3:]
    return ({"name": t.name, "result": "OK" if ok else "FAIL"},
            "== " + " ".join(cmd) + "\n" + ("\n".join(tail) if ok else proc.stdout[-6000:]))


# One target per core at a time (each libFuzzer run is one thread).
with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
    results = []
    for result, text in pool.map(fuzz, targets):
        print(text, flush=True)
        results.append(result)
(build / "fuzz-results.json").write_text(json.dumps(results))
if not targets:
    print("no fuzz targets built", flush=True)
sys.exit(0 if all(r["result"] == "OK" for r in results) else 1)
