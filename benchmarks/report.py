"""Print a pytest-benchmark JSON file as markdown tables of ratios.

    python benchmarks/report.py bench.json

Within each group the ratio is a row's median time over autotape's median time in
the same run, so >1 means slower than autotape.
"""
import json
import sys
from collections import defaultdict


def main(path):
    data = json.load(open(path))
    groups = defaultdict(list)
    for b in data["benchmarks"]:
        groups[b["group"]].append((b["name"].split("[")[0].replace("test_", ""),
                                   b["stats"]["median"]))
    machine = data.get("machine_info", {})
    print(f"Machine: {machine.get('cpu', {}).get('brand_raw', '?')}, "
          f"Python {machine.get('python_version', '?')}; one thread.\n")
    for group, rows in groups.items():
        base = dict(rows).get("autotape") or dict(rows).get("warm_cache") or rows[0][1]
        print(f"**{group}**\n\n| | median | ratio |\n|---|---|---|")
        for name, t in sorted(rows, key=lambda r: r[1]):
            print(f"| {name} | {_fmt(t)} | {t / base:.2f} |")
        print()
        for b in data["benchmarks"]:
            if b["group"] == group:
                for key, value in b.get("extra_info", {}).items():
                    print(f"{key}: {value}\n")


def _fmt(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


if __name__ == "__main__":
    main(sys.argv[1])
