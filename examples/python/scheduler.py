"""A scheduler driving a manifestdb run through `manifestdb serve`, standard library only.

    python3 scheduler.py --socket DIR/manifestdb.sock --partitions 64 --parallel 64

It declares a run of N partitions with the expectations derived from its input (each
partition's row count and total of units), runs one worker process per partition (worker.py),
up to --parallel at once, and publishes the run. Before that, one worker is killed mid-write
(SIGKILL after half its file is written) and its task is retried by a new worker, which the
store numbers as the next attempt; --duplicates K also runs K tasks twice at the same time,
as a speculative scheduler does. A worker process that fails is rerun (up to --tries).

At the end it reads the published manifest back and prints one JSON document: the attempts,
the killed one, the generation, the published totals beside the input's, and "ok". It exits 0
only if every check holds: every worker succeeded (after the scheduler's retries), attempt
numbers are distinct per task, one generation was published, the killed attempt is not the
accepted one, and the published rows and total equal the input's.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from manifestdb_client import Client
from worker import rows_of

HERE = os.path.dirname(os.path.abspath(__file__))


def worker_command(args, partition, rows, extra=()):
    command = [sys.executable, os.path.join(HERE, "worker.py")]
    if args.socket:
        command += ["--socket", args.socket]
    else:
        command += ["--url", args.url]
    if args.token_file:
        command += ["--token-file", args.token_file]
    command += ["--dataset", args.dataset, "--run", args.run, "--partition", partition, "--snapshot", args.snapshot]
    command += ["--rows", str(rows), "--seed", str(args.seed), "--retry-for", str(args.retry_for)]
    return command + list(extra)


def run_pool(args, jobs):
    """Runs (partition, rows) jobs, up to args.parallel at once; reruns a failed one up to
    args.tries times. Returns (results, failures)."""
    pending = [(partition, rows, 1) for partition, rows in jobs]
    running = []
    results, failures = [], []
    while pending or running:
        while pending and len(running) < args.parallel:
            partition, rows, tries = pending.pop(0)
            process = subprocess.Popen(worker_command(args, partition, rows), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            running.append((process, partition, rows, tries))
        still = []
        for process, partition, rows, tries in running:
            if process.poll() is None:
                still.append((process, partition, rows, tries))
                continue
            out, err = process.communicate()
            if process.returncode == 0:
                results.append(json.loads(out.strip().splitlines()[-1]))
            else:
                failures.append({"partition": partition, "try": tries, "exit": process.returncode, "stderr": err.strip()[-2000:]})
                if tries < args.tries:
                    pending.append((partition, rows, tries + 1))
        running = still
        time.sleep(0.01)
    return results, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket")
    parser.add_argument("--url")
    parser.add_argument("--token-file")
    parser.add_argument("--dataset", default="daily_units")
    parser.add_argument("--run", default="2026-11-29")
    parser.add_argument("--snapshot", default="sales@v42")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--duplicates", type=int, default=0)
    parser.add_argument("--no-kill", action="store_true", help="do not kill a worker mid-write")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--retry-for", type=float, default=60.0)
    args = parser.parse_args()
    if (args.socket is None) == (args.url is None):
        parser.error("give exactly one of --socket and --url")

    token = open(args.token_file).read().strip() if args.token_file else None
    client = Client(socket_path=args.socket, url=args.url, token=token, retry_for_s=args.retry_for)

    # The input: partition i has 3 + i % 5 rows; the expectations are derived from it.
    partitions = [(f"date=2026-11-29/region=r{i:04d}", 3 + i % 5) for i in range(args.partitions)]
    input_rows = sum(rows for _, rows in partitions)
    input_total = sum(u for p, rows in partitions for _, u in rows_of(p, args.seed, rows))
    tasks = [
        {"partition": p, "expected_rows": rows, "expected_total": sum(u for _, u in rows_of(p, args.seed, rows))}
        for p, rows in partitions
    ]
    # The workers report their rows and totals; without a grain the store takes them as
    # reported (not checked against the files), and the declaration says so.
    declared = client.post("/v1/runs/declare", {"dataset": args.dataset, "run": args.run, "snapshot": args.snapshot, "tasks": tasks,
                                                 "trust_reported_figures": True})

    killed = None
    if not args.no_kill and partitions:
        partition, rows = partitions[0]
        process = subprocess.Popen(
            worker_command(args, partition, rows, ["--stall-after-bytes", "20"]), stdout=subprocess.PIPE, text=True
        )
        line = process.stdout.readline()
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed = dict(json.loads(line), partition=partition, written_bytes=os.path.getsize(os.path.join(json.loads(line)["staging_dir"], "part.csv")))

    jobs = list(partitions) + [partitions[i] for i in range(min(args.duplicates, len(partitions)))]
    started = time.monotonic()
    results, failures = run_pool(args, jobs)
    elapsed = time.monotonic() - started

    published = client.post("/v1/publish", {"dataset": args.dataset, "run": args.run})
    again = client.post("/v1/publish", {"dataset": args.dataset, "run": args.run})
    manifest = client.get("/v1/manifest", dataset=args.dataset)
    history = client.get("/v1/history", dataset=args.dataset)
    run = client.get("/v1/runs/show", dataset=args.dataset, run=args.run)
    client.close()

    attempts_by_task = {}
    for task in run["tasks"]:
        attempts_by_task[task["partition"]] = [a["attempt"] for a in task["attempts"]]
    staging_dirs = [r["staging_dir"] for r in results] + ([killed["staging_dir"]] if killed else [])
    accepted = {p["partition"]: p["attempt"] for p in manifest["partitions"]}
    checks = {
        "declared": declared["outcome"] in ("declared", "already_declared"),
        "every_worker_succeeded": len(results) == len(jobs),
        "every_verdict_valid": all(r["verdict"] == "valid" for r in results),
        "attempts_distinct_per_task": all(len(a) == len(set(a)) for a in attempts_by_task.values()),
        "staging_dirs_distinct": len(staging_dirs) == len(set(staging_dirs)),
        "published_once": published["outcome"] == "published" and again["outcome"] == "already_published"
        and again["generation"]["number"] == published["generation"]["number"]
        and len(history["datasets"][0]["generations"]) == 1,
        "every_partition_published": sorted(accepted) == sorted(p for p, _ in partitions),
        "killed_attempt_not_accepted": killed is None or accepted.get(killed["partition"]) != killed["attempt"],
        "rows_equal_input": manifest["totals"]["rows"] == input_rows,
        "total_equals_input": manifest["totals"]["total"] == input_total,
    }
    summary = {
        "ok": all(checks.values()),
        "checks": checks,
        "partitions": len(partitions),
        "workers_run": len(results) + len(failures) + (1 if killed else 0),
        "worker_failures": failures,
        "client_retries": sum(r["retries"] for r in results),
        "seconds": round(elapsed, 3),
        "killed": killed,
        "attempts": {p: a for p, a in attempts_by_task.items() if len(a) > 1},
        "acknowledged": [{"partition": r["partition"], "attempt": r["attempt"], "verdict": r["verdict"]} for r in results],
        "generation": published["generation"]["number"] if published["generation"] else None,
        "published_totals": {"rows": manifest["totals"]["rows"], "total": manifest["totals"]["total"]},
        "input_totals": {"rows": input_rows, "total": input_total},
    }
    print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
