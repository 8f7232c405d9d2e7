"""gpu_runtime tests run BLAS single-threaded: on a shared 2-core CI machine a multi-threaded
OpenBLAS pool spins against other processes and small products get ~50x slower."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="session")
def _single_threaded_blas():
    with threadpool_limits(limits=1, user_api="blas"):
        yield
