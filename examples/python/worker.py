"""A worker of a manifestdb run, standard library only: one task, one attempt.

    python3 worker.py --socket DIR/manifestdb.sock --dataset D --run R --partition P \
        --snapshot S --rows N --seed K [--stall-after-bytes B]

It begins an attempt through the server, writes its partition's CSV into the attempt's private
staging directory, reports the candidate (rows, total, SHA-256 digest, each file's size and
CRC32) and asks the server to validate it. It prints one JSON line: the attempt number, the
staging directory, the verdict and the retries its calls needed.

The rows are a pure function of (partition, seed), so every attempt of a task writes the same
bytes and the same digest: a retry reproduces its predecessor, as the protocol expects.

--stall-after-bytes makes the worker write only that many bytes of its file, print
{"stalled": ...} and wait, so the scheduler can kill it mid-write.
"""

import argparse
import hashlib
import json
import os
import sys
import time
import zlib

from manifestdb_client import Client


def rows_of(partition, seed, count):
    """The partition's rows: (store, units) with units a deterministic function of the inputs."""
    base = zlib.crc32(f"{partition}/{seed}".encode())
    return [(store, (base + 7919 * store) % 1000) for store in range(1, count + 1)]


def csv_bytes(rows):
    return ("store,units\n" + "".join(f"{s},{u}\n" for s, u in rows)).encode()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket")
    parser.add_argument("--url")
    parser.add_argument("--token-file")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--partition", required=True)
    parser.add_argument("--snapshot", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stall-after-bytes", type=int)
    parser.add_argument("--retry-for", type=float, default=60.0, help="seconds to keep retrying an unreachable server")
    args = parser.parse_args()

    token = open(args.token_file).read().strip() if args.token_file else None
    client = Client(socket_path=args.socket, url=args.url, token=token, retry_for_s=args.retry_for)
    task = {"dataset": args.dataset, "run": args.run, "partition": args.partition}

    ticket = client.post("/v1/attempts/begin", task)
    attempt = ticket["attempt"]
    staging = ticket["staging_dir"]

    rows = rows_of(args.partition, args.seed, args.rows)
    data = csv_bytes(rows)
    path = os.path.join(staging, "part.csv")
    with open(path, "wb") as f:
        if args.stall_after_bytes is not None:
            f.write(data[: args.stall_after_bytes])
            f.flush()
            print(json.dumps({"stalled": True, "attempt": attempt, "staging_dir": staging}), flush=True)
            while True:
                time.sleep(60)
        f.write(data)

    candidate = dict(
        snapshot=args.snapshot,
        rows=len(rows),
        total=sum(u for _, u in rows),
        digest="sha256:" + hashlib.sha256(data).hexdigest(),
        files=[{"path": "part.csv", "size_bytes": len(data), "crc32": zlib.crc32(data)}],
    )
    finished = client.post("/v1/attempts/finish", dict(task, attempt=attempt, candidate=candidate))
    verdict = client.post("/v1/attempts/validate", dict(task, attempt=attempt, checksums=True))
    client.close()
    print(
        json.dumps(
            {
                "partition": args.partition,
                "attempt": attempt,
                "staging_dir": staging,
                "finish": finished["outcome"],
                "verdict": verdict["verdict"],
                "accepted_attempt": verdict["accepted_attempt"],
                "retries": client.retries,
            }
        ),
        flush=True,
    )
    return 0 if verdict["verdict"] == "valid" else 3


if __name__ == "__main__":
    sys.exit(main())
