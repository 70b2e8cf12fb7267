#!/usr/bin/env python3
"""precision-table.py FP32_DIR BF16_DIR VARIANTS SEEDS: bf16 against fp32, final validation loss.

Reads DIR/<variant>/seed<S>/summary.json of two normlab-ablate studies that differ only in
--precision and prints a Markdown table: per variant each precision's mean ± sample sd over
the seeds and the seeds' values, bf16's mean relative to fp32's (the bar: within 0.5%), and
whether bf16's mean lies inside fp32's seed range.
"""
import json
import statistics
import sys
from pathlib import Path


def losses(root, variant, seeds):
    out = []
    for s in seeds:
        p = Path(root) / variant / f"seed{s}" / "summary.json"
        if not p.exists():
            sys.exit(f"precision-table: {p} is missing (run the study first)")
        v = json.loads(p.read_text()).get("final_val_loss")
        if v is None:
            sys.exit(f"precision-table: {p} has no final_val_loss (the run diverged?)")
        out.append(float(v))
    return out


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[0])
    fp32, bf16, variants, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(",")
    print("| variant | fp32 final val loss | bf16 final val loss | bf16 − fp32 (of fp32's mean) | within 0.5% | "
          "bf16 mean inside fp32's seed range |")
    print("|---|---|---|---|---|---|")
    ok = True
    for v in variants:
        a, b = losses(fp32, v, seeds), losses(bf16, v, seeds)
        ma, mb = statistics.mean(a), statistics.mean(b)
        sa = statistics.stdev(a) if len(a) > 1 else 0.0
        sb = statistics.stdev(b) if len(b) > 1 else 0.0
        rel = (mb - ma) / ma
        inside = min(a) <= mb <= max(a)
        ok &= abs(rel) <= 0.005
        fmt = lambda xs: ", ".join(f"{x:.4f}" for x in xs)
        print(f"| {v} | {ma:.4f} ± {sa:.4f} ({fmt(a)}) | {mb:.4f} ± {sb:.4f} ({fmt(b)}) | {100 * rel:+.2f}% | "
              f"{'yes' if abs(rel) <= 0.005 else 'no'} | {'yes' if inside else 'no'} |")
    print()
    print(f"Seeds {', '.join(seeds)}; mean ± sample sd, the seeds' values in brackets. "
          f"{'Every variant within 0.5%.' if ok else 'Not every variant within 0.5%.'}")


if __name__ == "__main__":
    main()
