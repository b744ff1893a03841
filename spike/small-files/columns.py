#!/usr/bin/env python3
"""What a session file's events take as columns (docs/SMALL-FILES.md).

    ackscope export FILE --json > events.json
    spike/small-files/columns.py events.json REQUESTS [BLOCK_EVENTS]

Splits the events into columns (kind, side, connection, request as a difference per connection
and side, each kind's fields, TCP_INFO samples as differences from the last of their side, and
the time as the difference from the same side's last event, whole or split by kind and side),
writes each as LEB128 varints (signed ones zigzagged), compresses each with the zstd command
line, and prints each column's bytes a request, the totals, and the order-0 entropy of the times.
With BLOCK_EVENTS, the events are also cut into blocks of that many, each block's columns
compressed alone (the time split by kind and side), as a file of independent blocks would.
"""
import collections
import json
import math
import subprocess
import sys
import tempfile


def varint(value, out):
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def zigzag(value):
    return value * 2 if value >= 0 else -value * 2 - 1


def zstd_bytes(data, level):
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        out = subprocess.run(["zstd", "-q", f"-{level}", "-c", f.name], capture_output=True)
        return len(out.stdout)


def kind_name(kind):
    return kind if isinstance(kind, str) else next(iter(kind))


def columns_of(events):
    """The columns of `events`, the time ones split by kind and side, and each kind and
    side's waits counted."""
    columns = collections.defaultdict(bytearray)
    time_by_kind = collections.defaultdict(bytearray)
    waits = collections.defaultdict(collections.Counter)
    kinds, last_at, last_req, last_info = {}, {}, {}, {}
    for e in events:
        name = kind_name(e["kind"])
        side = e["side"]
        key = (e["conn"], side)
        columns["kind"].append(kinds.setdefault(name, len(kinds)))
        columns["side"].append(0 if side == "Client" else 1)
        dt = e["at_ns"] - last_at.get(side, 0)
        last_at[side] = e["at_ns"]
        varint(zigzag(dt), columns["time"])
        varint(zigzag(dt), time_by_kind[(name, side)])
        waits[(name, side)][dt] += 1
        varint(e["conn"], columns["conn"])
        varint(zigzag(e["req"] - last_req.get(key, 0)), columns["req"])
        last_req[key] = e["req"]
        if isinstance(e["kind"], dict):
            value = e["kind"][name]
            if name == "TcpInfo":
                now = {f: 0 if x is None else int(x) + 1 for f, x in value.items()}
                before = last_info.get(key, {})
                for f, x in now.items():
                    varint(zigzag(x - before.get(f, 0)), columns["tcp_info"])
                last_info[key] = now
            else:
                fields = value.values() if isinstance(value, dict) else [value]
                for x in fields:
                    varint(x if isinstance(x, int) else 0, columns["fields of " + name])
    return columns, time_by_kind, waits


def main():
    path, requests = sys.argv[1], int(sys.argv[2])
    block = int(sys.argv[3]) if len(sys.argv) > 3 else None
    doc = json.load(open(path))
    events = [e for m in doc["messages"] if isinstance(m, dict) and "Events" in m
              for e in m["Events"]["events"]]
    columns, time_by_kind, waits = columns_of(events)
    print(f"{len(events)} events, {requests} requests")
    totals = {3: 0, 19: 0}
    for name, data in sorted(columns.items()):
        sizes = {level: zstd_bytes(bytes(data), level) for level in totals}
        if name != "time":
            for level in totals:
                totals[level] += sizes[level]
        print(f"{name:28} raw {len(data)/requests:7.2f}  zstd -3 {sizes[3]/requests:6.2f}  "
              f"zstd -19 {sizes[19]/requests:6.2f} bytes a request")
    whole = {level: zstd_bytes(bytes(columns["time"]), level) for level in totals}
    split = {level: sum(zstd_bytes(bytes(d), level) for d in time_by_kind.values())
             for level in totals}
    for label, time in (("time whole", whole), ("time by kind and side", split)):
        print(f"total with {label}: zstd -3 {(totals[3] + time[3]) / requests:.2f}, "
              f"zstd -19 {(totals[19] + time[19]) / requests:.2f} bytes a request")
    bits = sum(-sum(n * math.log2(n / sum(c.values())) for n in c.values())
               for c in waits.values())
    print(f"order-0 entropy of the times by kind and side: {bits / 8 / requests:.2f} bytes a request")
    if block:
        size = 0
        for start in range(0, len(events), block):
            cols, times, _ = columns_of(events[start:start + block])
            cols.pop("time")
            size += sum(zstd_bytes(bytes(d), 3) for d in list(cols.values()) + list(times.values()))
        print(f"in blocks of {block} events, each column alone, the time by kind and side: "
              f"zstd -3 {size / requests:.2f} bytes a request")


if __name__ == "__main__":
    main()
