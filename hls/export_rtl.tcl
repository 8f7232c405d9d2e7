# Vitis HLS: C-synthesizes one kernel with its RTL blackboxes and copies the generated Verilog to a
# folder, for the kernel-level cocotb testbench. Run by hls/vitis.mk's `rtl` target, which passes
# the settings in the environment: ATOLL_KERNEL (top function), ATOLL_KERNEL_SOURCE, ATOLL_CFLAGS,
# ATOLL_BLACKBOXES (descriptor JSON files), ATOLL_PART, ATOLL_CLOCK_NS, ATOLL_RTL_OUT.
set kernel $::env(ATOLL_KERNEL)
open_project -reset $kernel
set_top $kernel
add_files $::env(ATOLL_KERNEL_SOURCE) -cflags $::env(ATOLL_CFLAGS)
foreach descriptor $::env(ATOLL_BLACKBOXES) {
    add_files -blackbox $descriptor
}
open_solution -reset solution -flow_target vitis
set_part $::env(ATOLL_PART)
create_clock -period $::env(ATOLL_CLOCK_NS)
csynth_design
file mkdir $::env(ATOLL_RTL_OUT)
foreach source [glob -directory $kernel/solution/syn/verilog *.v] {
    file copy -force $source $::env(ATOLL_RTL_OUT)
}
exit
