"""Packaging and hosting setup (issue 15).

- pyproject.toml is the package's one description; requirements*.txt repeat its pins
  (a Space builds from requirements.txt alone) and must never drift from it.
- A wheel built from the checkout ships every package and the files an installed
  package reads at run time (suites, prompts, acceptance vectors, every draft-*/ folder),
  and an installed copy, away from the checkout, finds them and answers `specviz --help`.
- The Space's front matter preloads only public models; gated ones need an HF_TOKEN.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from helpers import package_source

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# What an installed package reads from assets/ (assets/bench holds the README's reports: not shipped).
RUNTIME_ASSETS = ("acceptance/*.json", "prompts/*.jsonl", "suites/*.jsonl", "draft-*/*")


def requirement_lines(name: str) -> list[str]:
    lines = []
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def runtime_asset_files() -> list[Path]:
    files = [p for pattern in RUNTIME_ASSETS for p in (ROOT / "assets").glob(pattern) if p.is_file()]
    assert files
    return sorted(files)


# ---------------------------------------------------------------------------- the description


def _pinned(lines: list[str]) -> dict[str, str]:
    """name -> its version specifier ("" when unpinned)."""
    from packaging.requirements import Requirement

    return {r.name: str(r.specifier) for r in map(Requirement, lines)}


def test_requirement_files_repeat_the_pyproject_pins_with_their_own_torch():
    # The Space (requirements.txt) and a local setup (requirements-local.txt) differ only in torch,
    # and pyproject.toml, which a `pip install .` reads, accepts both.
    from packaging.specifiers import SpecifierSet

    space, local = (_pinned(requirement_lines(name)) for name in ("requirements.txt", "requirements-local.txt"))
    project = _pinned(PYPROJECT["project"]["dependencies"])
    torch_range = SpecifierSet(project.pop("torch"))
    assert all(pins.pop("torch").removeprefix("==") in torch_range for pins in (space, local))
    assert space == local == project


def test_requirements_dev_is_the_local_setup_plus_the_dev_extra():
    lines = requirement_lines("requirements-dev.txt")
    assert lines[0] == "-r requirements-local.txt"
    assert lines[1:] == PYPROJECT["project"]["optional-dependencies"]["dev"]


def test_extras_and_console_command():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(extras) == {"dev", "space", "llama-cpp"} and "spaces" in extras["space"]
    # llama.cpp is built from source with setup.sh's flags, so its version is pinned: a new one is a new build.
    assert len(extras["llama-cpp"]) == 1 and Requirement(extras["llama-cpp"][0]).name == "llama-cpp-python"
    assert str(Requirement(extras["llama-cpp"][0]).specifier).startswith("==")
    assert 'LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF' in (ROOT / "scripts" / "setup.sh").read_text()
    # `specviz ...` runs what `python -m specviz ...` runs: specviz.cli.main, its exit code the status.
    assert PYPROJECT["project"]["scripts"] == {"specviz": "specviz.cli:main"}
    main_py = (ROOT / "specviz" / "__main__.py").read_text()
    assert "from .cli import main" in main_py and "sys.exit(main())" in main_py
    assert PYPROJECT["build-system"]["build-backend"] == "setuptools.build_meta"
    packages = PYPROJECT["tool"]["setuptools"]["packages"]
    assert isinstance(packages, dict) and "find" in packages, "use discovery, not a hand-kept list"


def test_torch_pins_are_pypis_builds_and_the_space_one_is_on_zerogpus_list():
    from specviz.hosting import ZEROGPU_SUPPORTED_TORCH

    space = [r for r in requirement_lines("requirements.txt") if r.startswith("torch")]
    assert space == ["torch==2.11.0"] and space[0].split("==")[1] in ZEROGPU_SUPPORTED_TORCH
    assert [r for r in requirement_lines("requirements-local.txt") if r.startswith("torch")] == ["torch==2.13.0"]
    for name in ("requirements.txt", "requirements-local.txt"):   # no +cpu local version, no CPU-only index
        assert not any(r.startswith(("--index-url", "--extra-index-url", "-f", "--find-links"))
                       for r in requirement_lines(name))


def test_assets_dir_in_the_checkout_is_the_repository_folder(monkeypatch):
    from specviz import paths

    monkeypatch.delenv("SPECVIZ_ASSETS", raising=False)
    assert paths.assets_dir() == (ROOT / "assets").resolve()
    monkeypatch.setenv("SPECVIZ_ASSETS", "/somewhere/else")
    assert paths.assets_dir() == Path("/somewhere/else")


# ---------------------------------------------------------------------------- a real wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout's package files (the checkout itself stays clean)."""
    base = tmp_path_factory.mktemp("wheel")
    src = package_source(base)
    assert (src / "specviz" / "assets").is_symlink()
    out = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(src)], check=True, cwd=base)
    (built,) = out.glob("specviz-*.whl")
    return built


