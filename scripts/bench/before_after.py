#!/usr/bin/env python3
"""Two `yued bench --json` runs of the same sections side by side: each row's median in the
first (before) and the second (after), and after / before. Rows are matched by section and
what; a row only one run has is listed with a dash."""
import json
import sys


def rows(path):
    doc = json.load(open(path))
    return doc, {(r["section"], r["what"]): r for r in doc["rows"]}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: before_after.py BEFORE.json AFTER.json")
    (bdoc, before), (adoc, after) = rows(sys.argv[1]), rows(sys.argv[2])
    print(f"model {adoc['model']}, {adoc['device']}, {adoc['threads']} threads, {adoc['reps']} reps (median)")
    print()
    print("| section | what | unit | before | after | after / before |")
    print("|---|---|---|---|---|---|")
    keys = list(before) + [k for k in after if k not in before]
    for k in keys:
        b, a = before.get(k), after.get(k)
        unit = (a or b)["unit"]
        fb = f"{b['median']:.3f}" if b else "-"
        fa = f"{a['median']:.3f}" if a else "-"
        ratio = f"{a['median'] / b['median']:.3f}" if a and b and b["median"] else "-"
        print(f"| {k[0]} | {k[1]} | {unit} | {fb} | {fa} | {ratio} |")


if __name__ == "__main__":
    main()
