#!/usr/bin/env python3
"""Causal order of an OTF2 archive as otf2-print shows it (with the archive's clock offsets applied, as
otf2-print does): every MPI_RECV matched with its MPI_SEND (the i-th of the same sender rank, receiver rank
and tag, MPI's non-overtaking order) must not come before it, and in every collective instance (the k-th
MPI_COLLECTIVE_END on a communicator at each member location) no member may end before the last member
began. Used by tests/cli_trace_clock*.sh.

usage: otf2_causality.py GLOBAL_DEFS.txt EVENTS.txt   (the outputs of otf2-print -G and otf2-print)
prints: receives N before_send M collectives K out_of_order V
"""
import collections
import re
import sys


def main(defs_path, events_path):
    rank_of = {}  # location -> rank (its location group "rank R")
    for line in open(defs_path):
        m = re.match(r'^LOCATION\s+(\d+)\s.*Group: "rank (\d+)"', line)
        if m:
            rank_of[int(m.group(1))] = int(m.group(2))
    sends, recvs = collections.defaultdict(list), collections.defaultdict(list)
    begin = {}  # location -> time of its open collective
    coll = collections.defaultdict(lambda: collections.defaultdict(list))  # comm -> location -> [(begin, end)]
    for line in open(events_path):
        f = line.split()
        if len(f) < 3 or not f[1].isdigit():
            continue
        loc, t = int(f[1]), int(f[2])
        if f[0] == "MPI_SEND":
            peer, tag = re.search(r"Receiver: (\d+) .*Tag: (\d+)", line).groups()
            sends[(rank_of[loc], int(peer), int(tag))].append(t)
        elif f[0] == "MPI_RECV":
            peer, tag = re.search(r"Sender: (\d+) .*Tag: (\d+)", line).groups()
            recvs[(int(peer), rank_of[loc], int(tag))].append(t)
        elif f[0] == "MPI_COLLECTIVE_BEGIN":
            begin[loc] = t
        elif f[0] == "MPI_COLLECTIVE_END":
            comm = re.search(r"Communicator: .*<(\d+)>", line).group(1)
            coll[comm][loc].append((begin.pop(loc), t))
    n = bad = 0
    for key, rs in recvs.items():
        for s, r in zip(sends.get(key, []), rs):
            n += 1
            bad += r < s
    k = v = 0
    for locs in coll.values():
        for i in range(max(len(x) for x in locs.values())):
            inst = [x[i] for x in locs.values() if i < len(x)]
            if len(inst) > 1:
                k += 1
                v += min(e for _, e in inst) < max(b for b, _ in inst)
    print(f"receives {n} before_send {bad} collectives {k} out_of_order {v}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
