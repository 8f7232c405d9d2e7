"""Green contexts: SM partitions of one GPU (CUDA driver 12.4+), through cuda-python's driver API.

A partition is the `k`-th group of `sms` SMs that cuDevSmResourceSplitByCount cuts from the device's
SM resource; the worker of vGPU "gpuN.gck" builds that green context (cuDevResourceGenerateDesc +
cuGreenCtxCreate) and makes it current on its thread, and creates a stream inside it
(cuGreenCtxStreamCreate). Work launched on that stream runs only on the partition's SMs.

What is checked, in order, each failure becoming the reason reported by discovery: cuda-python
importable, cuInit succeeds, the driver is 12.4 or newer, the device (matched by UUID) exists, the
SM split succeeds and yields at least one group.
"""

from __future__ import annotations

import uuid as uuidlib

MIN_DRIVER = 12040

_active: dict = {}  # the current worker's green context: {"context", "stream", "sm_count"}


def _driver():
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6 layout
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python
        except ImportError:
            raise RuntimeError("cuda-python not installed (pip install cuda-python)") from None
    _check(driver, driver.cuInit(0), "cuInit")
    version = _check(driver, driver.cuDriverGetVersion(), "cuDriverGetVersion")
    if version < MIN_DRIVER:
        raise RuntimeError(f"CUDA driver {version // 1000}.{version % 1000 // 10} < 12.4")
    return driver


def _check(driver, result, what):
    """cuda-python returns (CUresult, values...); raise on an error, return the values."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err.name if hasattr(err, 'name') else err}")
    return values[0] if len(values) == 1 else tuple(values)


def _device(driver, gpu_uuid: str | None):
    """The CUDA device whose UUID NVML reported ("GPU-..."), or device 0 when None."""
    count = _check(driver, driver.cuDeviceGetCount(), "cuDeviceGetCount")
    for ordinal in range(count):
        dev = _check(driver, driver.cuDeviceGet(ordinal), "cuDeviceGet")
        if gpu_uuid is None:
            return dev
        raw = _check(driver, driver.cuDeviceGetUuid(dev), "cuDeviceGetUuid")
        if f"GPU-{uuidlib.UUID(bytes=bytes(raw.bytes))}" == gpu_uuid:
            return dev
    raise RuntimeError(f"no CUDA device with UUID {gpu_uuid}")


def device_sm_count(gpu_uuid: str | None) -> int:
    driver = _driver()
    attr = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    return _check(driver, driver.cuDeviceGetAttribute(attr, _device(driver, gpu_uuid)), "attribute")


def _split(driver, dev, sms: int):
    resource = _check(
        driver,
        driver.cuDeviceGetDevResource(dev, driver.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM),
        "cuDeviceGetDevResource",
    )
    total = resource.sm.smCount
    if sms > total:
        raise RuntimeError(f"asked for {sms} SMs per partition, the device has {total}")
    groups, count, _remaining = _check(
        driver, driver.cuDevSmResourceSplitByCount(total // sms, resource, 0, sms), "split"
    )
    if count < 1:
        raise RuntimeError(f"the driver made no partition of {sms} SMs")
    return list(groups)[:count]


def partition_count(gpu_uuid: str | None, sms: int) -> int:
    """How many partitions of `sms` SMs the GPU with this UUID can be split into."""
    driver = _driver()
    return len(_split(driver, _device(driver, gpu_uuid), sms))


def activate(partition: int, sms: int) -> dict:
    """In a worker process: create the green context of partition `partition`, make it current on
    this thread and give it a stream. Its environment already restricts CUDA to the one GPU."""
    driver = _driver()
    dev = _device(driver, None)
    groups = _split(driver, dev, sms)
    if partition >= len(groups):
        raise RuntimeError(f"partition {partition} asked for, the split made {len(groups)}")
    desc = _check(driver, driver.cuDevResourceGenerateDesc([groups[partition]], 1), "generate desc")
    flags = driver.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM
    green = _check(driver, driver.cuGreenCtxCreate(desc, dev, flags), "cuGreenCtxCreate")
    context = _check(driver, driver.cuCtxFromGreenCtx(green), "cuCtxFromGreenCtx")
    _check(driver, driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    non_blocking = driver.CUstream_flags.CU_STREAM_NON_BLOCKING
    stream = _check(driver, driver.cuGreenCtxStreamCreate(green, non_blocking, 0), "stream")
    _active.update(green=green, context=context, stream=stream, sm_count=groups[partition].sm.smCount)
    return dict(_active)


def active() -> dict:
    """The green context of this worker ({} outside green-context vGPUs)."""
    return dict(_active)
