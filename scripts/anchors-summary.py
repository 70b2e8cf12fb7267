#!/usr/bin/env python3
"""Tables of scripts/bench-anchors.sh's run: medians over its rounds, in Markdown.

    python3 scripts/anchors-summary.py runs/anchors
The ceiling is the same run's OpenBLAS SGEMM 1024³ (the machine's best GEMM from
Debian's libraries, called directly); every step figure is a fraction of it.
"""
import glob
import json
import os
import statistics
import sys

VARIANTS = ["gpt", "gpt_qknorm", "gpt_alpha", "ngpt", "ngpt_slerp", "ngpt_noqknorm", "ngpt_scalar", "angpt"]


def load(pattern):
    runs = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            try:
                runs.append(json.load(f))
            except json.JSONDecodeError as e:  # a run cut off mid-write
                sys.exit(f"anchors-summary: {path} is not valid JSON ({e})")
    return runs


def bench_medians(runs):
    """name -> {'ms': median real time in ms, counters: medians}"""
    acc = {}
    for run in runs:
        for b in run.get("benchmarks", []):
            if b.get("run_type") == "aggregate":
                continue
            name = b["run_name"] if "run_name" in b else b["name"]
            name = name.replace("/min_time:2.000", "").replace("/real_time", "")
            unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
            e = acc.setdefault(name, {"ms": [], "gflops": [], "tokens_per_second": []})
            e["ms"].append(b["real_time"] * unit)
            for c in ("gflops", "tokens_per_second"):
                if c in b:
                    e[c].append(b[c])
    return {n: {k: statistics.median(v) if v else None for k, v in e.items()} | {"rounds": len(e["ms"])}
            for n, e in acc.items()}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "runs/anchors"
    runs = os.path.join(out, "normlab-r*.json")
    if not glob.glob(runs):
        sys.exit(f"anchors-summary: no {runs} (pass the OUT folder of a scripts/bench-anchors.sh run)")
    nl = bench_medians(load(runs))
    for need in ("BM_OpenBlasSgemm/1024", "BM_GemmCeiling/1024", "BM_TrainStep/gpt/reference"):
        if need not in nl:
            sys.exit(f"anchors-summary: {runs} has no {need} "
                     "(a run of scripts/bench-anchors.sh with normlab_bench built with -DNORMLAB_BLAS=ON has it)")
    ceiling = nl["BM_OpenBlasSgemm/1024"]["gflops"]
    own = nl["BM_GemmCeiling/1024"]["gflops"]
    rounds = nl["BM_OpenBlasSgemm/1024"]["rounds"]
    print(f"# Anchors ({rounds} rounds, medians)\n")
    print(f"Ceiling: OpenBLAS SGEMM 1024³ **{ceiling:.1f} GFLOP/s** (cblas_sgemm, 2 threads); "
          f"normlab's cpu::gemm 1024³ {own:.1f} GFLOP/s ({own / ceiling:.0%}).\n")
    peak = (nl.get("BM_FmaPeak") or {}).get("gflops")
    if peak:
        print(f"Arithmetic peak (BM_FmaPeak: independent FMAs on every thread, nothing from memory): "
              f"**{peak:.1f} GFLOP/s**; the ceiling is {ceiling / peak:.0%} of it.\n")

    torch = {}
    for v in ("gpt", "ngpt"):
        for pol in ("PASSIVE", "default"):
            ms = [r["median_ms"] for r in load(os.path.join(out, f"torch-{v}-{pol}-r*.json"))]
            if ms:
                torch[(v, pol)] = statistics.median(ms)
    print("## PyTorch reference step (bench/torch_reference.py, 2 threads, OpenBLAS OpenMP build)\n")
    print("| variant | OMP_WAIT_POLICY | ms/step | tokens/s |")
    print("|---|---|---:|---:|")
    tokens = 8 * 256
    for (v, pol), ms in sorted(torch.items()):
        print(f"| {v} | {pol} | {ms:.0f} | {tokens / (ms * 1e-3):.0f} |")
    best = {v: min(ms for (w, _), ms in torch.items() if w == v) for v in ("gpt", "ngpt") if any(w == v for w, _ in torch)}
    print("\n(the anchor below is each variant's faster policy)\n")

    print("## Reference config (d=256, L=4, H=4, T=256, B=8), float32\n")
    print("| variant | ms | GFLOP/s | of ceiling | 1 thread ms | 2 vs 1 thread | / gpt | tokens/s | × PyTorch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    gpt_ms = nl["BM_TrainStep/gpt/reference"]["ms"]
    for v in VARIANTS:
        r = nl.get(f"BM_TrainStep/{v}/reference")
        one = nl.get(f"BM_TrainStep/{v}/reference_1thread")
        if not r:
            continue
        anchor = best.get(v)
        x = f"{anchor / r['ms']:.2f}×" if anchor else ""
        one_cells = f"{one['ms']:.0f} | {one['ms'] / r['ms']:.2f}×" if one else " | "  # a run without --…_1thread
        print(f"| {v} | {r['ms']:.0f} | {r['gflops']:.1f} | {r['gflops'] / ceiling:.0%} | "
              f"{one_cells} | {r['ms'] / gpt_ms:.3f} | "
              f"{r['tokens_per_second']:.0f} | {x} |")

    # The overhead bars measured step by step: BM_StepPair alternates two
    # variants' steps in one loop, so host drift between benchmarks (seconds
    # apart in the table above) does not enter their ratio. One entry per round
    # (aggregates of repeated runs are skipped).
    def per_round(prefix, key, fields):
        """Entries of the benchmarks named prefix/..., keyed by the name's `fields` parts after the prefix."""
        found = {}
        for path in sorted(glob.glob(os.path.join(out, "normlab-r*.json"))):
            for b in load(path)[0].get("benchmarks", []):
                if b["name"].startswith(prefix) and key in b and b.get("run_type") != "aggregate":
                    found.setdefault(tuple(b["name"].split("/")[1:1 + fields]), []).append(b)
        return found

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    pairs = per_round("BM_StepPair/", "b_over_a", 2)
    if pairs:
        # b_over_a_paired exists in runs from 2026-12-03 08:50 on; older runs get the ratio of medians only.
        paired = all("b_over_a_paired" in r for rows in pairs.values() for r in rows)
        print("\n### Overhead step by step (BM_StepPair: the two variants' steps alternated in one loop)\n")
        print("Per round: the ratio of the two median steps" +
              (", and (paired) the median of each B step over the A step just before it.\n" if paired else ".\n"))
        # b_over_a_best (the two fastest steps' ratio) exists in runs from 2026-12-03 12:18 on.
        best_of = all("b_over_a_best" in r for rows in pairs.values() for r in rows)
        if best_of:
            print("Fastest: the ratio of each round's two fastest steps (the host only adds time).\n")
        print("| ratio | per round | median | " + ("paired, per round | paired median | " if paired else "") +
              ("fastest, per round | " if best_of else "") + "a ms | b ms |")
        print("|---|---|---:|" + ("---|---:|" if paired else "") + ("---|" if best_of else "") + "---:|---:|")
        for (a_v, b_v), rows in pairs.items():
            cells = [f"{b_v}/{a_v}", ", ".join(f"{r['b_over_a']:.3f}" for r in rows), f"{med(rows, 'b_over_a'):.3f}"]
            if paired:
                cells += [", ".join(f"{r['b_over_a_paired']:.3f}" for r in rows), f"{med(rows, 'b_over_a_paired'):.3f}"]
            if best_of:
                cells += [", ".join(f"{r['b_over_a_best']:.3f}" for r in rows)]
            cells += [f"{med(rows, 'a_ms'):.0f}", f"{med(rows, 'b_ms'):.0f}"]
            print("| " + " | ".join(cells) + " |")

    def variant_pair_table(by_variant, key, fmt, med_fmt, explain, medians, explain_best, tail_heads, tail_keys):
        """One row per variant of a pair benchmark: `key`_paired per round and its median (med_fmt,
        which may carry a unit), `key` (the ratio of the medians) per round, `key`_best per round
        where every round has it, then the medians of tail_keys (.0f for ms, .1f otherwise)."""
        best_of = all(f"{key}_best" in r for rows in by_variant.values() for r in rows)
        print(f"Per round: (paired) {explain}; and the ratio of {medians}" +
              (f"; and {explain_best}.\n" if best_of else ".\n"))
        print("| variant | paired, per round | paired median | ratio of medians, per round | " +
              ("fastest over fastest, per round | " if best_of else "") + " | ".join(tail_heads) + " |")
        print("|---|---|---:|---|" + ("---|" if best_of else "") + "---:|" * len(tail_keys))
        for v in VARIANTS + sorted(set(by_variant) - set(VARIANTS)):
            rows = by_variant.get(v)
            if not rows:
                continue
            per = lambda k: ", ".join(format(r[k], fmt) for r in rows)
            fast = f"{per(key + '_best')} | " if best_of else ""
            tail = " | ".join(format(med(rows, k), ".0f" if k.endswith("_ms") else ".1f") for k in tail_keys)
            print(f"| {v} | {per(key + '_paired')} | {med_fmt.format(med(rows, key + '_paired'))} | {per(key)} | "
                  f"{fast}{tail} |")

    # The thread-scaling bar measured step by step: BM_ThreadPair alternates one
    # variant's step on one thread and on all threads in one loop.
    scaling = {k[0]: rows for k, rows in per_round("BM_ThreadPair/", "speedup_paired", 1).items()}
    if scaling:
        n = max(int(r.get("omp_threads", 2)) for rows in scaling.values() for r in rows)
        print(f"\n### Thread scaling step by step (BM_ThreadPair: one-thread and {n}-thread steps alternated "
              "in one loop)\n")
        variant_pair_table(scaling, "speedup", ".2f", "{:.3f}×",
                           f"the median of each one-thread step over the {n}-thread step just after it",
                           "the two median steps",
                           "the fastest one-thread step over the fastest all-thread step",
                           ["1 thread ms", f"{n} threads ms"], ["one_ms", "all_ms"])

    # The ceiling bar measured step by step: BM_CeilingPair alternates one
    # variant's step and OpenBLAS's SGEMM 1024³ in one loop.
    ceil_pairs = {k[0]: rows for k, rows in per_round("BM_CeilingPair/", "of_ceiling_paired", 1).items()}
    if ceil_pairs:
        print("\n### Ceiling step by step (BM_CeilingPair: the step and OpenBLAS's SGEMM 1024³ alternated in one loop)\n")
        variant_pair_table(ceil_pairs, "of_ceiling", ".0%", "{:.1%}",
                           "the median of each step's GFLOP/s over the SGEMM's just before it",
                           "the two medians",
                           "the fastest step's GFLOP/s over the fastest SGEMM's",
                           ["step GFLOP/s", "SGEMM GFLOP/s"], ["step_gflops", "sgemm_gflops"])

    # What the PyTorch speed bars ask of the whole step, in the units of the ceiling
    # and the peak: the step's FLOPs over the bar's time.
    if best:
        print("\n### What the PyTorch bars ask of the whole step\n")
        print("| variant | bar | PyTorch best ms | PASSIVE ms | bar's ms | needs GFLOP/s | of ceiling | of peak | "
              "now, of peak | now × PASSIVE |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for v, bar in (("gpt", 1.5), ("ngpt", 1.8)):
            r = nl.get(f"BM_TrainStep/{v}/reference")
            if not r or v not in best:
                continue
            gflop = r["gflops"] * r["ms"] * 1e-3
            need_ms = best[v] / bar
            need = gflop / (need_ms * 1e-3)
            passive = torch.get((v, "PASSIVE"))
            of_peak = f"{need / peak:.0%}" if peak else ""
            now_peak = f"{r['gflops'] / peak:.0%}" if peak else ""
            px = f"{passive / r['ms']:.2f}×" if passive else ""
            pms = f"{passive:.0f}" if passive else ""
            print(f"| {v} | {bar}× | {best[v]:.0f} | {pms} | {need_ms:.0f} | {need:.1f} | "
                  f"{need / ceiling:.0%} | {of_peak} | {now_peak} | {px} |")

    # Per round, so a slow episode on a shared host shows as what it is: the
    # multiple each round's own normlab and PyTorch figures give.
    per_round = {}
    def round_of(path):
        return int(os.path.basename(path)[len("normlab-r"):-len(".json")])
    for path in sorted(glob.glob(os.path.join(out, "normlab-r*.json")), key=round_of):
        rnd = str(round_of(path))
        one = bench_medians(load(path))
        for v in ("gpt", "ngpt"):
            torch_ms = [r["median_ms"] for pol in ("PASSIVE", "default")
                        for r in load(os.path.join(out, f"torch-{v}-{pol}-r{rnd}.json"))]
            step = one.get(f"BM_TrainStep/{v}/reference")
            if step and torch_ms:
                per_round.setdefault(v, []).append((rnd, step["ms"], min(torch_ms)))
    if per_round:
        print("\n### Per round (normlab's step and the same round's faster PyTorch policy)\n")
        print("| variant | round | normlab ms | PyTorch ms | × PyTorch |")
        print("|---|---:|---:|---:|---:|")
        for v, rows in per_round.items():
            for rnd, ms, tms in rows:
                print(f"| {v} | {rnd} | {ms:.0f} | {tms:.0f} | {tms / ms:.2f}× |")

    for cfg, title in (("larger", "Larger config (d=512, L=6, H=8, T=512, B=4)"),
                       ("long", "Long context (d=256, L=4, H=4, T=1024, B=2)")):
        print(f"\n## {title}\n")
        print("| variant | ms | GFLOP/s | of ceiling |")
        print("|---|---:|---:|---:|")
        for v in VARIANTS:
            r = nl.get(f"BM_TrainStep/{v}/{cfg}")
            if r:
                print(f"| {v} | {r['ms']:.0f} | {r['gflops']:.1f} | {r['gflops'] / ceiling:.0%} |")

    print("\n## Attention alone (B=8, H=4, dk=64; causal FLOPs counted once)\n")
    print("| T | forward GFLOP/s | backward GFLOP/s | of ceiling (fwd / bwd) |")
    print("|---:|---:|---:|---:|")
    for T in (256, 1024, 2048):
        f, b = nl.get(f"BM_Attention/{T}/0"), nl.get(f"BM_Attention/{T}/1")
        if f and b:
            print(f"| {T} | {f['gflops']:.1f} | {b['gflops']:.1f} | {f['gflops'] / ceiling:.0%} / {b['gflops'] / ceiling:.0%} |")

    print("\n## One competing busy process (reference config, step ms)\n")
    print("(alone: 2 threads; the slowdown is against that)\n")
    print("| OpenMP wait | variant | alone | with a busy process | slowdown |")
    print("|---|---|---:|---:|---:|")
    for pol in ("default", "PASSIVE", "spin1000"):
        alone = bench_medians(load(os.path.join(out, f"contention-{pol}-alone-t2-r*.json")))
        for threads in (2, 1):
            busy = bench_medians(load(os.path.join(out, f"contention-{pol}-busy-t{threads}-r*.json")))
            for v in ("gpt", "ngpt", "angpt"):
                a, b = alone.get(f"BM_TrainStep/{v}/reference"), busy.get(f"BM_TrainStep/{v}/reference")
                if a and b:
                    name = {"default": "libgomp's default (spin 300000)", "PASSIVE": "OMP_WAIT_POLICY=PASSIVE",
                            "spin1000": "GOMP_SPINCOUNT=1000 (trainers)"}[pol]
                    label = name if threads == 2 else f"{name}, 1 thread beside the busy process"
                    print(f"| {label} | {v} | {a['ms']:.0f} | {b['ms']:.0f} | {b['ms'] / a['ms']:.2f}× |")


if __name__ == "__main__":
    main()
