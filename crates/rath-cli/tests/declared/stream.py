"""Streams one run of every assistant an openrath server lists, with the official LangGraph
Python SDK, in the stream modes a chat UI asks for (`messages-tuple` and `updates`).

Usage: python stream.py <base url> <question> [graph id ...], with LG_KEY (an API key) in the
environment; with graph ids, only those assistants.
Prints one JSON document: per graph id, the events the SDK yielded (`event`, `data`) and the
thread's state after the run. The Rust test tests/declared_workflows.rs asserts on it.
"""

import json
import os
import sys
import warnings

from langgraph_sdk import get_sync_client


def main():
    url, question, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
    client = get_sync_client(url=url, api_key=os.environ["LG_KEY"])
    out = {}
    for assistant in client.assistants.search():
        if only and assistant["graph_id"] not in only:
            continue
        thread = client.threads.create()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            events = [
                {"event": part.event, "data": part.data}
                for part in client.runs.stream(
                    thread["thread_id"],
                    assistant["assistant_id"],
                    input={"messages": [{"role": "user", "content": question}]},
                    stream_mode=["messages-tuple", "updates"],
                )
            ]
        out[assistant["graph_id"]] = {
            "events": events,
            "warnings": [str(w.message) for w in caught],
            "state": client.threads.get_state(thread["thread_id"]),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
