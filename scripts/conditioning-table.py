#!/usr/bin/env python3
"""conditioning-table.py STEP=FILE [STEP=FILE ...]: the nGPT paper's conditioning figures over training.

Each FILE is a `normlab-diagnose --compare` table (Markdown) of the same variants' checkpoints at
one step. Prints, per figure the paper makes a claim about, one row per variant and one column per
step, so a reader sees whether a difference between variants holds all along training or only at
its end.
"""
import sys

FIGURES = [
    "wte covariance condition number",
    "wte covariance condition number (the rows' span)",
    "wte row norm spread (max-min)",
    "W_q condition number (mean over layers)",
    "W_v condition number (mean over layers)",
    "W_o condition number (mean over layers)",
    "W_q effective rank (mean over layers)",
]


def read(path):
    rows = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2:
            rows[cells[0]] = cells[1:]
    if "variant" not in rows:
        sys.exit(f"conditioning-table: {path} is not a normlab-diagnose --compare table (no 'variant' row)")
    return rows


def main():
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit(__doc__.strip().splitlines()[0])
    steps = [a.split("=", 1) for a in sys.argv[1:]]
    tables = [(s, read(f)) for s, f in steps]
    variants = tables[0][1]["variant"]
    counted = tables[0][1].get("embedding rows counted", ["?"] * len(variants))
    print(f"Embedding rows counted: {counted[0]}.")
    print()
    for fig in FIGURES:
        print(f"**{fig}**")
        print()
        print("| variant | " + " | ".join(f"step {s}" for s, _ in tables) + " |")
        print("|---|" + "---:|" * len(tables))
        for i, v in enumerate(variants):
            cells = []
            for s, t in tables:
                if t.get("variant") != variants:
                    sys.exit(f"conditioning-table: step {s} compares other variants ({t.get('variant')})")
                cells.append(t.get(fig, ["n/a"] * len(variants))[i])
            print(f"| {v} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