def test_wheel_ships_every_module_and_the_runtime_assets(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "specviz").rglob("*.py")
               if "assets" not in p.relative_to(ROOT / "specviz").parts[:1]}
    assert modules - names == set(), "modules missing from the wheel"
    static = {p.relative_to(ROOT).as_posix() for p in (ROOT / "specviz" / "ui" / "static").iterdir()}
    assert static and static - names == set(), "the page's CSS and scripts missing from the wheel"
    shipped = {f"specviz/assets/{p.relative_to(ROOT / 'assets').as_posix()}" for p in runtime_asset_files()}
    assert shipped - names == set(), "runtime assets missing from the wheel"
    assert not any(n.startswith("specviz/assets/bench/") for n in names)
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    with zipfile.ZipFile(wheel) as zf:
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        metadata = zf.read(f"{dist_info}/METADATA").decode()
    assert re.search(r"^specviz = specviz\.cli:main$", entry_points, re.M)
    requires = re.findall(r"^Requires-Dist: ([^;\n]+)$", metadata, re.M)
    # Metadata may normalise names and reorder a specifier's clauses: compare them parsed.
    norm = lambda r: str(Requirement(r)).lower().replace("_", "-")   # noqa: E731
    assert [norm(r) for r in requires] == [norm(d) for d in PYPROJECT["project"]["dependencies"]]
    assert {"dev", "space"} <= set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M))


def test_installed_wheel_finds_its_assets_away_from_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPECVIZ_ASSETS")}
    env["PYTHONPATH"] = str(site)
    probe = (
        "import json, specviz, specviz.paths as paths\n"
        "from specviz.engine import models\n"
        "from specviz.engine.prompts import read_suites\n"
        "from specviz.sequoia.acceptance import ASSET_DIR\n"
        "print(json.dumps({'package': specviz.__file__, 'assets': str(paths.assets_dir()),\n"
        "  'draft': str(models.offline_default_draft_dir()), 'suites': len(read_suites('chat,code,math,rewrite')),\n"
        "  'feature': str(models.offline_feature_draft_dir()),\n"
        "  'acceptance': sorted(p.name for p in ASSET_DIR.glob('*.json'))}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(found["package"]).is_relative_to(site), found
    assert Path(found["assets"]) == site / "specviz" / "assets"
    assert Path(found["draft"]).is_relative_to(site) and (Path(found["draft"]) / "draft.safetensors").exists()
    assert found["suites"] > 0
    if (ROOT / "assets" / "draft-feature-smollm2-135m").is_dir():   # shipped since issue 13
        assert Path(found["feature"]).is_relative_to(site), found
    assert found["acceptance"] == sorted(p.name for p in (ROOT / "assets" / "acceptance").glob("*.json"))
    # The console command is python -m specviz.
    command = subprocess.run([str(site / "bin" / "specviz"), "--help"], env=env, cwd=tmp_path,
                             capture_output=True, text=True)
    module = subprocess.run([sys.executable, "-m", "specviz", "--help"], env=env, cwd=tmp_path,
                            capture_output=True, text=True)
    assert command.returncode == module.returncode == 0, command.stderr
    assert command.stdout == module.stdout and "fetch-model" in command.stdout


# ---------------------------------------------------------------------------- the Space


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n")
    block = text[4:text.index("\n---\n", 4)]
    meta, key = {}, None
    for line in block.splitlines():
        if line.startswith("  - "):
            meta[key].append(line[4:].strip())
        elif ":" in line:
            key, value = (s.strip() for s in line.split(":", 1))
            meta[key] = value.strip('"') if value else []
    return meta


def test_front_matter_preloads_exactly_the_public_preset_models():
    from specviz.hosting import GATED_MODEL_IDS, ZEROGPU_SUPPORTED_PYTHON
    from specviz.ui.layout import PRESETS

    meta = front_matter()
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert meta["python_version"] in ZEROGPU_SUPPORTED_PYTHON   # ZeroGPU builds only these (exact) versions
    assert f"gradio=={meta['sdk_version']}" in PYPROJECT["project"]["dependencies"]
    preload = meta["preload_from_hub"]
    assert not set(preload) & set(GATED_MODEL_IDS)
    public_pairs = [m for m in PRESETS.values() if not set(m) & set(GATED_MODEL_IDS)]
    hub_ids = {m for pair in public_pairs for m in pair if m and "/" in m}
    assert set(preload) == hub_ids


def test_gated_presets_need_a_token_and_the_page_says_so():
    from specviz.errors import InvalidInput
    from specviz.hosting import GATED_MODEL_IDS, HostingLimits
    from specviz.ui.layout import PRESETS, allowed_presets

    gated = [label for label, models in PRESETS.items() if set(models) & set(GATED_MODEL_IDS)]
    assert gated
    for env in ({}, {"SPACE_ID": "course/specviz"}):
        without = HostingLimits.from_env(env)
        assert not set(gated) & set(allowed_presets(without))
        assert "HF_TOKEN" in without.gated_notice()
        with pytest.raises(InvalidInput, match="HF_TOKEN"):
            without.check_model(GATED_MODEL_IDS[0])   # typed as a custom id: refused with the reason
        with_token = HostingLimits.from_env({**env, "HF_TOKEN": "hf_x"})
        assert set(gated) <= set(allowed_presets(with_token))
        assert with_token.gated_notice() == ""
    # An allow-list that leaves the gated models out needs no note.
    assert HostingLimits.from_env({"SPECVIZ_ALLOWED_MODELS": "default"}).gated_notice() == ""
