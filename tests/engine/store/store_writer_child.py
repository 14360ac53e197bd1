"""A second process writing to the store, for the multi-process tests in test_store.py.

Usage:
    store_writer_child.py turns PATH N
        record session "child" with N turns, then exit.
    store_writer_child.py batches PATH ROWS SLEEP_S
        forever: one transaction per batch writing ROWS events and sleeping SLEEP_S after
        each row (inside the transaction); prints "W batch row" after each row and
        "C batch" after each COMMIT, flushed, so the parent knows what is durable.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

from clawrl_app.engine.store import NewTurn, Store


def write_turns(store: Store, n: int) -> None:
    """Record one session with `n` main turns."""
    store.ensure_session("child", source="child-process")
    for i in range(n):
        store.record_turn(
            NewTurn(
                session_id="child",
                type="main",
                request={"messages": [{"role": "user", "content": f"q{i}"}]},
                response_text=f"a{i}",
                prompt_ids=[1, 2, i],
                response_ids=[i, 2**31 - 1],
                logprobs=[-0.5, -1.0 / 3.0],
                policy_version="base",
            )
        )


def write_batches(store: Store, rows: int, sleep_s: float) -> None:
    """Commit all-or-nothing batches of events until killed."""
    for batch in itertools.count():
        with store.atomic():
            for row in range(rows):
                store.add_event("batch", {"batch": batch, "row": row})
                print(f"W {batch} {row}", flush=True)
                time.sleep(sleep_s)
        print(f"C {batch}", flush=True)


def main(argv: list[str]) -> None:
    """Dispatch on the mode named in argv[1]."""
    mode, path = argv[1], Path(argv[2])
    with Store(path) as store:
        if mode == "turns":
            write_turns(store, int(argv[3]))
        elif mode == "batches":
            write_batches(store, int(argv[3]), float(argv[4]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
