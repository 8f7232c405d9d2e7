"""Host side of the DPU: the Preprocessor facade over its backends (see `fpga_host.backends`)."""

from fpga_host.backends import BACKEND_CHOICES, BACKENDS
from fpga_host.preprocessor import Preprocessor, Result
from fpga_host.status import PreprocessError, Status

__all__ = ["BACKENDS", "BACKEND_CHOICES", "Preprocessor", "Result", "PreprocessError", "Status"]
