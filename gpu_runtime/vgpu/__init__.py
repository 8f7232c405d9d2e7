"""vGPUs: discovery (MIG, whole GPUs, green-context partitions, CPU), the worker pool and its worker
processes, the shared-memory tensor exchange and the workers' default serial engine."""
