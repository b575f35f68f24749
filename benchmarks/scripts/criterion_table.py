#!/usr/bin/env python3
"""Prints a criterion group's medians as a table: MB/s of JSON, ns per
value, and the speed ratio to a baseline function in the same run.

    benchmarks/scripts/criterion_table.py decode_fp32_long [--baseline serde_json]
"""

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "target" / "criterion"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("group")
    parser.add_argument("--baseline", default="serde_json")
    args = parser.parse_args()
    rows = {}
    for estimates in sorted((ROOT / args.group).glob("*/*/new/estimates.json")):
        function, body = estimates.parts[-4], estimates.parts[-3]
        bench = json.loads((estimates.parent / "benchmark.json").read_text())
        median_ns = json.loads(estimates.read_text())["median"]["point_estimate"]
        nbytes = bench.get("throughput", {}).get("Bytes")
        m = re.match(r"b(\d+)_n(\d+)", body)
        values = int(m.group(1)) * int(m.group(2)) if m else None
        rows[(body, function)] = (median_ns, nbytes, values)
    bodies = sorted({b for b, _ in rows}, key=lambda b: [int(x) for x in re.findall(r"\d+", b)])
    print(f"| {args.group} | function | median | MB/s | ns/value | speed vs {args.baseline} |")
    print("|---|---|---|---|---|---|")
    for body in bodies:
        base = rows.get((body, args.baseline))
        for (b, function), (ns, nbytes, values) in sorted(rows.items()):
            if b != body:
                continue
            mbs = f"{nbytes / ns * 1e3:.0f}" if nbytes else "-"
            per = f"{ns / values:.1f}" if values else "-"
            ratio = f"{base[0] / ns:.2f}" if base else "-"
            shown = f"{ns / 1e6:.2f} ms" if ns > 1e6 else f"{ns / 1e3:.1f} µs"
            print(f"| {body} | {function} | {shown} | {mbs} | {per} | {ratio} |")


if __name__ == "__main__":
    main()
