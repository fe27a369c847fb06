"""What the tool tests share: check() records an expectation that failed, and says so at once,
in `failures`, which each test reads at its end to choose its exit status."""

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)
    return cond
