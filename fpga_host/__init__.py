"""Host side of the DPU: the Preprocessor facade over the XRT driver, its emulation and the CPU path."""

from fpga_host.preprocessor import Preprocessor, Result
from fpga_host.status import PreprocessError, Status

__all__ = ["Preprocessor", "Result", "PreprocessError", "Status"]
