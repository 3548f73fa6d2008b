#!/usr/bin/env python3
"""Embedding kernels as a fraction of the machine's random-gather bandwidth.

Reads the JSON of a dlrm_micro_bench run (--benchmark_out=FILE --benchmark_out_format=json)
and prints, for every BM_Embedding* result, its bytes/s beside BM_RandomGather's at the same
row width (small: dim 16, multihot: dim 64), thread count and 2 MiB pages (what the engine's
tables get). With --benchmark_repetitions the median is used. Standard library only.

usage: bench/micro_report.py micro.json
"""
import json
import re
import sys

DIMS = {"small": 16, "multihot": 64}


def results(path):
    """run_name -> bytes/s, preferring the median aggregate when repetitions were run."""
    with open(path) as f:
        data = json.load(f)
    plain, median = {}, {}
    for b in data["benchmarks"]:
        if "bytes_per_second" not in b:
            continue
        name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                median[name] = b["bytes_per_second"]
        else:
            plain.setdefault(name, b["bytes_per_second"])
    plain.update(median)
    return plain


def threads_of(name):
    m = re.search(r"(?:pool_)?threads:(\d+)", name)
    return int(m.group(1)) if m else 1


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rates = results(sys.argv[1])
    gather = {}
    for name, rate in rates.items():
        m = re.match(r"BM_RandomGather/dim:(\d+)/pages:huge/", name)
        if m:
            gather[(int(m.group(1)), threads_of(name))] = rate
    print(f"{'benchmark':<80} {'GB/s':>7} {'gather GB/s':>11} {'fraction':>8}")
    for name, rate in rates.items():
        m = re.match(r"BM_Embedding\w+/(\w+)/", name)
        if not m or m.group(1) not in DIMS:
            continue
        ref = gather.get((DIMS[m.group(1)], threads_of(name)))
        ref_text = f"{ref / 1e9:11.2f}" if ref else f"{'-':>11}"
        frac_text = f"{rate / ref:8.2f}" if ref else f"{'-':>8}"
        print(f"{name:<80} {rate / 1e9:7.2f} {ref_text} {frac_text}")


if __name__ == "__main__":
    main()
