#!/usr/bin/env bash
# precision.sh TRAINER WORKDIR: --precision on a trainer.
#  * a bf16 run says so in its header and summary.json, and (where the CPU has
#    AVX-512 BF16) its losses differ from the fp32 run's: the flag reaches the products;
#  * its checkpoint holds float32 master weights: stopped at step 6 in bf16, it
#    resumes in fp32 (and records that the last stretch ran in fp32);
#  * an unknown precision is refused with exit 2 and a sentence.
set -euo pipefail
exe=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
common=(--data synthetic --steps 12 --d 64 --layers 2 --heads 2 --seq 32 --batch 4 --eval-every 4
        --eval-batches 1 --ckpt-every 0 --threads 2)
"$exe" "${common[@]}" --out "$work/fp32" --quiet
"$exe" "${common[@]}" --out "$work/bf16" --precision bf16 > "$work/bf16.log"
grep -q "^precision: bf16 (" "$work/bf16.log" || { echo "no precision line in the bf16 run's header"; exit 1; }
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
s16, s32 = (json.load(open(f"{w}/{p}/summary.json")) for p in ("bf16", "fp32"))
assert s16["precision"]["name"] == "bf16" and s32["precision"]["name"] == "fp32", (s16["precision"], s32["precision"])
l16 = [json.loads(l)["train_loss"] for l in open(f"{w}/bf16/metrics.jsonl")]
l32 = [json.loads(l)["train_loss"] for l in open(f"{w}/fp32/metrics.jsonl")]
if "BF16 kernels" in s16["precision"]["engine"]:
    assert l16 != l32, "bf16 gave the fp32 run's losses: the precision did not reach the products"
    # The same run in another rounding: the losses stay close (bf16 moves a product by <= 2^-7 relative).
    assert all(abs(a - b) <= 0.02 * b for a, b in zip(l16, l32)), list(zip(l16, l32))
else:
    print("this CPU has no AVX-512 BF16: bf16 ran on the float32 engine, as its header says:", s16["precision"]["engine"])
print("bf16 and fp32 runs recorded their precision")
PY
"$exe" "${common[@]}" --out "$work/switch" --precision bf16 --stop-at 6 --quiet
"$exe" "${common[@]}" --out "$work/switch" --resume --quiet
python3 - "$work" <<'PY'
import json, struct, sys
w = sys.argv[1]
with open(f"{w}/switch/ckpt.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
assert meta["train.precision"] == "fp32", meta.get("train.precision")
assert meta["train.steps_done"] == "12", meta["train.steps_done"]
assert json.load(open(f"{w}/switch/summary.json"))["precision"]["name"] == "fp32"
print("a bf16 checkpoint resumed in fp32")
PY
set +e
out=$("$exe" "${common[@]}" --out "$work/bad" --precision fp16 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "expected exit 2 for --precision fp16, got $rc: $out"; exit 1; }
grep -q -- "--precision" <<<"$out" || { echo "the refusal does not name --precision: $out"; exit 1; }
echo "precision: recorded, switchable on resume, bad values refused"
