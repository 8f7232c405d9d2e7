`resetall
`timescale 1ns / 1ps
`default_nettype none

// AXI4-Lite control registers of image_post_cu, in Vitis HLS's layout for a kernel with
// `s_axilite port=return` (ap_ctrl_chain) and the arguments below, so that XRT and the kernel-level
// testbench drive it as they drive an HLS kernel.
//
// 0x00 : Control signals
//        bit 0  - ap_start (Read/Write/COH: cleared when the kernel takes the arguments)
//        bit 1  - ap_done (Read/COR)
//        bit 2  - ap_idle (Read)
//        bit 3  - ap_ready (Read/COR)
//        bit 7  - auto_restart (Read/Write)
// 0x04 : Global Interrupt Enable Register
//        bit 0  - Global Interrupt Enable (Read/Write)
// 0x08 : IP Interrupt Enable Register (Read/Write)
//        bit 0  - enable ap_done interrupt (Read/Write)
//        bit 1  - enable ap_ready interrupt (Read/Write)
// 0x0c : IP Interrupt Status Register (Read/TOW)
//        bit 0  - ap_done (COR/TOW)
//        bit 1  - ap_ready (COR/TOW)
// 0x10 : Data signal of frame [31:0]
// 0x14 : Data signal of frame [63:32]
// 0x18 : reserved
// 0x1c : Data signal of height [31:0]
// 0x20 : reserved
// 0x24 : Data signal of width [31:0]
// 0x28 : reserved
// 0x2c : Data signal of out [31:0]
// 0x30 : Data signal of out [63:32]
// 0x34 : reserved
// 0x38 : Data signal of dst_h [31:0]
// 0x3c : reserved
// 0x40 : Data signal of dst_w [31:0]
// 0x44 : reserved
// 0x48 : Data signal of crop_h [31:0]
// 0x4c : reserved
// 0x50 : Data signal of crop_w [31:0]
// 0x54 : reserved
// 0x58 : Data signal of format [31:0]
// 0x5c : reserved
// (SC = Self Clear, COR = Clear on Read, TOW = Toggle on Write, COH = Clear on Handshake)
module image_post_cu_control_s_axi (
    /*
     * Clock and active-low reset (Vitis kernel convention)
     */
    input  wire        ACLK,
    input  wire        ARESETN,

    /*
     * AXI4-Lite slave
     */
    input  wire [6:0]  AWADDR,
    input  wire        AWVALID,
    output wire        AWREADY,
    input  wire [31:0] WDATA,
    input  wire [3:0]  WSTRB,
    input  wire        WVALID,
    output wire        WREADY,
    output wire [1:0]  BRESP,
    output wire        BVALID,
    input  wire        BREADY,
    input  wire [6:0]  ARADDR,
    input  wire        ARVALID,
    output wire        ARREADY,
    output wire [31:0] RDATA,
    output wire [1:0]  RRESP,
    output wire        RVALID,
    input  wire        RREADY,
    output wire        interrupt,

    /*
     * Block control and arguments
     */
    output wire        ap_start,
    input  wire        ap_done,
    input  wire        ap_ready,
    input  wire        ap_idle,
    output wire [63:0] frame,
    output wire [31:0] height,
    output wire [31:0] width,
    output wire [63:0] out,
    output wire [31:0] dst_h,
    output wire [31:0] dst_w,
    output wire [31:0] crop_h,
    output wire [31:0] crop_w,
    output wire [31:0] format
);

localparam [6:0] ADDR_CTRL = 7'h00, ADDR_GIE = 7'h04, ADDR_IER = 7'h08, ADDR_ISR = 7'h0c,
                 ADDR_FRAME_0 = 7'h10, ADDR_FRAME_1 = 7'h14, ADDR_HEIGHT = 7'h1c, ADDR_WIDTH = 7'h24,
                 ADDR_OUT_0 = 7'h2c, ADDR_OUT_1 = 7'h30, ADDR_DST_H = 7'h38, ADDR_DST_W = 7'h40,
                 ADDR_CROP_H = 7'h48, ADDR_CROP_W = 7'h50, ADDR_FORMAT = 7'h58;
localparam [1:0] WRITE_IDLE = 2'd0, WRITE_DATA = 2'd1, WRITE_RESP = 2'd2;

reg [1:0]  write_state_reg = WRITE_IDLE;
reg [6:0]  write_addr_reg = 7'd0;
reg        read_valid_reg = 1'b0;
reg [31:0] read_data_reg = 32'd0;

reg        int_ap_start_reg = 1'b0, int_ap_done_reg = 1'b0, int_ap_ready_reg = 1'b0;
reg        int_auto_restart_reg = 1'b0, int_gie_reg = 1'b0;
reg [1:0]  int_ier_reg = 2'd0, int_isr_reg = 2'd0;
reg [31:0] arg_reg [0:10];  // frame lo/hi, height, width, out lo/hi, dst_h, dst_w, crop_h, crop_w, format

wire write_fire = WVALID && write_state_reg == WRITE_DATA;
wire read_fire = ARVALID && !read_valid_reg;
wire [31:0] write_mask = {{8{WSTRB[3]}}, {8{WSTRB[2]}}, {8{WSTRB[1]}}, {8{WSTRB[0]}}};
integer i;

assign AWREADY = write_state_reg == WRITE_IDLE;
assign WREADY = write_state_reg == WRITE_DATA;
assign BRESP = 2'b00;
assign BVALID = write_state_reg == WRITE_RESP;
assign ARREADY = !read_valid_reg;
assign RDATA = read_data_reg;
assign RRESP = 2'b00;
assign RVALID = read_valid_reg;
assign interrupt = int_gie_reg && (int_isr_reg != 0);

assign ap_start = int_ap_start_reg;
assign frame = {arg_reg[1], arg_reg[0]};
assign height = arg_reg[2];
assign width = arg_reg[3];
assign out = {arg_reg[5], arg_reg[4]};
assign dst_h = arg_reg[6];
assign dst_w = arg_reg[7];
assign crop_h = arg_reg[8];
assign crop_w = arg_reg[9];
assign format = arg_reg[10];

// Argument register index of an address (11: none).
function [3:0] arg_index;
    input [6:0] addr;
    begin
        case (addr)
            ADDR_FRAME_0: arg_index = 4'd0;
            ADDR_FRAME_1: arg_index = 4'd1;
            ADDR_HEIGHT:  arg_index = 4'd2;
            ADDR_WIDTH:   arg_index = 4'd3;
            ADDR_OUT_0:   arg_index = 4'd4;
            ADDR_OUT_1:   arg_index = 4'd5;
            ADDR_DST_H:   arg_index = 4'd6;
            ADDR_DST_W:   arg_index = 4'd7;
            ADDR_CROP_H:  arg_index = 4'd8;
            ADDR_CROP_W:  arg_index = 4'd9;
            ADDR_FORMAT:  arg_index = 4'd10;
            default:      arg_index = 4'd11;
        endcase
    end
endfunction

initial begin
    for (i = 0; i <= 10; i = i + 1) arg_reg[i] = 32'd0;
end

always @(posedge ACLK) begin
    case (write_state_reg)
        WRITE_IDLE: if (AWVALID) begin
            write_state_reg <= WRITE_DATA;
            write_addr_reg <= AWADDR;
        end
        WRITE_DATA: if (WVALID) write_state_reg <= WRITE_RESP;
        default: if (BREADY) write_state_reg <= WRITE_IDLE;
    endcase

    if (read_valid_reg && RREADY) read_valid_reg <= 1'b0;
    if (read_fire) begin
        read_valid_reg <= 1'b1;
        case (ARADDR)
            ADDR_CTRL: read_data_reg <= {24'd0, int_auto_restart_reg, 3'd0, int_ap_ready_reg, ap_idle,
                                         int_ap_done_reg, int_ap_start_reg};
            ADDR_GIE: read_data_reg <= {31'd0, int_gie_reg};
            ADDR_IER: read_data_reg <= {30'd0, int_ier_reg};
            ADDR_ISR: read_data_reg <= {30'd0, int_isr_reg};
            default: read_data_reg <= arg_index(ARADDR) == 4'd11 ? 32'd0 : arg_reg[arg_index(ARADDR)];
        endcase
    end

    // ap_start: set by the host, cleared when the kernel takes the arguments (kept with auto_restart).
    if (ap_ready && !int_auto_restart_reg) int_ap_start_reg <= 1'b0;
    if (write_fire && write_addr_reg == ADDR_CTRL && WSTRB[0] && WDATA[0]) int_ap_start_reg <= 1'b1;
    if (write_fire && write_addr_reg == ADDR_CTRL && WSTRB[0]) int_auto_restart_reg <= WDATA[7];
    // ap_done and ap_ready stay set until the control register is read.
    if (read_fire && ARADDR == ADDR_CTRL) begin
        int_ap_done_reg <= 1'b0;
        int_ap_ready_reg <= 1'b0;
    end
    if (ap_done) int_ap_done_reg <= 1'b1;
    if (ap_ready) int_ap_ready_reg <= 1'b1;
    if (write_fire && write_addr_reg == ADDR_GIE && WSTRB[0]) int_gie_reg <= WDATA[0];
    if (write_fire && write_addr_reg == ADDR_IER && WSTRB[0]) int_ier_reg <= WDATA[1:0];
    int_isr_reg <= (int_isr_reg ^ (write_fire && write_addr_reg == ADDR_ISR && WSTRB[0] ? WDATA[1:0] : 2'b00))
                   | ({ap_ready, ap_done} & int_ier_reg);
    if (write_fire && arg_index(write_addr_reg) != 4'd11) begin
        arg_reg[arg_index(write_addr_reg)] <= (arg_reg[arg_index(write_addr_reg)] & ~write_mask) | (WDATA & write_mask);
    end

    if (!ARESETN) begin
        write_state_reg <= WRITE_IDLE;
        read_valid_reg <= 1'b0;
        int_ap_start_reg <= 1'b0;
        int_ap_done_reg <= 1'b0;
        int_ap_ready_reg <= 1'b0;
        int_auto_restart_reg <= 1'b0;
        int_gie_reg <= 1'b0;
        int_ier_reg <= 2'd0;
        int_isr_reg <= 2'd0;
    end
end

endmodule

`resetall
`default_nettype wire
