`resetall
`timescale 1ns / 1ps
`default_nettype none

// One step of a mel band's accumulation, out = acc + w * p: a binary32 multiply, then an add, each
// rounded to nearest even (no fused multiply-add), as the C model hls/audio/mel_mac.cpp.
//
// An operator for Vitis HLS pipelines (ap_ctrl_chain handshake, ap_ce clock enable): one operation
// per cycle, result LATENCY = 6 enabled cycles after its ap_start (multiplier 3, adder 3).
module mel_mac (
    /*
     * Clock, synchronous active-high reset, clock enable (low: the whole pipeline holds)
     */
    input  wire        ap_clk,
    input  wire        ap_rst,
    input  wire        ap_ce,

    /*
     * Block control: ap_start marks valid operands; ap_done marks their result, one per start
     */
    input  wire        ap_start,
    output wire        ap_ready,
    output wire        ap_done,
    output wire        ap_idle,

    /*
     * Operands and result
     */
    input  wire [31:0] acc,
    input  wire [31:0] w,
    input  wire [31:0] p,
    output wire [31:0] out,
    output wire        out_ap_vld
);

localparam MUL_LATENCY = 3;

// acc waits for the product in a shift register that moves with ap_ce.
reg [31:0] acc_delay_reg [0:MUL_LATENCY-1];
wire [31:0] product;
wire product_valid, mul_idle, add_idle;
integer i;

assign ap_ready = ap_start && ap_ce;
assign ap_idle = !ap_start && mul_idle && add_idle;

fp32_mul mul_inst (
    .ap_clk(ap_clk),
    .ap_rst(ap_rst),
    .ap_ce(ap_ce),
    .ap_start(ap_start),
    .ap_ready(),
    .ap_done(),
    .ap_idle(mul_idle),
    .a(w),
    .b(p),
    .product(product),
    .product_ap_vld(product_valid)
);

fp32_add add_inst (
    .ap_clk(ap_clk),
    .ap_rst(ap_rst),
    .ap_ce(ap_ce),
    .ap_start(product_valid),
    .ap_ready(),
    .ap_done(ap_done),
    .ap_idle(add_idle),
    .a(acc_delay_reg[MUL_LATENCY-1]),
    .b(product),
    .sum(out),
    .sum_ap_vld(out_ap_vld)
);

initial begin
    for (i = 0; i < MUL_LATENCY; i = i + 1) acc_delay_reg[i] = 32'd0;
end

always @(posedge ap_clk) begin
    if (ap_ce) begin
        acc_delay_reg[0] <= acc;
        for (i = 1; i < MUL_LATENCY; i = i + 1) acc_delay_reg[i] <= acc_delay_reg[i-1];
    end
end

endmodule

`resetall
`default_nettype wire
