# Shared Vitis rules: compile each kernel to a .xo, link them with a connectivity .cfg into an
# xclbin, and put the manifest beside it. Inputs: TARGET, PLATFORM, DESIGN, KERNELS, CONNECTIVITY.
#
# A kernel K's top function is in hls/<unit>/K.cpp (the headers of that folder are its other
# sources); an optional hls/K.cfg is passed to its compile (HLS settings, RTL blackbox JSON files).
#
# RTL blackboxes: hls/K.cfg names each descriptor a kernel uses as syn.blackbox.file=rtl/<unit>.json
# (relative to hls/), and a descriptor names its C model, include folders and Verilog relative to
# hls/rtl/. v++ gets copies of both with absolute paths, so the build does not depend on how a
# Vitis version resolves relative ones.

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
VPP_FLAGS := -t $(TARGET) --platform $(PLATFORM) --save-temps \
             --log_dir $(BUILD_DIR)/logs --report_dir $(BUILD_DIR)/reports -I$(HLS_DIR)/common

kernel_top = $(firstword $(wildcard $(HLS_DIR)/*/$(1).cpp) $(HLS_DIR)/$(1)/$(1).cpp)
kernel_cfg = $(wildcard $(HLS_DIR)/$(1).cfg)
kernel_blackboxes = $(if $(call kernel_cfg,$(1)),$(patsubst rtl/%.json,%,$(shell sed -n 's/^syn\.blackbox\.file=//p' $(call kernel_cfg,$(1)))))
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
$(BUILD_DIR)/$(1).xo: $(call kernel_top,$(1)) $(wildcard $(dir $(call kernel_top,$(1)))*.h) $(addprefix $(BUILD_DIR)/cfg/,$(notdir $(call kernel_cfg,$(1))))
	@mkdir -p $(BUILD_DIR)
	$(VPP) -c $(VPP_FLAGS) --temp_dir $(BUILD_DIR)/tmp/$(1) -k $(1) -I$(patsubst %/,%,$(dir $(call kernel_top,$(1)))) \
	  $(addprefix --config $(BUILD_DIR)/cfg/,$(notdir $(call kernel_cfg,$(1)))) -o $$@ $(call kernel_top,$(1))

$(BUILD_DIR)/cfg/$(1).cfg: $(call kernel_cfg,$(1)) $(call blackbox_json,$(1))
	@mkdir -p $$(@D)
	sed 's#^syn\.blackbox\.file=rtl/#syn.blackbox.file=$(BUILD_DIR)/blackbox/#' $$< > $$@
endef
$(foreach k,$(KERNELS),$(eval $(call compile_rule,$(k))))

$(BUILD_DIR)/blackbox/%.json: $(HLS_DIR)/rtl/%.json
	@mkdir -p $(@D)
	sed -e 's#"\([^"/][^"]*\.\(v\|cpp\)\)"#"$(HLS_DIR)/rtl/\1"#g' -e 's#-I\([^/][^ "]*\)#-I$(HLS_DIR)/rtl/\1#g' $< > $@

$(XCLBIN): $(XOS) $(HLS_DIR)/$(CONNECTIVITY)
	$(VPP) -l $(VPP_FLAGS) --temp_dir $(BUILD_DIR)/tmp/link --config $(HLS_DIR)/$(CONNECTIVITY) -o $@ $(XOS)

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

# Each kernel's RTL, C-synthesized by Vitis HLS with its blackboxes, for the kernel-level cocotb
# testbench (tests/sim_tb/test_hls_kernels.py runs it on build/rtl/<kernel>/ when present). The
# blackboxes' Verilog goes with it (all of hls/rtl: modules nothing instantiates are left alone).
# HLS_TCL runs a Tcl script in Vitis HLS: `vitis_hls -f` up to 2024.2, `vitis-run --mode hls --tcl`
# after. PART and CLOCK_NS are the platform's (Alveo U55C, 300 MHz kernel clock).
HLS_TCL ?= vitis_hls -f
PART ?= xcu55c-fsvh2892-2L-e
CLOCK_NS ?= 3.33
RTL_DIR := $(REPO_DIR)/build/rtl

rtl: $(foreach k,$(KERNELS),$(RTL_DIR)/$(k)/$(k).v)

define rtl_rule
$(RTL_DIR)/$(1)/$(1).v: $(call kernel_top,$(1)) $(wildcard $(dir $(call kernel_top,$(1)))*.h) $(call blackbox_json,$(1)) $(HLS_DIR)/export_rtl.tcl
	rm -rf $(RTL_DIR)/$(1) $(BUILD_DIR)/hls_rtl/$(1)
	mkdir -p $(BUILD_DIR)/hls_rtl/$(1)
	cd $(BUILD_DIR)/hls_rtl/$(1) && ATOLL_KERNEL=$(1) ATOLL_KERNEL_SOURCE=$(call kernel_top,$(1)) \
	  ATOLL_CFLAGS="-I$(HLS_DIR)/common -I$(patsubst %/,%,$(dir $(call kernel_top,$(1))))" \
	  ATOLL_BLACKBOXES="$(call blackbox_json,$(1))" ATOLL_PART=$(PART) ATOLL_CLOCK_NS=$(CLOCK_NS) \
	  ATOLL_RTL_OUT=$(RTL_DIR)/$(1) $(HLS_TCL) $(HLS_DIR)/export_rtl.tcl
	cp $(HLS_DIR)/rtl/*.v $(RTL_DIR)/$(1)/
endef
$(foreach k,$(KERNELS),$(eval $(call rtl_rule,$(k))))

clean:
	rm -rf $(BUILD_DIR)
