"""REEF-style scheduling of RT and BE inference tasks on one vGPU (ARCHITECTURE §6).

  reef.Reef            the per-vGPU scheduler: RT queue, BE queues, vHQs, the polling loop
  policies             seq / streams / wait / reset / reef as small policy objects
  vhq                  virtual host queues: at most `c` kernels outstanding per BE stream
  cpu_device           CPU vGPU: a stream is a thread; guard checked before every kernel
  cuda_device          CUDA vGPU: CuPy streams, progress markers, GPU-timeline stamps
  profiler, padding    kernel durations and occupancy; REEF's padding selection rules
  padded_kernel        NVRTC dispatcher that runs RT and BE kernel bodies in one launch
  rerun_window         how many in-flight kernels a reset may safely re-run
"""
