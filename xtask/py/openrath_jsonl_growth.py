#!/usr/bin/env python3
"""Store growth of Python OpenRath's JSONL session store, for `cargo xtask bench` (issue 24).

The workload of issue 19's store growth, on the Python side: a conversation of ``--turns``
turns on one session, each turn one user message (100 bytes) and one assistant message (200
bytes) with the texts the LangGraph peer script documents (word soup over its 64 words, picked
by the ANSI-C LCG; see ``../shared/peers/langgraph_checkpoint_bench.py``). A turn is
checkpointed the way Python OpenRath persists: its two chunks go through the session's
``SessionWriter`` (``write_chunk``, one flushed line each), so after every turn the file holds
the whole thread.

``--fork-every N``: after every N-th turn, ``Session.fork()`` the thread, add one user message
(``text("fork", turn, 100)``) to the branch and persist the branch the only way the JSONL store
can: a ``SessionWriter`` of its own writing every chunk, closed. The main line goes on.

At every ``--report-at`` turn it records the bytes on disk (every file of the store directory,
the open main file included), the number of files, and the median wall time of the last 10
turns' writes (the two ``write_chunk`` calls; building the rows is not timed). Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

VOCABULARY = (
    "the quick brown fox jumps over lazy dog agent tool call result session chunk store "
    "fork merge run step state value model reply user message text data index table query "
    "plan build test check file path line code error retry queue lease token usage prompt "
    "answer branch commit event stream server client worker cache limit order batch graph "
    "node edge thread saver blob write"
).split()
KIND_SALT = {"user": 1, "assistant": 2, "fork": 3}


def message_text(kind: str, turn: int, size: int) -> str:
    """The documented generator: an LCG over the 64 words, cut to ``size`` characters."""
    state = (turn * 1000003 + KIND_SALT[kind]) & 0x7FFFFFFF
    words = [f"{kind} {turn}:"]
    length = len(words[0])
    while length < size:
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        word = VOCABULARY[(state >> 16) % 64]
        words.append(word)
        length += 1 + len(word)
    return " ".join(words)[:size]


def directory_bytes(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--report-at", default="10,100,500")
    ap.add_argument("--fork-every", type=int, default=0)
    ap.add_argument("--dir", type=Path, default=None, help="store directory (default: a temp dir)")
    a = ap.parse_args()
    report_at = {int(t) for t in a.report_at.split(",") if t.strip()}

    import rath  # noqa: F401  (the version is reported below)
    from importlib.metadata import version

    from rath.session import Session, SessionWriter, assistant_turn_chunk, user_text_chunk
    from rath.session.chunk import ChunkTable

    root = a.dir or Path(tempfile.mkdtemp(prefix="or-jsonl-growth-"))
    root.mkdir(parents=True, exist_ok=True)
    main_line = Session(chunk_table=ChunkTable(rows=()))
    writer = SessionWriter(main_line, path=root / f"{main_line.id}.jsonl")
    written = 0
    times: list[float] = []
    points = []
    forks = 0
    for turn in range(1, a.turns + 1):
        user = user_text_chunk(message_text("user", turn, 100))
        reply = assistant_turn_chunk(tool_calls=None, content=message_text("assistant", turn, 200))
        main_line.chunk_table = ChunkTable(rows=(*main_line.chunk_table.rows, user, reply))
        t0 = time.perf_counter()
        writer.write_chunk(written, user)
        writer.write_chunk(written + 1, reply)
        times.append(time.perf_counter() - t0)
        written += 2
        if a.fork_every and turn % a.fork_every == 0:
            branch = main_line.fork()
            branch.chunk_table = ChunkTable(
                rows=(*branch.chunk_table.rows, user_text_chunk(message_text("fork", turn, 100)))
            )
            with SessionWriter(branch, path=root / f"{branch.id}.jsonl") as w:
                for i, row in enumerate(branch.chunk_table.rows):
                    w.write_chunk(i, row)
            forks += 1
        if turn in report_at:
            size, files = directory_bytes(root)
            points.append(
                {
                    "turn": turn,
                    "bytes": size,
                    "files": files,
                    "forks": forks,
                    "turn_ms_median": statistics.median(times[-10:]) * 1e3,
                }
            )
            print(f"# turn {turn}: {size} bytes in {files} files", file=sys.stderr, flush=True)
    writer.close()
    print(
        json.dumps(
            {
                "peer": "openrath-jsonl",
                "versions": {"openrath": version("openrath"), "python": sys.version.split()[0]},
                "turns": a.turns,
                "fork_every": a.fork_every,
                "points": points,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
