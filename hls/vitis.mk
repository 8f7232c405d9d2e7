# Shared Vitis rules: compile each kernel's HLS component to a .xo (`v++ -c --mode hls`), link them
# with a connectivity .cfg into an xclbin (`v++ -l`), and put the manifest beside it. Inputs:
# TARGET, PLATFORM, DESIGN, KERNELS, CONNECTIVITY, KERNEL_FREQ_HZ.
#
# A kernel K is the HLS component hls/K.cfg ([hls] section: syn.top, syn.file, syn.cflags, its RTL
# blackbox descriptors as syn.blackbox.file, flow_target=vitis, syn.output.format=xo), paths
# relative to hls/. Its build copy makes every path absolute and names the .xo; the blackbox
# descriptors (whose C model, include folders and Verilog are relative to hls/rtl/) get absolute
# copies too, so the build does not depend on how a Vitis version resolves relative paths.

ifeq ($(filter $(TARGET),hw hw_emu),)
$(error TARGET=$(TARGET): use hw or hw_emu (sw_emu is deprecated since Vitis 2024.2; fpga_host's emulated XRT replaces it))
endif

HLS_DIR := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
REPO_DIR := $(patsubst %/,%,$(dir $(HLS_DIR)))
BUILD_DIR := $(REPO_DIR)/build/$(TARGET).$(PLATFORM)
BITSTREAMS := $(REPO_DIR)/bitstreams
MANIFEST := $(BITSTREAMS)/$(DESIGN).json

VPP ?= v++
EMCONFIGUTIL ?= emconfigutil
# The platform's default kernel clock on the U55C (300 MHz), passed to compile and link alike.
KERNEL_FREQ_HZ ?= 300000000
LINK_FLAGS := -t $(TARGET) --platform $(PLATFORM) --freqhz=$(KERNEL_FREQ_HZ) --save-temps \
              --log_dir $(BUILD_DIR)/logs --report_dir $(BUILD_DIR)/reports

kernel_cfg = $(HLS_DIR)/$(1).cfg
cfg_values = $(shell sed -n 's/^$(2)=//p' $(call kernel_cfg,$(1)))
kernel_top = $(addprefix $(HLS_DIR)/,$(call cfg_values,$(1),syn\.file))
kernel_blackboxes = $(patsubst rtl/%.json,%,$(call cfg_values,$(1),syn\.blackbox\.file))
blackbox_json = $(foreach u,$(call kernel_blackboxes,$(1)),$(BUILD_DIR)/blackbox/$(u).json)

XOS := $(foreach k,$(KERNELS),$(BUILD_DIR)/$(k).xo)
XCLBIN := $(BUILD_DIR)/$(DESIGN).xclbin
# hw builds are installed next to the hand-written manifest; hw_emu ones stay in the build folder.
INSTALLED := $(if $(filter hw,$(TARGET)),$(BITSTREAMS)/$(DESIGN).xclbin)

.PHONY: all xos emconfig rtl clean help
all: $(XCLBIN) $(BUILD_DIR)/$(DESIGN).json $(INSTALLED)

xos: $(XOS)

help:
	@echo "make -C hls [TARGET=hw|hw_emu] [PLATFORM=...]   build $(DESIGN).xclbin (-n prints the commands)"
	@echo "make -C hls rtl                                  export each kernel's Verilog to build/rtl/<kernel>"

define compile_rule
$(BUILD_DIR)/$(1).xo: $(BUILD_DIR)/cfg/$(1).cfg $(call kernel_top,$(1)) $(wildcard $(dir $(call kernel_top,$(1)))*.h)
	$(VPP) -c --mode hls --platform $(PLATFORM) --freqhz=$(KERNEL_FREQ_HZ) --config $(BUILD_DIR)/cfg/$(1).cfg --work_dir $(BUILD_DIR)/hls/$(1)

$(BUILD_DIR)/cfg/$(1).cfg: $(call kernel_cfg,$(1)) $(call blackbox_json,$(1))
	@mkdir -p $$(@D)
	sed -e 's#^syn\.blackbox\.file=rtl/#syn.blackbox.file=$(BUILD_DIR)/blackbox/#' -e 's#^syn\.file=#&$(HLS_DIR)/#' \
	  -e '/^syn\.cflags=/s#-I\([^/ ]\)#-I$(HLS_DIR)/\1#g' $$< > $$@
	echo 'package.output.file=$(BUILD_DIR)/$(1).xo' >> $$@
endef
$(foreach k,$(KERNELS),$(eval $(call compile_rule,$(k))))

$(BUILD_DIR)/blackbox/%.json: $(HLS_DIR)/rtl/%.json
	@mkdir -p $(@D)
	sed -e 's#"\([^"/][^"]*\.\(v\|cpp\)\)"#"$(HLS_DIR)/rtl/\1"#g' -e 's#-I\([^/][^ "]*\)#-I$(HLS_DIR)/rtl/\1#g' $< > $@

$(XCLBIN): $(XOS) $(HLS_DIR)/$(CONNECTIVITY)
	$(VPP) -l $(LINK_FLAGS) --temp_dir $(BUILD_DIR)/tmp/link --config $(HLS_DIR)/$(CONNECTIVITY) -o $@ $(XOS)

# The driver reads kernel argument lists from the manifest, so every xclbin travels with one.
$(BUILD_DIR)/$(DESIGN).json: $(MANIFEST)
	@mkdir -p $(BUILD_DIR)
	cp $< $@

$(BITSTREAMS)/$(DESIGN).xclbin: $(XCLBIN)
	cp $< $@

# hw_emu runs also need emconfig.json next to the host program (or EMCONFIG_PATH pointing at it).
emconfig: $(BUILD_DIR)/emconfig.json
$(BUILD_DIR)/emconfig.json:
	@mkdir -p $(BUILD_DIR)
	$(EMCONFIGUTIL) --platform $(PLATFORM) --od $(BUILD_DIR)

# Each kernel's RTL, for the kernel-level cocotb testbench (tests/sim_tb/test_hls_kernels.py runs
# it on build/rtl/<kernel>/ when present): the Verilog that the kernel's `v++ -c --mode hls` run
# leaves in <work_dir>/hls/syn/verilog (UG1702 2025.2 'Output Directories of v++ -c --mode hls'),
# with the blackboxes' Verilog beside it (all of hls/rtl: modules nothing instantiates are left
# alone).
RTL_DIR := $(REPO_DIR)/build/rtl

rtl: $(foreach k,$(KERNELS),$(RTL_DIR)/$(k)/$(k).v)

define rtl_rule
$(RTL_DIR)/$(1)/$(1).v: $(BUILD_DIR)/$(1).xo
	rm -rf $(RTL_DIR)/$(1)
	mkdir -p $(RTL_DIR)/$(1)
	cp $(BUILD_DIR)/hls/$(1)/hls/syn/verilog/*.v $(HLS_DIR)/rtl/*.v $(RTL_DIR)/$(1)/
endef
$(foreach k,$(KERNELS),$(eval $(call rtl_rule,$(k))))

clean:
	rm -rf $(BUILD_DIR)
