#!/usr/bin/env bash
# model_flags.sh TRAIN_NGPT TRAIN_ANGPT TRAIN_GPT WORKDIR: --alpha-init and anGPT's factor
# multipliers reach the model: the checkpoint records them, and the run's losses move
# away from the default run's; a variant with nothing to apply them to refuses them
# (exit 2 and a sentence), rather than ignoring them.
set -euo pipefail
ngpt=$1 angpt=$2 gpt=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
common=(--data synthetic --steps 4 --d 64 --layers 2 --heads 2 --seq 32 --batch 4 --eval-every 2
        --eval-batches 1 --ckpt-every 0 --threads 2 --quiet)
"$ngpt" "${common[@]}" --out "$work/ngpt"
"$ngpt" "${common[@]}" --out "$work/ngpt_a" --alpha-init 0.25
"$angpt" "${common[@]}" --out "$work/angpt"
"$angpt" "${common[@]}" --out "$work/angpt_f" --angpt-attn-factor 0.5 --angpt-mlp-factor 2
"$angpt" "${common[@]}" --out "$work/angpt_r" --angpt-residual-factor 0.5
python3 - "$work" <<'PY'
import json, struct, sys
w = sys.argv[1]
def meta(run):
    with open(f"{w}/{run}/ckpt.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))["__metadata__"]
def losses(run):
    return [json.loads(l)["train_loss"] for l in open(f"{w}/{run}/metrics.jsonl") if "train_loss" in l]
assert float(meta("ngpt_a")["alpha_init"]) == 0.25 and float(meta("ngpt")["alpha_init"]) == 0.05
m = meta("angpt_f")
assert float(m["angpt_attn_factor_mult"]) == 0.5 and float(m["angpt_mlp_factor_mult"]) == 2.0, m
assert float(m["angpt_residual_factor_mult"]) == 1.0, m
assert float(meta("angpt_r")["angpt_residual_factor_mult"]) == 0.5, meta("angpt_r")
# The first step's loss is the same function of the same init where only alpha or a factor after
# the first forward differs; by the last step the runs must have parted.
assert losses("ngpt_a")[-1] != losses("ngpt")[-1], (losses("ngpt_a"), losses("ngpt"))
assert losses("angpt_f")[-1] != losses("angpt")[-1], (losses("angpt_f"), losses("angpt"))
assert losses("angpt_r")[-1] != losses("angpt")[-1], (losses("angpt_r"), losses("angpt"))
print("alpha0 and anGPT's factors recorded and effective")
PY
for args in "$gpt --alpha-init 0.2" "$ngpt --angpt-mlp-factor 2" "$gpt --angpt-attn-factor 0.5" \
            "$ngpt --angpt-residual-factor 2"; do
  set +e; $args "${common[@]}" --out "$work/refused" 2> "$work/err.txt"; rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "$args: exit $rc, expected 2"; exit 1; }
  grep -q "has no" "$work/err.txt" || { echo "$args: no sentence:"; cat "$work/err.txt"; exit 1; }
done
echo "model flags: all checks passed"
