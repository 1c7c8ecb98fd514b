"""Drives an openrath server with the official LangGraph Python SDK (langgraph-sdk 0.4.14).

Usage: python flow.py <base url>, with LG_KEY_A and LG_KEY_B (API keys of two tenants) in the
environment. Runs the flow of ../shared/langgraph-api/PROTOCOL.md with tenant A's key, checks
what tenant B's key sees, and prints one JSON document of what the SDK returned (the Rust test
tests/langgraph.rs asserts on it). Any exception the SDK raises outside the expected ones ends
the script with a traceback and a non-zero status.
"""

import json
import os
import sys
import warnings
from importlib.metadata import version

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import NotFoundError


def not_found(call):
    """The status and message of the NotFoundError `call` raises, or what it returned."""
    try:
        return {"returned": call()}
    except NotFoundError as e:
        return {"error": type(e).__name__, "status": e.status_code, "message": str(e)}


def main():
    url = sys.argv[1]
    a = get_sync_client(url=url, api_key=os.environ["LG_KEY_A"])
    b = get_sync_client(url=url, api_key=os.environ["LG_KEY_B"])
    out = {"sdk": version("langgraph-sdk")}

    assistants = a.assistants.search()
    out["assistants"] = assistants
    echo = next(x for x in assistants if x["graph_id"] == "echo")

    thread = a.threads.create()
    tid = thread["thread_id"]
    out["thread_created"] = thread

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["stream"] = [
            {"event": p.event, "data": p.data}
            for p in a.runs.stream(
                tid,
                echo["assistant_id"],
                input={"messages": [{"role": "user", "content": "hi"}]},
                stream_mode=["values", "updates", "messages-tuple"],
            )
        ]
    out["stream_warnings"] = [str(w.message) for w in caught]

    # By graph id, not by assistant id.
    out["wait"] = a.runs.wait(
        tid, "echo", input={"messages": [{"role": "user", "content": "again"}]}
    )
    out["state"] = a.threads.get_state(tid)
    out["history"] = a.threads.get_history(tid)

    run = a.runs.create(
        tid, "echo", input={"messages": [{"type": "human", "content": "third"}]}
    )
    out["created"] = run
    out["joined"] = a.runs.join(tid, run["run_id"])
    out["created_after_join"] = a.runs.get(tid, run["run_id"])

    slow = a.runs.create(
        tid, "slow", input={"messages": [{"role": "user", "content": "slowly"}]}
    )
    out["cancel_answer"] = a.runs.cancel(tid, slow["run_id"])
    out["cancel_join"] = a.runs.join(tid, slow["run_id"])
    out["cancelled"] = a.runs.get(tid, slow["run_id"])
    out["thread"] = a.threads.get(tid)
    out["state_after"] = a.threads.get_state(tid)

    out["unknown_thread"] = not_found(
        lambda: a.threads.get("00000000-0000-4000-8000-000000000000")
    )
    out["tenant_b"] = {
        "thread": not_found(lambda: b.threads.get(tid)),
        "state": not_found(lambda: b.threads.get_state(tid)),
        "history": not_found(lambda: b.threads.get_history(tid)),
        "run": not_found(lambda: b.runs.get(tid, run["run_id"])),
        "create_run": not_found(lambda: b.runs.create(tid, "echo", input={"messages": ["x"]})),
    }
    # B's own thread works, and A cannot see it.
    tb = b.threads.create(metadata={"owner": "b"})
    out["tenant_b_own"] = b.threads.get(tb["thread_id"])
    out["tenant_a_on_b"] = not_found(lambda: a.threads.get(tb["thread_id"]))

    # A run that fails: wait raises (the SDK's reading of __error__), the stream ends with an
    # error event, the thread is in error, and the next run continues it.
    tf = a.threads.create()["thread_id"]
    try:
        out["failed_wait"] = {"returned": a.runs.wait(
            tf, "broken", input={"messages": [{"role": "user", "content": "boom"}]}
        )}
    except Exception as e:  # the SDK raises a bare Exception on __error__
        out["failed_wait"] = {"error": type(e).__name__, "message": str(e)}
    out["failed_thread"] = a.threads.get(tf)
    out["failed_stream"] = [
        {"event": p.event, "data": p.data}
        for p in a.runs.stream(
            tf, "broken", input={"messages": ["boom again"]}, stream_mode="updates"
        )
    ]
    out["after_failure"] = a.runs.wait(tf, "echo", input={"messages": ["after"]})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
