"""The attempt cycle through Python beside the same cycle in Rust, in one process and one run.

    python python/bench/cycle.py [--rounds 3] [--seconds 2] [--json FILE]

A cycle is begin + finish (an empty candidate) + validate, each one durable commit: the
throughput harness's `md_cycle` (benches/throughput.rs). The Rust side runs that loop in the
native module with the GIL released (`_native.bench_rust_cycles`), on the same store as the
Python side, which calls `Store.begin_attempt`, `finish_attempt` and `validate_attempt`. Each
round runs, in turn: Rust on one thread, Python on one thread, Python on 8 threads (each on a
task of its own); the figures are medians over the rounds and the ratios are taken within each
round, then the median of them.

Prints:
    python_cost_vs_rust_1t   Python's time per cycle over Rust's, one thread (target <= 1.2)
    python_cpu_vs_rust_1t    the same for the process's CPU time per cycle (what Python adds
                             beside the syncs that bound the wall-clock figure)
    python_8t_vs_1t          cycles/s of 8 Python threads over one (target >= 3: the GIL is
                             released around each commit, so threads share group commits)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import manifestdb as m
from manifestdb import _native

SNAPSHOT = "snap"


def python_cycles(store: m.Store, task: m.TaskKey, seconds: float) -> int:
    candidate = m.Candidate(SNAPSHOT, rows=0, digest="sha256:0")
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        ticket = store.begin_attempt(task)
        store.finish_attempt(ticket.key, candidate)
        if not store.validate_attempt(ticket.key).is_valid():
            raise RuntimeError(f"attempt {ticket.key} is invalid")
        count += 1
    return count


def python_threads(store: m.Store, run: str, threads: int, seconds: float) -> float:
    counts = [0] * threads

    def work(i: int) -> None:
        counts[i] = python_cycles(store, m.TaskKey("cycles", run, f"p={i}"), seconds)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(counts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=None, help="where the store goes (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, m.Store.open(Path(tmp) / "bench.redb", Path(tmp) / "staging") as store:
        rust, py1, py8, cost, scale, rust_cpu, py_cpu, cpu = [], [], [], [], [], [], [], []
        for r in range(args.rounds):
            run = f"round-{r}"
            store.declare_run(m.RunSpec("cycles", run, SNAPSHOT, [m.TaskSpec(f"p={i}", 0) for i in range(max(args.threads, 2))], trust_reported_figures=True))
            start, cpu0 = time.perf_counter(), time.process_time()
            n = _native.bench_rust_cycles(store._native, "cycles", run, "p=0", SNAPSHOT, args.seconds)
            rust_rate = n / (time.perf_counter() - start)
            rust_cpu.append((time.process_time() - cpu0) * 1e6 / max(n, 1))
            start, cpu0 = time.perf_counter(), time.process_time()
            n = python_cycles(store, m.TaskKey("cycles", run, "p=1"), args.seconds)
            py1_rate = n / (time.perf_counter() - start)
            py_cpu.append((time.process_time() - cpu0) * 1e6 / max(n, 1))
            cpu.append(py_cpu[-1] / rust_cpu[-1])
            py8_rate = python_threads(store, run, args.threads, args.seconds)
            rust.append(rust_rate)
            py1.append(py1_rate)
            py8.append(py8_rate)
            cost.append(rust_rate / py1_rate)
            scale.append(py8_rate / py1_rate)
            print(
                f"round {r + 1}/{args.rounds}: rust 1t {rust_rate:,.0f}/s, python 1t {py1_rate:,.0f}/s, "
                f"python {args.threads}t {py8_rate:,.0f}/s",
                flush=True,
            )
    figures = {
        "rust_cycles_per_s_1t": statistics.median(rust),
        "python_cycles_per_s_1t": statistics.median(py1),
        f"python_cycles_per_s_{args.threads}t": statistics.median(py8),
        "python_cost_vs_rust_1t": statistics.median(cost),
        "rust_cpu_us_per_cycle_1t": statistics.median(rust_cpu),
        "python_cpu_us_per_cycle_1t": statistics.median(py_cpu),
        "python_cpu_vs_rust_1t": statistics.median(cpu),
        f"python_{args.threads}t_vs_1t": statistics.median(scale),
    }
    for key, value in figures.items():
        print(f"{key:<28} {value:>10,.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
