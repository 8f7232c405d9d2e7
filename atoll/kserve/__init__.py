"""The KServe v2 / Triton protocol independent of transport: tensors, errors, classification, statistics, shared memory."""
