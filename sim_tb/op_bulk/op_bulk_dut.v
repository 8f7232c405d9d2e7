`resetall
`timescale 1ns / 1ps
`default_nettype none

// op_bulk_tb's view of the operator under test, chosen by a define (OP_<UNIT>): the packed operand
// and result words mapped onto the unit's ports, port k of the C signature at bits [32k +: 32].
module op_bulk_dut #(
    // Operand bits (32 per input port).
    parameter IN_WIDTH = 64,
    // Result bits (32 per output port).
    parameter OUT_WIDTH = 32
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire                 ce,
    input  wire                 start,
    input  wire [IN_WIDTH-1:0]  operands,
    output wire                 done,
    output wire [OUT_WIDTH-1:0] result
);

`ifdef OP_FP32_ADD
// operands {b, a}, results {sum}
fp32_add unit (
    .ap_clk(clk), .ap_rst(rst), .ap_ce(ce), .ap_start(start), .ap_ready(), .ap_done(), .ap_idle(),
    .a(operands[31:0]),
    .b(operands[63:32]),
    .sum(result[31:0]),
    .sum_ap_vld(done)
);
`elsif OP_FP32_MUL
// operands {b, a}, results {product}
fp32_mul unit (
    .ap_clk(clk), .ap_rst(rst), .ap_ce(ce), .ap_start(start), .ap_ready(), .ap_done(), .ap_idle(),
    .a(operands[31:0]),
    .b(operands[63:32]),
    .product(result[31:0]),
    .product_ap_vld(done)
);
`elsif OP_MEL_MAC
// operands {p, w, acc}, results {out}
mel_mac unit (
    .ap_clk(clk), .ap_rst(rst), .ap_ce(ce), .ap_start(start), .ap_ready(), .ap_done(), .ap_idle(),
    .acc(operands[31:0]),
    .w(operands[63:32]),
    .p(operands[95:64]),
    .out(result[31:0]),
    .out_ap_vld(done)
);
`elsif OP_FFT_BUTTERFLY
// operands {wi, wr, bi, br, ai, ar}, results {yi, yr, xi, xr}
fft_butterfly unit (
    .ap_clk(clk), .ap_rst(rst), .ap_ce(ce), .ap_start(start), .ap_ready(), .ap_done(), .ap_idle(),
    .ar(operands[31:0]),
    .ai(operands[63:32]),
    .br(operands[95:64]),
    .bi(operands[127:96]),
    .wr(operands[159:128]),
    .wi(operands[191:160]),
    .xr(result[31:0]),
    .xr_ap_vld(done),
    .xi(result[63:32]),
    .xi_ap_vld(),
    .yr(result[95:64]),
    .yr_ap_vld(),
    .yi(result[127:96]),
    .yi_ap_vld()
);
`elsif OP_FP32_LOG
// operands {x}, results {y}
fp32_log unit (
    .ap_clk(clk), .ap_rst(rst), .ap_ce(ce), .ap_start(start), .ap_ready(), .ap_done(), .ap_idle(),
    .x(operands[31:0]),
    .y(result[31:0]),
    .y_ap_vld(done)
);
`endif

endmodule

`resetall
`default_nettype wire
