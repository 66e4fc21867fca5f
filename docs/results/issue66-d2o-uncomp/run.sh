#!/usr/bin/env bash
# Re-runs after issue 66 (D2O's min-max default and official preset; UNComp's Eq. 8 layer groups),
# on the v8s1 testbed model (head_dim 64). Run on the shared 2-core
# machine; the reports are summarised in docs/results/issue66-d2o-uncomp/README.md. KVS=path picks the binary.
# Usage: bash docs/results/issue66-d2o-uncomp/run.sh [STEP...]
# Steps: d2o-ppl d2o-grid uncomp-grid uncomp-speed gvote-qa (default: all).
set -euo pipefail
cd "$(dirname "$0")/../../.."
K="nice -n 19 ${KVS:-build/tools/kvshrink}"
M=testbed/models/v8s1
OUT=docs/results/issue66-d2o-uncomp
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(d2o-ppl d2o-grid uncomp-grid uncomp-speed gvote-qa)
RET=niah,ruler_niah_single_2,ruler_niah_multikey_1,ruler_niah_multiquery
for s in "${steps[@]}"; do
  case "$s" in
    d2o-ppl)  # streamed PG-19 beside H2O (per-token eviction), both presets and the literal density
      $K eval -m $M --tasks ppl_pg19 --data tests/data/eval --ppl-chunk 1 --samples 4 --lengths 1024 \
        --presses full,h2o,d2o,d2o:density=raw,d2o:preset=official \
        --keep 1,0.5,0.25,0.1 -t 1 -o $OUT/d2o-ppl-v8s1 ;;
    d2o-grid)  # the v8 retrieval grid, both presets (measured_keep shows what preset=official holds)
      $K eval -m $M --tasks $RET --samples 4 --lengths 1024 \
        --presses full,h2o,d2o,d2o:preset=official --keep 1,0.5,0.25 -t 1 -o $OUT/d2o-grid-v8s1 ;;
    uncomp-grid)  # group-stage with the committed (Eq. 8) layer groups: five groups on v8s1
      $K eval -m $M --tasks $RET --samples 4 --lengths 1024 \
        --presses full,snapkv:window_size=8,uncomp,uncomp:variant=group-stage \
        --keep 1,0.5,0.25 -t 1 -o $OUT/uncomp-grid-v8s1 ;;
    uncomp-speed)  # prefill time of group-stage vs group at the same settings, accuracy beside it
      $K eval -m $M --tasks niah --samples 4 --lengths 1024 \
        --presses uncomp,uncomp:variant=group-stage --keep 0.5 -t 2 -o $OUT/uncomp-speed-v8s1 ;;
    gvote-qa)  # GVote's claim is query-aware: the question in the prompt, GVote choosing its keep,
               # SnapKV / KVzip at fixed keeps beside it; memory columns are the answering compression's
      $K eval -m $M --tasks $RET --samples 4 --lengths 1024 --query-aware \
        --presses full,snapkv,kvzip,gvote --keep 1,0.75,0.5,0.25 -t 1 -o $OUT/gvote-qa-v8s1 ;;
    *) echo "unknown step $s" >&2; exit 1 ;;
  esac
done
