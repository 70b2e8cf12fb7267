#!/usr/bin/env bash
# tokenize.sh NORMLAB_TOKENIZE TRAINER WORKDIR: subword tokens end to end.
#  * normlab-tokenize trains a BPE model on a text (the GPL-3 and Apache-2.0
#    licence texts Debian ships: real English the tests use nowhere else) and
#    writes tokenizer.model, train.bin, val.bin;
#  * the trainer finds the vocabulary in the directory, trains 30 steps with
#    falling loss, names the tokenizer in its checkpoint; --sample decodes text
#    through it (valid UTF-8, words with spaces);
#  * a vocabulary over 65,536, an empty file, a model file that is not
#    SentencePiece, and a --vocab that disagrees with the model: exit 2 and a sentence.
set -euo pipefail
tokenize=$1 exe=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
text="$work/licences.txt"
cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 > "$text"
"$tokenize" --input "$text" --vocab 1024 --out "$work/bpe" | tee "$work/tokenize.log"
for f in tokenizer.model train.bin val.bin; do [ -s "$work/bpe/$f" ] || { echo "no $f written"; exit 1; }; done
common=(--data "$work/bpe" --d 64 --layers 2 --heads 2 --seq 64 --batch 8 --lr 3e-3 --eval-every 10
        --eval-batches 2 --ckpt-every 0 --threads 2)
"$exe" "${common[@]}" --out "$work/run" --steps 30 > "$work/train.log"
grep -q "vocab 1024" "$work/train.log" || { echo "the run's header does not name the 1024-piece vocabulary"; cat "$work/train.log"; exit 1; }
"$exe" --sample "$work/run/ckpt.safetensors" --prompt "the " --tokens 40 --temperature 0.8 > "$work/sample.txt"
python3 - "$work" <<'PY'
import json, struct, sys
w = sys.argv[1]
m = [json.loads(l) for l in open(f"{w}/run/metrics.jsonl")]
first, last = m[0]["train_loss"], m[-1]["train_loss"]
# ln(1024) = 6.93 at the start; 30 steps at 3e-3 fall well below it.
assert last < first - 0.5, (first, last)
with open(f"{w}/run/ckpt.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
assert meta["data.tokenizer"].endswith("bpe/tokenizer.model"), meta.get("data.tokenizer")
raw = open(f"{w}/sample.txt", "rb").read()
text = raw.decode("utf-8")  # raises on invalid UTF-8
assert text.startswith("the ") and len(text) > 60 and text.count(" ") >= 5, text
assert sum(c.isalpha() for c in text) > len(text) // 2, text
print(f"train loss {first:.3f} -> {last:.3f}; sample: {text[:80]!r}")
PY
expect_refusal() {  # expect_refusal WHAT PATTERN COMMAND...: exit 2 and the pattern on stderr
  local what=$1 pattern=$2; shift 2
  set +e; "$@" > "$work/out.txt" 2> "$work/err.txt"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "$what: exit $rc, expected 2"; cat "$work/err.txt"; exit 1; }
  grep -q -- "$pattern" "$work/err.txt" || { echo "$what: no '$pattern' in:"; cat "$work/err.txt"; exit 1; }
}
expect_refusal "vocab over 65536" "--vocab" "$tokenize" --input "$text" --vocab 70000 --out "$work/x"
: > "$work/empty.txt"
expect_refusal "empty input" "empty.txt is empty" "$tokenize" --input "$work/empty.txt" --out "$work/x"
mkdir -p "$work/bogus" && cp "$work/bpe/train.bin" "$work/bpe/val.bin" "$work/bogus/"
echo "not a model" > "$work/bogus/tokenizer.model"
expect_refusal "bogus model" "is not a SentencePiece model" "$exe" "${common[@]}" --data "$work/bogus" --steps 2 --out "$work/bad1"
expect_refusal "vocab mismatch" "disagrees" "$exe" "${common[@]}" --vocab 2048 --steps 2 --out "$work/bad2"
echo "tokenize: all checks passed"
