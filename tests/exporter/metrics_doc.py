"""docs/metrics.md as data: the metric names it documents, and which are marked (reserved)."""
import os
import pathlib
import re

ROOT = pathlib.Path(os.environ.get("XPORT_SOURCE_ROOT", pathlib.Path(__file__).resolve().parents[2]))


def documented():
    """Returns ({name: reserved?}) for every table row that starts with a metric name."""
    out = {}
    for line in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        m = re.match(r"^\|\s*`(xport_[a-z0-9_]+)`\s*\|", line)
        if m:
            out[m.group(1)] = "(reserved)" in line
    return out


def gpu_only():
    """Names whose rows are marked (GPU): served only by processes that stage GPU memory or run
    a GpuProxy, so a host-only process need not serve them."""
    out = set()
    for line in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        m = re.match(r"^\|\s*`(xport_[a-z0-9_]+)`\s*\|", line)
        if m and "*(GPU)*" in line:
            out.add(m.group(1))
    return out


def names_in_expr(expr):
    """Metric names a PromQL expression uses (not label names such as xport_job: those stand in
    selectors and in by/on/ignoring lists)."""
    expr = re.sub(r"\{[^}]*\}", "{}", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    return set(re.findall(r"\bxport_[a-z0-9_]+\b", expr))
