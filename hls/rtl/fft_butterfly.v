`resetall
`timescale 1ns / 1ps
`default_nettype none

// Radix-2 decimation-in-time FFT butterfly on binary32: t = b * w, x = a + t, y = a - t.
//
// The datapath of the audio CU's FFT stages, in the order of its C model
// hls/audio/fft_butterfly.cpp, each operation rounded to nearest even: four multipliers
// (br*wr, bi*wi, br*wi, bi*wr), then tr = br*wr - bi*wi and ti = br*wi + bi*wr, then the four
// output adders. An operator for Vitis HLS pipelines (ap_ctrl_chain handshake, ap_ce clock
// enable): one butterfly per cycle, results LATENCY = 9 enabled cycles after ap_start.
module fft_butterfly (
    /*
     * Clock, synchronous active-high reset, clock enable (low: the whole pipeline holds)
     */
    input  wire        ap_clk,
    input  wire        ap_rst,
    input  wire        ap_ce,

    /*
     * Block control: ap_start marks valid operands; ap_done marks their results, one per start
     */
    input  wire        ap_start,
    output wire        ap_ready,
    output wire        ap_done,
    output wire        ap_idle,

    /*
     * Operands a, b and twiddle w (real and imaginary parts)
     */
    input  wire [31:0] ar,
    input  wire [31:0] ai,
    input  wire [31:0] br,
    input  wire [31:0] bi,
    input  wire [31:0] wr,
    input  wire [31:0] wi,

    /*
     * Results x = a + b w, y = a - b w, each with its valid (all four rise together)
     */
    output wire [31:0] xr,
    output wire        xr_ap_vld,
    output wire [31:0] xi,
    output wire        xi_ap_vld,
    output wire [31:0] yr,
    output wire        yr_ap_vld,
    output wire [31:0] yi,
    output wire        yi_ap_vld
);

// a waits for t in a shift register that moves with ap_ce (multiplier 3 + adder 3 cycles).
localparam A_DELAY = 6;

reg [63:0] a_delay_reg [0:A_DELAY-1];
wire [31:0] br_wr, bi_wi, br_wi, bi_wr, tr, ti;
wire [3:0] mul_valid, mul_idle;
wire [1:0] t_valid, t_idle;
wire [3:0] out_valid, out_idle;
wire [31:0] a_r = a_delay_reg[A_DELAY-1][31:0];
wire [31:0] a_i = a_delay_reg[A_DELAY-1][63:32];
integer i;

assign ap_ready = ap_start && ap_ce;
assign ap_done = out_valid[0];
assign ap_idle = !ap_start && &mul_idle && &t_idle && &out_idle;
assign {yi_ap_vld, yr_ap_vld, xi_ap_vld, xr_ap_vld} = out_valid;

fp32_mul mul_br_wr (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(ap_start), .ap_ready(),
    .ap_done(), .ap_idle(mul_idle[0]), .a(br), .b(wr), .product(br_wr), .product_ap_vld(mul_valid[0]));
fp32_mul mul_bi_wi (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(ap_start), .ap_ready(),
    .ap_done(), .ap_idle(mul_idle[1]), .a(bi), .b(wi), .product(bi_wi), .product_ap_vld(mul_valid[1]));
fp32_mul mul_br_wi (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(ap_start), .ap_ready(),
    .ap_done(), .ap_idle(mul_idle[2]), .a(br), .b(wi), .product(br_wi), .product_ap_vld(mul_valid[2]));
fp32_mul mul_bi_wr (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(ap_start), .ap_ready(),
    .ap_done(), .ap_idle(mul_idle[3]), .a(bi), .b(wr), .product(bi_wr), .product_ap_vld(mul_valid[3]));

fp32_add #(.SUBTRACT(1)) sub_tr (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(mul_valid[0]),
    .ap_ready(), .ap_done(), .ap_idle(t_idle[0]), .a(br_wr), .b(bi_wi), .sum(tr), .sum_ap_vld(t_valid[0]));
fp32_add #(.SUBTRACT(0)) add_ti (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(mul_valid[2]),
    .ap_ready(), .ap_done(), .ap_idle(t_idle[1]), .a(br_wi), .b(bi_wr), .sum(ti), .sum_ap_vld(t_valid[1]));

fp32_add #(.SUBTRACT(0)) add_xr (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(t_valid[0]),
    .ap_ready(), .ap_done(), .ap_idle(out_idle[0]), .a(a_r), .b(tr), .sum(xr), .sum_ap_vld(out_valid[0]));
fp32_add #(.SUBTRACT(0)) add_xi (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(t_valid[1]),
    .ap_ready(), .ap_done(), .ap_idle(out_idle[1]), .a(a_i), .b(ti), .sum(xi), .sum_ap_vld(out_valid[1]));
fp32_add #(.SUBTRACT(1)) sub_yr (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(t_valid[0]),
    .ap_ready(), .ap_done(), .ap_idle(out_idle[2]), .a(a_r), .b(tr), .sum(yr), .sum_ap_vld(out_valid[2]));
fp32_add #(.SUBTRACT(1)) sub_yi (.ap_clk(ap_clk), .ap_rst(ap_rst), .ap_ce(ap_ce), .ap_start(t_valid[1]),
    .ap_ready(), .ap_done(), .ap_idle(out_idle[3]), .a(a_i), .b(ti), .sum(yi), .sum_ap_vld(out_valid[3]));

initial begin
    for (i = 0; i < A_DELAY; i = i + 1) a_delay_reg[i] = 64'd0;
end

always @(posedge ap_clk) begin
    if (ap_ce) begin
        a_delay_reg[0] <= {ai, ar};
        for (i = 1; i < A_DELAY; i = i + 1) a_delay_reg[i] <= a_delay_reg[i-1];
    end
end

endmodule

`resetall
`default_nettype wire
