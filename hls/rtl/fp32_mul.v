`resetall
`timescale 1ns / 1ps
`default_nettype none

// IEEE-754 binary32 multiplication, round to nearest even, with subnormals, infinities and NaN as x86 SSE.
//
// An operator for Vitis HLS pipelines (ap_ctrl_chain handshake, ap_ce clock enable): one operation
// per cycle, result LATENCY = 3 enabled cycles after its ap_start. NaN results follow x86 (what a
// C++ `a * b` gives on the host): a NaN operand comes back quieted, `a` before `b`; inf * 0 gives
// the default NaN 0xFFC00000.
module fp32_mul (
    /*
     * Clock, synchronous active-high reset, clock enable (low: the whole pipeline holds)
     */
    input  wire        ap_clk,
    input  wire        ap_rst,
    input  wire        ap_ce,

    /*
     * Block control: ap_start marks a valid operand pair; ap_done marks its product, one per start
     */
    input  wire        ap_start,
    output wire        ap_ready,
    output wire        ap_done,
    output wire        ap_idle,

    /*
     * Operands and result
     */
    input  wire [31:0] a,
    input  wire [31:0] b,
    output wire [31:0] product,
    output wire        product_ap_vld
);

localparam [31:0] DEFAULT_NAN = 32'hFFC00000;
localparam [31:0] QUIET_BIT = 32'h00400000;

// Stage 1: specials decided, the 48-bit significand product and the biased exponent sum.
reg        s1_valid_reg = 1'b0;
reg        s1_special_reg = 1'b0, s1_special_next;
reg [31:0] s1_special_value_reg = 32'd0, s1_special_value_next;
reg        s1_sign_reg = 1'b0, s1_sign_next;
reg [8:0]  s1_exp_sum_reg = 9'd0, s1_exp_sum_next;
reg [47:0] s1_product_reg = 48'd0, s1_product_next;

// Stage 2: the product shifted to its 24-bit significand (further right when the result is
// subnormal); guard, round and sticky below it.
reg        s2_valid_reg = 1'b0;
reg        s2_special_reg = 1'b0, s2_special_next;
reg [31:0] s2_special_value_reg = 32'd0, s2_special_value_next;
reg        s2_sign_reg = 1'b0, s2_sign_next;
reg        s2_overflow_reg = 1'b0, s2_overflow_next;
reg [7:0]  s2_exp_reg = 8'd0, s2_exp_next;
reg [26:0] s2_mant_reg = 27'd0, s2_mant_next;

// Stage 3: rounded and packed (fp32_round).
reg        s3_valid_reg = 1'b0;
reg [31:0] product_reg = 32'd0;
wire [31:0] product_next;

assign ap_ready = ap_start && ap_ce;
assign ap_done = s3_valid_reg && ap_ce;
assign product_ap_vld = ap_done;
assign ap_idle = !ap_start && !s1_valid_reg && !s2_valid_reg && !s3_valid_reg;
assign product = product_reg;

reg a_nan, b_nan, a_inf, b_inf, a_zero, b_zero;

always @* begin
    a_nan = a[30:23] == 8'hFF && a[22:0] != 0;
    b_nan = b[30:23] == 8'hFF && b[22:0] != 0;
    a_inf = a[30:0] == 31'h7F800000;
    b_inf = b[30:0] == 31'h7F800000;
    a_zero = a[30:0] == 0;
    b_zero = b[30:0] == 0;

    s1_sign_next = a[31] ^ b[31];
    s1_special_next = a_nan || b_nan || a_inf || b_inf || a_zero || b_zero;
    if (a_nan) begin
        s1_special_value_next = a | QUIET_BIT;
    end else if (b_nan) begin
        s1_special_value_next = b | QUIET_BIT;
    end else if ((a_inf && b_zero) || (b_inf && a_zero)) begin
        s1_special_value_next = DEFAULT_NAN;
    end else if (a_inf || b_inf) begin
        s1_special_value_next = {s1_sign_next, 31'h7F800000};
    end else begin
        s1_special_value_next = {s1_sign_next, 31'd0};
    end
    // Subnormals (exponent field 0) have no hidden bit and exponent 1.
    s1_exp_sum_next = (a[30:23] == 0 ? 9'd1 : {1'b0, a[30:23]}) + (b[30:23] == 0 ? 9'd1 : {1'b0, b[30:23]});
    s1_product_next = {a[30:23] != 0, a[22:0]} * {b[30:23] != 0, b[22:0]};
end

// Value = product * 2^(exp_sum - 300). With its leading one in bit `top`, the biased exponent of
// the result is top + exp_sum - 173; below 1 the result is subnormal and the shift grows to keep
// the exponent at 1. One operand is normal here (two subnormals underflow to a sticky bit), so
// top >= 23 and the shift is never to the left.
reg [5:0]  top;
reg [9:0]  biased;
reg [9:0]  shift;
reg [74:0] extended, shifted;
reg [63:0] probe;

always @* begin
    // Position of the leading one, by binary search (0 for a zero product, handled as special).
    probe = {s1_product_reg, 16'd0};
    top = 6'd47;
    if (probe[63:32] == 0) begin top = top - 6'd32; probe = probe << 32; end
    if (probe[63:48] == 0) begin top = top - 6'd16; probe = probe << 16; end
    if (probe[63:56] == 0) begin top = top - 6'd8; probe = probe << 8; end
    if (probe[63:60] == 0) begin top = top - 6'd4; probe = probe << 4; end
    if (probe[63:62] == 0) begin top = top - 6'd2; probe = probe << 2; end
    if (probe[63] == 0) top = top - 6'd1;
    biased = {4'd0, top} + {1'b0, s1_exp_sum_reg} - 10'd173;
    // Negative biased exponents wrap to large values: compare as signed.
    if ($signed(biased) >= 1) begin
        shift = {4'd0, top} - 10'd23;
    end else begin
        shift = 10'd151 - {1'b0, s1_exp_sum_reg};
    end
    // The 24 significand bits land in 50..27, guard and round in 26..25, the rest is sticky.
    extended = {s1_product_reg, 27'd0};
    shifted = extended >> shift;

    s2_special_next = s1_special_reg;
    s2_special_value_next = s1_special_value_reg;
    s2_sign_next = s1_sign_reg;
    s2_overflow_next = $signed(biased) >= 255;
    s2_exp_next = $signed(biased) >= 1 ? biased[7:0] : 8'd0;
    s2_mant_next = shift > 10'd50 ? {26'd0, s1_product_reg != 0} : {shifted[50:25], shifted[24:0] != 0};
end

fp32_round round_inst (
    .special(s2_special_reg),
    .special_value(s2_special_value_reg),
    .overflow(s2_overflow_reg),
    .sign(s2_sign_reg),
    .exp_field(s2_exp_reg),
    .mant(s2_mant_reg),
    .result(product_next)
);

always @(posedge ap_clk) begin
    if (ap_ce) begin
        s1_valid_reg <= ap_start;
        s1_special_reg <= s1_special_next;
        s1_special_value_reg <= s1_special_value_next;
        s1_sign_reg <= s1_sign_next;
        s1_exp_sum_reg <= s1_exp_sum_next;
        s1_product_reg <= s1_product_next;
        s2_valid_reg <= s1_valid_reg;
        s2_special_reg <= s2_special_next;
        s2_special_value_reg <= s2_special_value_next;
        s2_sign_reg <= s2_sign_next;
        s2_overflow_reg <= s2_overflow_next;
        s2_exp_reg <= s2_exp_next;
        s2_mant_reg <= s2_mant_next;
        s3_valid_reg <= s2_valid_reg;
        product_reg <= product_next;
    end
    if (ap_rst) begin
        s1_valid_reg <= 1'b0;
        s2_valid_reg <= 1'b0;
        s3_valid_reg <= 1'b0;
    end
end

endmodule

`resetall
`default_nettype wire
