"""Atoll: FPGA-preprocessed, batch-scheduled, preemptive DNN inference server."""

__version__ = "0.1.0"
