#!/usr/bin/env bash
# Issue 18's figures, side by side in one run (docs/perf.md, "Anchors"):
#  - the cores' arithmetic peak (BM_FmaPeak), the machine's best SGEMM (OpenBLAS
#    1024³, called directly) and cpu::gemm's;
#  - every variant's step at the reference, larger and long (T = 1024) configs,
#    and on one thread; attention alone at T = 256, 1024, 2048;
#  - ngpt/gpt and angpt/gpt with the two steps alternated in one loop (BM_StepPair),
#    every variant's step on one thread and on two, alternated (BM_ThreadPair), and
#    every variant's step and OpenBLAS's SGEMM 1024³, alternated (BM_CeilingPair);
#  - the PyTorch reference step (bench/torch_reference.py) for gpt and ngpt, with
#    OMP_WAIT_POLICY=PASSIVE and with OpenMP's default, OpenBLAS's OpenMP build;
#  - the step with one competing busy process, under OpenMP's default wait, PASSIVE
#    and GOMP_SPINCOUNT=1000 (the trainers' default), and on one thread beside it.
# Rounds alternate the programs (rotating order), so drift on a shared host hits
# all of them alike; medians over rounds. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are
# unset in these commands only, so OpenBLAS picks its best kernels for the CPU.
#
#   ROUNDS=3 bash scripts/bench-anchors.sh      → runs/anchors/summary.md
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BUILD_DIR=${BUILD_DIR:-build-bench}
OUT=${OUT:-runs/anchors}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}   # Debian's interpreter, where python3-torch lives

bash scripts/bootstrap.sh
if ! "$TORCH_PY" -c "import torch" 2>/dev/null; then
  echo "bench-anchors: installing python3-torch (the PyTorch anchor)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-torch >/dev/null
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_BUILD_BENCH=ON -DNORMLAB_BLAS=ON >/dev/null
cmake --build "$BUILD_DIR" --target normlab_bench -j 2 >/dev/null
BENCH="$BUILD_DIR/bench/normlab_bench"
rm -rf "$OUT" && mkdir -p "$OUT"

blas_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
# PyTorch's libblas.so.3 resolved to OpenBLAS's OpenMP build, whatever the
# system's alternative points at: one OpenMP runtime, no second thread pool.
torch_env=("${blas_env[@]}" LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp)

normlab_all() {  # $1 = round; OpenMP as the trainers run it (GOMP_SPINCOUNT=1000 unless the user chose)
  "${blas_env[@]}" GOMP_SPINCOUNT=1000 "$BENCH" --benchmark_filter='BM_FmaPeak|BM_GemmCeiling/1024|BM_OpenBlasSgemm/1024|BM_TrainStep/|BM_StepPair/|BM_ThreadPair/|BM_CeilingPair/|BM_Attention/(256|1024|2048)/' \
    --benchmark_repetitions=1 --benchmark_enable_random_interleaving=true \
    --benchmark_format=json >"$OUT/normlab-r$1.json" 2>/dev/null
}
torch_step() {  # $1 = round, $2 = variant, $3 = PASSIVE | default
  local pol=()
  [ "$3" = PASSIVE ] && pol=(OMP_WAIT_POLICY=PASSIVE)
  "${torch_env[@]}" "${pol[@]}" "$TORCH_PY" bench/torch_reference.py --variant "$2" --threads 2 --steps 12 \
    >"$OUT/torch-$2-$3-r$1.json"
}
busy() { while :; do :; done; }
contended() {  # $1 = round, $2 = wait (default | PASSIVE | ACTIVE | spin1000), $3 = alone | busy, $4 = threads
  local pol=() pid=""
  case $2 in
    spin1000) pol=(GOMP_SPINCOUNT=1000) ;;
    default) ;;
    *) pol=(OMP_WAIT_POLICY="$2") ;;
  esac
  pol+=(OMP_NUM_THREADS="${4:-2}")
  if [ "$3" = busy ]; then busy & pid=$!; fi
  "${blas_env[@]}" "${pol[@]}" "$BENCH" --benchmark_filter='BM_TrainStep/(gpt|ngpt|angpt)/reference/' \
    --benchmark_repetitions=1 --benchmark_format=json >"$OUT/contention-$2-$3-t${4:-2}-r$1.json" 2>/dev/null
  if [ -n "$pid" ]; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
}

jobs_list=(normlab "torch gpt PASSIVE" "torch ngpt PASSIVE" "torch gpt default" "torch ngpt default"
           "contended default alone" "contended default busy" "contended PASSIVE alone" "contended PASSIVE busy"
           "contended spin1000 alone" "contended spin1000 busy" "contended spin1000 busy 1")
n=${#jobs_list[@]}
for ((r = 1; r <= ROUNDS; ++r)); do
  for ((o = 0; o < n; ++o)); do
    job=${jobs_list[$(((o + r - 1) % n))]}
    echo "bench-anchors: round $r/$ROUNDS: $job ($(date -u +%H:%M:%S))" >&2
    case $job in
      normlab) normlab_all "$r" ;;
      torch*) set -- $job; torch_step "$r" "$2" "$3" ;;
      contended*) set -- $job; contended "$r" "$2" "$3" "${4:-2}" ;;
    esac
  done
done
python3 scripts/anchors-summary.py "$OUT" | tee "$OUT/summary.md"
