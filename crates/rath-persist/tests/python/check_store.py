"""Load a store written by rath-persist with Python OpenRath's own loader.

Usage: check_store.py <openrath_home> <expected_rows.jsonl> <expected_file_count>

Sets OPENRATH_HOME, then for every expected lineage row calls
rath.session.persistence.load_session(id) and rebuilds the row the way
rath.session.graph.export.session_to_jsonl_row would (chunk_count =
len(chunk_table), cumulative_usage from the trailer), and checks
list_persisted_sessions() sees every file. Lineage kinds Python does not
know (openrath's own op_resume, op_annotate) are expected to read as
"unknown", as Python's coerce_lineage_kind does; everything else, parents
included, must match exactly. Prints "OK <n>" on success and exits non-zero
with a message otherwise.
"""

import json
import os
import sys


def main() -> int:
    home, rows_path, file_count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.environ["OPENRATH_HOME"] = home
    from rath.session.graph.kind import LineageKind
    from rath.session.persistence import list_persisted_sessions, load_session

    known_kinds = {k.value for k in LineageKind}
    expected = [json.loads(l) for l in open(rows_path, encoding="utf-8") if l.strip()]
    for want in expected:
        if want["lineage_kind"] not in known_kinds:
            want = dict(want, lineage_kind="unknown")
        ps = load_session(want["id"])
        h = ps.header
        usage = ps.cumulative_usage
        got = {
            "id": str(h.id),
            "parent_session_ids": [str(p) for p in h.parent_session_ids],
            "lineage_operator": h.lineage_operator,
            "lineage_kind": h.lineage_kind.value,
            "lineage_extras": [[k, v] for k, v in h.lineage_extras],
            "chunk_count": len(ps.chunk_table.rows),
            "cumulative_usage": None
            if usage is None
            else {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
        }
        if got != want:
            print(f"MISMATCH for {want['id']}:\n want {want}\n got  {got}")
            return 1
        for row in ps.chunk_table.rows:
            if row.kind.value not in ("system", "user", "assistant", "tool_result"):
                print(f"unexpected kind {row.kind}")
                return 1
    metas = list_persisted_sessions()
    if len(metas) != file_count:
        print(f"list_persisted_sessions saw {len(metas)} files, expected {file_count}")
        return 1
    by_id = {str(m.id): m for m in metas}
    for want in expected:
        m = by_id.get(want["id"])
        if m is None or m.chunk_count != want["chunk_count"]:
            print(f"listing disagrees for {want['id']}: {m}")
            return 1
    print(f"OK {len(expected)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
