#!/usr/bin/env python3
"""Every C++ block of README.md is code the suite builds: each block opens with a comment naming
its file under examples/ (`// examples/F` or `// from examples/F`), and its other lines stand in
that file as one run of lines (indentation aside). examples/hello_xport.cc is built and run
against the installed library by the `install` test, examples/gpu_put_signal.cu is built by nvcc
wherever nvcc is found."""
import os
import pathlib
import re
import sys

root = pathlib.Path(os.environ.get("XPORT_SOURCE_ROOT", "."))
readme = (root / "README.md").read_text()
blocks = re.findall(r"```(?:cpp|c\+\+|cu)\n(.*?)```", readme, re.S)
failures = []
if len(blocks) < 2:
    failures.append(f"README.md has {len(blocks)} C++ blocks, expected the example and the GPU one")
for i, block in enumerate(blocks, 1):
    lines = block.rstrip("\n").split("\n")
    m = re.match(r"//\s*(?:from\s+)?(examples/[\w./-]+)", lines[0])
    if not m:
        failures.append(f"block {i} does not name its file under examples/: {lines[0]!r}")
        continue
    path = root / m.group(1)
    if not path.is_file():
        failures.append(f"block {i} names {m.group(1)}, which does not exist")
        continue
    body = [l.rstrip() for l in lines[1:]]
    source = [l.rstrip() for l in path.read_text().split("\n")]
    found = False
    for start in range(len(source) - len(body) + 1):
        pad = " " * (len(source[start]) - len(source[start].lstrip()))
        run = source[start:start + len(body)]
        if all((src.startswith(pad) and src[len(pad):] == want) or (not src and not want)
               for src, want in zip(run, body)):
            found = True
            break
    if not found:
        failures.append(f"block {i}: its lines are not one run of lines of {m.group(1)} "
                        f"(first line {body[0]!r})")
for f in failures:
    print("FAIL: " + f)
if failures:
    sys.exit(1)
print(f"README.md: {len(blocks)} C++ blocks, each a run of lines of a built example")
