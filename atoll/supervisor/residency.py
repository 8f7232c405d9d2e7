"""`[residency]` as the vGPU workers take it (`gpu_runtime.residency.settings`)."""

from __future__ import annotations

import logging

from gpu_runtime.executors import EXECUTORS
from gpu_runtime.residency.settings import ResidencySettings

from atoll.config import ResidencyConfig

log = logging.getLogger(__name__)
MB = 1 << 20


def residency_settings(config: ResidencyConfig, executor: str | None) -> ResidencySettings | None:
    """The workers' settings, or None when residency is off. It moves kernel programs' weights (on
    CPU and GPU vGPUs), so whole-graph executors (onnxruntime) keep their models loaded whole: said
    once, here."""
    if config.budget_mb <= 0:
        return None
    spec = EXECUTORS.get(executor or "")
    if spec is None or not spec.runs_programs:
        log.warning("residency.budget_mb applies to kernel programs (executor numpy, cuda-emu or cupy); "
                    "%s models are loaded whole", executor or "the default executor's")
    return ResidencySettings(int(config.budget_mb * MB), config.bandwidth_gb_s * 1e9, tuple(config.pinned_models),
                             config.evict_real_time)
