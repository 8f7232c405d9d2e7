"""Kernel families. Each module builds KernelDefs (CUDA source with the guard + NumPy reference)
from one source template per family; factories are cached so equal kernels are one object."""
