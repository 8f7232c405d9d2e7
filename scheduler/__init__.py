"""REEF-style scheduling of RT and BE inference tasks on one vGPU (ARCHITECTURE §6).

  reef.Reef            the per-vGPU scheduler: RT queue, client bookkeeping, the polling loop
  preemption           the one mode (normal / RT / flushing / padding), its transitions, the flag
  be_streams           BE queues, vHQs over the guarded streams, the BE uploader thread
  policies             seq / streams / wait / reset / reef as small policy objects
  vhq                  virtual host queues: at most `c` kernels outstanding per BE stream
  cpu_device           CPU vGPU: a stream is a thread; guard checked before every kernel
  cuda_device          CUDA vGPU: CuPy streams, progress markers, GPU-timeline stamps
  profiler, padding    kernel durations and occupancy; REEF's padding selection rules
  pad_planner          software padding: profiles, pair tables, a plan per RT task
  rerun_window         how many in-flight kernels a reset may safely re-run
  vgpu_engine          REEF inside a vGPU worker process
"""
