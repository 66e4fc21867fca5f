#!/usr/bin/env bash
# The issue-22 runs (Compactor, D2O, GVote, UNComp as their papers define them, beside the official
# presets), on the v7s1 testbed model; 2 cores. Usage: bash docs/results/issue22-fidelity/run.sh [STEP...]
# Steps: compactor calib-compactor d2o-ppl retrieval uncomp-calib uncomp uncomp-b (default: all).
set -euo pipefail
cd "$(dirname "$0")/../../.."
K=build/tools/kvshrink
M=testbed/models/v7s1/model-f16.gguf
OUT=docs/results/issue22-fidelity
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(compactor calib-compactor d2o-ppl retrieval uncomp-calib uncomp uncomp-b)
RET=niah,ruler_niah_single_2,ruler_niah_multikey_1,ruler_niah_multiquery
for s in "${steps[@]}"; do
  case "$s" in
    compactor)  # paper preset, paper without pooling, official preset (NIAH n = 88 per cell as the v7 report)
      $K eval -m $M --tasks $RET --presses full,compactor,compactor:pool=1,compactor:preset=official \
        --keep 1,0.5,0.25,0.1 --samples 4 --lengths 512,1024 -t 1 -o $OUT/compactor-v7s1 ;;
    calib-compactor)  # the log-space fit with held-out task families (calibration file kept beside the results)
      KVSHRINK_CALIB_DIR=$OUT/calib $K calibrate -m $M --press quality --opt press=compactor \
        --opt tasks=niah,ruler_niah_single_2,ruler_niah_multikey_1,ruler_vt,squad_multi ;;
    d2o-ppl)  # streamed perplexity, per-token eviction (the paper's generation setting)
      $K eval -m $M --tasks ppl_pg19,ppl_wikitext2 --ppl-chunk 1 --samples 8 --lengths 1024 \
        --presses full,h2o,streaming_llm,d2o,d2o:merge_mass=false,d2o:density=minmax,d2o:preset=official \
        --keep 1,0.5,0.25,0.1 -t 1 -o $OUT/d2o-ppl-v7s1 ;;
    retrieval)  # GVote (adaptive) and D2O on NIAH + RULER, query-agnostic
      $K eval -m $M --tasks $RET --samples 8 --lengths 1024 \
        --presses full,gvote,gvote:p_nuc=0.99,gvote:samples=32,d2o,d2o:preset=official \
        --keep 1,0.75,0.5,0.25 -t 1 -o $OUT/retrieval-v7s1 ;;
    uncomp-calib)  # both presets' calibrations, each in its own folder
      KVSHRINK_CALIB_DIR=$OUT/calib $K calibrate -m $M --press uncomp
      KVSHRINK_CALIB_DIR=$OUT/calib-uncomp-official $K calibrate -m $M --press uncomp --opt preset=official ;;
    uncomp)  # query-agnostic, paper preset (group, group-stage) and the official press options
      KVSHRINK_CALIB_DIR=$OUT/calib $K eval -m $M --tasks $RET --samples 12 --lengths 1024 \
        --presses full,snapkv:window_size=8,uncomp,uncomp:variant=group-stage,uncomp:variant=group-stage:layer_groups=0/1/2/3,uncomp:preset=official \
        --keep 1,0.5,0.25,0.1 -t 1 -o $OUT/uncomp-v7s1 ;;
    uncomp-b)  # query-aware group-stage at -b 512 and -b 4096 on the same samples: identical results
      for b in 512 4096; do
        KVSHRINK_CALIB_DIR=$OUT/calib $K eval -m $M --query-aware --tasks niah,ruler_niah_multikey_1 --samples 3 \
          --lengths 1024 -b $b --presses full,uncomp:variant=group-stage:layer_groups=0/1/2/3 --keep 0.5,0.25 -t 1 \
          -o $OUT/uncomp-query-aware-b$b
      done ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
