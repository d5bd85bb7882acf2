import gc
import os
from pathlib import Path

import pytest
from cli_run import mask_files
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_collection_finish(session: object) -> None:
    """Collection imports torch, transformers and every test module: millions of objects that live
    to the end. Freezing them keeps every later ``gc.collect()`` (the benchmarks' and memory tests'
    clean states, and the collector's own full passes) from walking them again."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The files the command-line tests run on (``cli_run.mask_files``), once per test module."""
    return mask_files(tmp_path_factory.mktemp("cli"))
