import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL = FIXTURES / "real"  # vendored real samples (SOURCES.md)

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")


@pytest.fixture
def real() -> Path:
    """The vendored real samples (tests/fixtures/real, sources in its SOURCES.md)."""
    return REAL
