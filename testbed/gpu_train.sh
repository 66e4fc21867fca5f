#!/bin/bash
# Train the v8 testbed models (v8s1, v8s2) side by side on one lent GPU, in one device call.
#
#   run(command="bash testbed/gpu_train.sh", carry=["testbed/runs/cache", ".devtrain"], timeout_s=570)
#
# What travels: the repository (without testbed/models, over the 64 MiB limit: see testbed/README.md),
# the tokenized-document cache testbed/runs/cache (built here by any testbed command) and
# .devtrain/shared/data/ruler/wonderwords (the word lists; ../shared does not travel).
# Steps, each timed into the log:
#   1. testbed.speed on the GPU: checks the fused attention (sdpa) against the explicit one and measures
#      the v8 curriculum's time per step;
#   2. picks --steps-scale (the v8 phases stretched to fill TRAIN_BUDGET_S, 1..MAX_SCALE, in halves);
#   3. trains both seeds at once (DATA_WORKERS processes each build the batches ahead), --max-minutes as
#      a guard;
#   4. exports both (F16 HF directories) and evaluates them (testbed.evaluate, n = 50, every length);
#   5. packs runs' logs/metrics, the exports and the evals into $OUT/v8.tgz.part-* (15 MiB pieces: the
#      device returns files of at most 16 MiB).
# Unpack here: cat <files_at>/v8.tgz.part-* | tar xzf - -C <dir>   (gives <dir>/gpu_out/v8s1, v8s2)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PYTHONUNBUFFERED=1 KVSHRINK_SHARED=${KVSHRINK_SHARED:-$PWD/.devtrain/shared}
OUT=${OUT:-/tmp/gpu_train_out}
mkdir -p "$OUT"
PY=${PY:-python3}
TRAIN_BUDGET_S=${TRAIN_BUDGET_S:-330}
MAX_SCALE=${MAX_SCALE:-4}
DATA_WORKERS=${DATA_WORKERS:-6}
SEEDS=${SEEDS:-"1 2"}
RUN_PREFIX=${RUN_PREFIX:-v8s}   # runs testbed/runs/<prefix><seed>
SHAPE=${SHAPE:-"--layers 8 --hidden 384 --ffn 1024 --heads 6 --kv-heads 3"}
CURRICULUM=${CURRICULUM:-v8}
DEVICE=${DEVICE:-cuda}           # DEVICE=cpu with a small SHAPE and CURRICULUM=tiny_v8: a check of this script
SPEED_LENGTHS=${SPEED_LENGTHS:-128,256,512,1024,2048}
EVAL_N=${EVAL_N:-50}
EVAL_LENGTHS=${EVAL_LENGTHS:-128,256,512,1024,2048}
WORK=testbed/runs/gpu_out
rm -rf "$WORK"; mkdir -p "$WORK"

el "machine"; nvidia-smi -L; nproc; $PY -c "import torch; print('torch', torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(0))"

el "1. speed probe"
$PY -m testbed.speed $SHAPE --device $DEVICE --lengths $SPEED_LENGTHS --steps 5 --curriculum $CURRICULUM \
    2>&1 | tee "$WORK/speed.txt"
EST=$(awk '/^estimate_seconds/ {print $2}' "$WORK/speed.txt")
if grep -q "^sdpa ok" "$WORK/speed.txt"; then unset TESTBED_NO_SDPA; else export TESTBED_NO_SDPA=1; fi

el "2. steps scale"
SCALE=$($PY - "$EST" "$TRAIN_BUDGET_S" "$MAX_SCALE" "$DATA_WORKERS" "$CURRICULUM" <<'EOF'
import sys
from testbed import curriculum as C
est, budget, max_scale, workers = float(sys.argv[1] or 1e9), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
steps = C.total_steps(C.CURRICULA[sys.argv[5]])
gpu = est / steps * 1.5          # two runs share the GPU (their small kernels interleave; 1.5x assumed)
data = 0.12 / max(1, workers)    # ~0.1 s of CPU per batch (measured on the 2-core machine)
per_step = max(gpu, data) + 0.004
evals = 40.0                     # five phase-end evals, n = 16, every length
s = (budget - evals) / (steps * per_step)
s = max(1.0, min(max_scale, int(s * 2) / 2))
print(s)
EOF
)
el "scale $SCALE (curriculum estimate ${EST}s for one run alone)"

el "3. train seeds $SEEDS"
for s in $SEEDS; do
    mkdir -p testbed/runs/${RUN_PREFIX}$s
    $PY -m testbed.train --run ${RUN_PREFIX}$s --curriculum $CURRICULUM --seed $s $SHAPE --device $DEVICE --data-workers $DATA_WORKERS \
        --steps-scale "$SCALE" --eval-every 0 --eval-n 16 --ckpt-minutes 2 \
        --max-minutes $(( (TRAIN_BUDGET_S + 90) / 60 )) > testbed/runs/${RUN_PREFIX}$s/log.txt 2>&1 &
done
wait
for s in $SEEDS; do tail -n 3 testbed/runs/${RUN_PREFIX}$s/log.txt; done

el "4. export + evaluate"
for s in $SEEDS; do
    $PY -m testbed.export --ckpt testbed/runs/${RUN_PREFIX}$s/ckpt_last.pt --out "$WORK/${RUN_PREFIX}$s" --dtype f16 --name ${RUN_PREFIX}$s
    $PY -m testbed.evaluate --hf "$WORK/${RUN_PREFIX}$s" --n $EVAL_N --device $DEVICE --lengths $EVAL_LENGTHS \
        > "$WORK/${RUN_PREFIX}$s/eval_n50.json" 2> "$WORK/${RUN_PREFIX}$s/eval_n50.err" &
done
wait
for s in $SEEDS; do
    cp testbed/runs/${RUN_PREFIX}$s/log.txt testbed/runs/${RUN_PREFIX}$s/metrics.jsonl testbed/runs/${RUN_PREFIX}$s/args.json "$WORK/${RUN_PREFIX}$s/" 2>/dev/null
    $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1], {k: v for k, v in r.items() if '@' in k and not k.endswith('examples')})" \
        "$WORK/${RUN_PREFIX}$s/eval_n50.json" || tail -5 "$WORK/${RUN_PREFIX}$s/eval_n50.err"
done

el "5. pack"
tar czf - -C testbed/runs gpu_out | split -b 15M -d - "$OUT/v8.tgz.part-"
ls -la "$OUT"
el "done"
