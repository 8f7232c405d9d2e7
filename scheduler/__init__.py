"""REEF-style scheduling of RT and BE inference tasks on one vGPU (ARCHITECTURE §6).

`reef.Reef` is the scheduler; its mode lives in `preemption`, its BE side in `be_streams`, software
padding in `pad_planner` (rules in `padding`, profiles in `profiler`), the policies in `policies`,
the devices in `cpu_device` and `cuda_device`, and the worker engine in `vgpu_engine`. The map and
the protocol: docs/scheduling.md.
"""
