#!/usr/bin/env python3
"""optimizer-table.py VARIANTS SEEDS LABEL=DIR [LABEL=DIR ...]: the variants under each optimizer and schedule.

Each DIR is a normlab-ablate study (DIR/<variant>/seed<S>/summary.json) that differs from the
others only in its optimizer or schedule. Prints Markdown: per arm and variant the rates the
runs used (--lr, and Muon's rate of the hidden matrices), the final validation loss as mean ± sample
sd with its 95% interval over the seeds; then, per arm, the differences that answer "does nGPT's
gain survive": ngpt − gpt_qknorm (GPT+), ngpt − gpt, angpt − gpt_qknorm, each a difference of means
with a 95% Welch interval (negative: the first is better). A diverged run (no final loss) is
counted and named, never averaged.
"""
import json
import math
import statistics
import sys
from pathlib import Path

# Two-sided 95% Student-t quantiles by degrees of freedom (a fractional Welch df rounds down:
# the wider interval).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t975(df):
    df = max(1, int(math.floor(df)))
    return T975[max(k for k in T975 if k <= df)]


def runs(root, variant, seeds):
    losses, rates, diverged = [], set(), []
    for s in seeds:
        p = Path(root) / variant / f"seed{s}" / "summary.json"
        if not p.exists():
            sys.exit(f"optimizer-table: {p} is missing (run the study first)")
        j = json.loads(p.read_text())
        opt = j.get("optimizer", {})
        hp = opt.get("hyperparameters", {})
        rate = f"lr {j['lr']:g}"
        if "lr_ratio" in hp:
            rate += f", muon-lr {j['lr'] * float(hp['lr_ratio']):.3g}"
        sched = j.get("schedule", {}).get("name", "?")
        rates.add(f"{opt.get('name', '?')}+{sched}: {rate}")
        v = j.get("final_val_loss")
        if v is None or not math.isfinite(float(v)):
            diverged.append(s)
        else:
            losses.append(float(v))
    return losses, sorted(rates), diverged


def interval(xs):
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, 0.0, None
    sd = statistics.stdev(xs)
    h = t975(len(xs) - 1) * sd / math.sqrt(len(xs))
    return m, sd, (m - h, m + h)


def welch(a, b):
    """Difference of means a − b with a 95% Welch interval (None with fewer than 2 seeds each)."""
    d = statistics.mean(a) - statistics.mean(b)
    if len(a) < 2 or len(b) < 2:
        return d, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return d, (d, d)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    h = t975(df) * se
    return d, (d - h, d + h)


def main():
    if len(sys.argv) < 4 or any("=" not in a for a in sys.argv[3:]):
        sys.exit(__doc__.strip().splitlines()[0])
    variants, seeds = sys.argv[1].split(","), sys.argv[2].split(",")
    arms = [a.split("=", 1) for a in sys.argv[3:]]
    data = {label: {v: runs(d, v, seeds) for v in variants} for label, d in arms}
    print("| arm | variant | rates | final val loss (mean ± sd) | 95% interval | seeds' values |")
    print("|---|---|---|---|---|---|")
    for label, _ in arms:
        for v in variants:
            losses, rates, diverged = data[label][v]
            if not losses:
                print(f"| {label} | {v} | {'; '.join(rates)} | diverged (seeds {', '.join(diverged)}) | | |")
                continue
            m, sd, ci = interval(losses)
            note = f" ({len(diverged)} diverged: seeds {', '.join(diverged)})" if diverged else ""
            ci_s = f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "n/a (one seed)"
            vals = ", ".join(f"{x:.4f}" for x in losses)
            print(f"| {label} | {v} | {'; '.join(rates)} | {m:.4f} ± {sd:.4f}{note} | {ci_s} | {vals} |")
    pairs = [(a, b) for a, b in (("ngpt", "gpt_qknorm"), ("ngpt", "gpt"), ("angpt", "gpt_qknorm"),
                                 ("gpt_qknorm", "gpt")) if a in variants and b in variants]
    if not pairs:
        return
    print()
    print("| arm | " + " | ".join(f"{a} − {b}" for a, b in pairs) + " |")
    print("|---|" + "---|" * len(pairs))
    for label, _ in arms:
        cells = []
        for a, b in pairs:
            la, lb = data[label][a][0], data[label][b][0]
            if not la or not lb:
                cells.append("n/a (diverged)")
                continue
            d, ci = welch(la, lb)
            sig = "" if ci is None or ci[0] <= 0 <= ci[1] else " *"
            cells.append(f"{d:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}]{sig}" if ci else f"{d:+.4f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    print(f"Seeds {', '.join(seeds)}; differences of mean final validation loss with 95% Welch intervals "
          "(negative: the first variant ends lower); * marks an interval that excludes zero.")


if __name__ == "__main__":
    main()
