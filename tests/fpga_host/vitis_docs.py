"""What the Vitis guides document about the build files hls/ uses: every config key and v++ option,
each with the guide, version and section that documents it (docs.amd.com). The build test checks
the HLS-component configs, the connectivity config and the commands `make -C hls -n` prints
against these tables, so nothing enters the build that the guides do not describe."""

from __future__ import annotations

# [hls] keys of an HLS-component config compiled by `v++ -c --mode hls`.
HLS_KEYS = {
    "flow_target": "UG1702 2025.2 'HLS General Options' (vitis: a Vitis kernel); UG1399 2023.2 'Target Flow Overview'",
    "syn.top": "UG1399 2026.1 'C-Synthesis Sources' (Tcl set_top)",
    "syn.file": "UG1399 2026.1 'C-Synthesis Sources' (Tcl add_files, one statement per file)",
    "syn.cflags": "UG1399 2026.1 'C-Synthesis Sources'; UG1702 2025.1 'HLS General Options'",
    "syn.blackbox.file": "UG1399 2026.1 'C-Synthesis Sources' (Tcl add_files -blackbox: RTL blackbox JSON)",
    "syn.output.format": "UG1702 2024.2 and 2026.1 'v++ Mode HLS' (example: syn.output.format=xo)",
    "package.output.file": "UG1399 2025.2 'Package Options'; UG1702 2025.1 'Package Options'",
}
HLS_VALUES = {
    "flow_target": {"vitis"},
    "syn.output.format": {"xo"},
}

# [connectivity] keys of the link config (`v++ -l --config`).
CONNECTIVITY_KEYS = {
    "nk": "UG1702 2024.2 '--connectivity Options' (<kernel>:<n>:<cu1>,<cu2>,...)",
    "sp": "UG1702 2024.2 '--connectivity Options' (<cu>.<arg>:<memory>, e.g. HBM[i])",
}

# v++ options on the printed command lines, by step; a value-taking option maps to True.
COMPILE_HLS_OPTIONS = {
    "-c": (False, "UG1702 2025.2 'v++ General Compilation Options'"),
    "--mode": (True, "UG1702 2025.2 'v++ General Compilation Options' (--mode hls: an HLS component); "
                     "UG1700 2025.2 'Compiling C/C++ PL Kernels'"),
    "--platform": (True, "UG1702 2025.2 'v++ General Compilation Options'; XD100 2025.2 "
                         "'Compiling HLS Kernels Using v++' (v++ -c --mode hls --platform ... --config)"),
    "--freqhz": (True, "UG1700 2026.1 'Using --freqhz for Clock Management' (v++ -c --mode hls "
                       "--platform <pfm> --freqhz=<Hz>); UG1393 2023.2 '--clock Options'"),
    "--config": (True, "UG1702 2025.2 'v++ General Compilation Options' (command line only)"),
    "--work_dir": (True, "UG1700 2025.2 'Compiling C/C++ PL Kernels'; UG1399 2023.2 "
                         "'Creating HLS Components from the Command Line'"),
}
LINK_OPTIONS = {
    "-l": (False, "UG1702 2026.1 'Output Directories of the v++ Command' (v++ -l ... -o <x>.xclbin)"),
    "-t": (True, "UG1702 2026.1 'Output Directories of the v++ Command'; XD100 2025.2 "
                 "'make kernels' (--target | -t [hw|hw_emu])"),
    "--platform": (True, "UG1702 2026.1 'Output Directories of the v++ Command'"),
    "--freqhz": (True, "UG1700 2026.1 'Using --freqhz for Clock Management' (v++ --link)"),
    "--save-temps": (False, "XD100 2025.2 'make kernels' (--save-temps | -s)"),
    "--temp_dir": (True, "UG1702 2026.1 'Output Directories of the v++ Command'"),
    "--log_dir": (True, "UG1702 2026.1 'Output Directories of the v++ Command'"),
    "--report_dir": (True, "UG1702 2026.1 'Output Directories of the v++ Command'"),
    "--config": (True, "UG1702 2025.2 'v++ General Compilation Options'"),
    "-o": (True, "UG1702 2026.1 'Output Directories of the v++ Command'"),
}
TARGETS = {
    "hw": "UG1702 2026.1 'Output Directories of the v++ Command'",
    "hw_emu": "UG1702 2026.1 'Output Directories of the v++ Command' (-t hw_emu)",
}
