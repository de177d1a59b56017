import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")


@pytest.fixture
def shared() -> Path:
    if not SHARED.exists():
        pytest.skip("../shared is not beside the checkout")
    return SHARED
