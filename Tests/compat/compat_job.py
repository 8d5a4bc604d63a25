"""Shared by the Python providers: read the job that run.py wrote and print one JSON line
per push with what the library reported.

Every provider sends the same plan (see run.py, PLAN):
  n=0 alert, n=1 background, n=2 wrong-environment, n=3 unregistered,
  n=4 production, n=5.. burst (one push per burst token, all at once).
"""
import asyncio
import json
import sys
import time
import traceback


def load_job():
    with open(sys.argv[1]) as f:
        return json.load(f)


def marker(job, case, n):
    """The custom payload key that lets run.py find this push in the emulator's journal."""
    return {"lib": job["lib"], "case": case, "n": n}


def live_marker(job, case):
    """The marker of a Live Activity or broadcast push (run.py, LIVE_PLAN): by case, not n."""
    return {"lib": job["lib"], "case": case}


def report(case, n, status=None, reason=None, apns_id=None, timestamp=None, error=None):
    line = {"case": case, "n": n, "status": status, "reason": reason,
            "apnsId": apns_id, "timestamp": timestamp, "error": error}
    print(json.dumps(line), flush=True)


def report_summary(**fields):
    print(json.dumps({"case": "summary", **fields}), flush=True)


def describe(exc):
    """An unexpected exception, in one line, for the result table (full trace on stderr)."""
    traceback.print_exception(exc, file=sys.stderr)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")


async def run_plan(job, push, sandbox, production, version):
    """The plan for libraries with an async API. `push(client, case, n, token, background=False)`
    sends one push and reports it."""
    tokens = job["tokens"]
    await push(sandbox, "alert", 0, tokens["sandbox"])
    if job.get("only") == "alert":  # run.py's check that the CA setting is what lets it connect
        return
    await push(sandbox, "background", 1, tokens["sandbox"], background=True)
    await push(sandbox, "wrong-environment", 2, tokens["production"])
    await push(sandbox, "unregistered", 3, tokens["unregistered"])
    await push(production, "production", 4, tokens["production"])

    started = time.monotonic()
    await asyncio.gather(*(push(sandbox, "burst", 5 + i, token) for i, token in enumerate(tokens["burst"])))
    report_summary(burstSeconds=round(time.monotonic() - started, 3), version=version)
