#!/usr/bin/python3
"""Atomic multi-range writes on ftld: the recipe from the README as a program.

Each transaction writes BLOCKS 4 KiB blocks, every one stamped with the
transaction id, into a non-persistent scratch range over NBD (one request
per block, so the writes themselves are not atomic), then commits them with
one `ftlctl range batch` of moves into several destination ranges. Every
fifth transaction is aborted instead: its scratch range is trimmed. After a
crash at any point a destination holds exactly one committed transaction
(or nothing yet), never a mix, and the scratch range reads as zeros.

    atomic_commit_demo.py --uri nbd://127.0.0.1:10809/ --ftlctl ftlctl \\
        --control /run/ftld/ftld.img.sock [--setup] [--count N] [--log FILE]

The log gets "begin T", "commit T" (after the commit was acknowledged) and
"abort T" lines, each flushed to disk before the next step.
"""

import argparse
import os
import random
import subprocess
import sys

BLOCK = 4096


def stamp(txid, i):
    """Block i of transaction txid: a header repeated over the block."""
    unit = f"TX{txid:012d}-BLK{i:04d}|".encode()
    return (unit * (BLOCK // len(unit) + 1))[:BLOCK]


def parse_stamp(block):
    """(txid, i) of a stamped block, None for zeros; raises on anything else."""
    if block == bytes(BLOCK):
        return None
    head = block[:23].decode(errors="replace")
    if not (head.startswith("TX") and head[14:18] == "-BLK" and head[22:23] == "|"):
        raise ValueError(f"not a stamped block: {block[:40]!r}")
    txid, i = int(head[2:14]), int(head[18:22])
    if block != stamp(txid, i):
        raise ValueError(f"torn block of tx {txid} block {i}: {block[:40]!r}")
    return txid, i


class Layout:
    """Where a transaction goes: `blocks` blocks of scratch space, committed
    into len(dest) destination ranges of blocks/len(dest) blocks each."""

    def __init__(self, scratch, dest, blocks):
        assert blocks % len(dest) == 0
        self.scratch, self.dest, self.blocks = scratch, dest, blocks
        self.per_range = blocks // len(dest)

    def dest_offset(self, i):
        """Where block i of a transaction lands."""
        return self.dest[i // self.per_range] + (i % self.per_range) * BLOCK

    def batch(self):
        """The commit: one move per destination range, as JSON lines."""
        lines = []
        for r, dst in enumerate(self.dest):
            src = self.scratch + r * self.per_range * BLOCK
            lines.append(f'{{"op":"move","src":{src},"dst":{dst},'
                         f'"len":"{self.per_range * BLOCK // 1024}K"}}')
        return "\n".join(lines) + "\n"


DEFAULT_SCRATCH = 512 << 20
DEFAULT_DEST = [0, 1 << 20, 4 << 20, 9 << 20]
DEFAULT_BLOCKS = 16


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", required=True)
    ap.add_argument("--ftlctl", default="ftlctl")
    ap.add_argument("--control", required=True)
    ap.add_argument("--scratch", type=int, default=DEFAULT_SCRATCH)
    ap.add_argument("--dest", default=",".join(map(str, DEFAULT_DEST)))
    ap.add_argument("--blocks", type=int, default=DEFAULT_BLOCKS)
    ap.add_argument("--first-txid", type=int, default=1)
    ap.add_argument("--count", type=int, default=0, help="transactions (0: until killed)")
    ap.add_argument("--setup", action="store_true",
                    help="mark the scratch range non-persistent first")
    ap.add_argument("--log", default=None)
    args = ap.parse_args()
    import nbd

    layout = Layout(args.scratch, [int(x) for x in args.dest.split(",")], args.blocks)
    log = open(args.log, "a") if args.log else None

    def note(line):
        if log:
            log.write(line + "\n")
            log.flush()
            os.fsync(log.fileno())

    def ftlctl(*a, stdin=None):
        return subprocess.run([args.ftlctl, "--control", args.control, *a], input=stdin,
                              capture_output=True, text=True, timeout=60)

    if args.setup:
        r = ftlctl("range", "attr", str(layout.scratch), str(layout.blocks * BLOCK),
                   "non-persistent")
        if r.returncode != 0:
            sys.exit(f"setup failed: {r.stderr}")

    h = nbd.NBD()
    h.connect_uri(args.uri)
    rng = random.Random(args.first_txid)
    txid = args.first_txid
    while args.count == 0 or txid < args.first_txid + args.count:
        note(f"begin {txid}")
        order = list(range(layout.blocks))
        rng.shuffle(order)
        for i in order:
            h.pwrite(stamp(txid, i), layout.scratch + i * BLOCK)
        if txid % 5 == 4:
            # Abort: drop the scratch blocks; nothing reaches the destination.
            h.trim(layout.blocks * BLOCK, layout.scratch)
            note(f"abort {txid}")
        else:
            r = ftlctl("range", "batch", "-", stdin=layout.batch())
            if r.returncode != 0:
                sys.exit(f"commit of {txid} failed ({r.returncode}): {r.stderr.strip()}")
            note(f"commit {txid}")
        txid += 1
    h.shutdown()


if __name__ == "__main__":
    main()
