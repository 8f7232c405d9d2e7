`resetall
`timescale 1ns / 1ps
`default_nettype none

// IEEE-754 binary32 addition (or subtraction), round to nearest even, subnormals, inf and NaN as x86.
//
// An operator for Vitis HLS pipelines (ap_ctrl_chain handshake, ap_ce clock enable): one operation
// per cycle, result LATENCY = 3 enabled cycles after its ap_start. NaN results follow x86 (what a
// C++ `a + b` or `a - b` gives on the host): a NaN operand comes back quieted with its own sign,
// `a` before `b`; inf - inf gives the default NaN 0xFFC00000. An exact zero result is +0 unless
// both addends (b negated when subtracting) are -0.
module fp32_add #(
    // 0: sum = a + b; 1: sum = a - b (b's sign flipped for the arithmetic, not for NaN results).
    parameter SUBTRACT = 0
) (
    /*
     * Clock, synchronous active-high reset, clock enable (low: the whole pipeline holds)
     */
    input  wire        ap_clk,
    input  wire        ap_rst,
    input  wire        ap_ce,

    /*
     * Block control: ap_start marks a valid operand pair; ap_done marks its sum, one per start
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
    output wire [31:0] sum,
    output wire        sum_ap_vld
);

localparam [31:0] DEFAULT_NAN = 32'hFFC00000;
localparam [31:0] QUIET_BIT = 32'h00400000;

// Stage 1: specials decided, operands ordered by magnitude, the smaller one aligned to the larger
// one's exponent with three extra bits (guard, round, sticky).
reg        s1_valid_reg = 1'b0;
reg        s1_special_reg = 1'b0, s1_special_next;
reg [31:0] s1_special_value_reg = 32'd0, s1_special_value_next;
reg        s1_sign_reg = 1'b0, s1_sign_next;
reg        s1_subtract_reg = 1'b0, s1_subtract_next;
reg        s1_zero_sign_reg = 1'b0, s1_zero_sign_next;
reg [7:0]  s1_exp_reg = 8'd0, s1_exp_next;
reg [26:0] s1_larger_reg = 27'd0, s1_larger_next;
reg [26:0] s1_smaller_reg = 27'd0, s1_smaller_next;

// Stage 2: the sum normalised (left shifts stop at the subnormal exponent); guard, round and
// sticky in bits 2..0.
reg        s2_valid_reg = 1'b0;
reg        s2_special_reg = 1'b0, s2_special_next;
reg [31:0] s2_special_value_reg = 32'd0, s2_special_value_next;
reg        s2_sign_reg = 1'b0, s2_sign_next;
reg [8:0]  s2_exp_reg = 9'd0, s2_exp_next;
reg [26:0] s2_mant_reg = 27'd0, s2_mant_next;

// Stage 3: rounded and packed (fp32_round).
reg        s3_valid_reg = 1'b0;
reg [31:0] sum_reg = 32'd0;
wire [31:0] sum_next;

assign ap_ready = ap_start && ap_ce;
assign ap_done = s3_valid_reg && ap_ce;
assign sum_ap_vld = ap_done;
assign ap_idle = !ap_start && !s1_valid_reg && !s2_valid_reg && !s3_valid_reg;
assign sum = sum_reg;

reg        a_nan, b_nan, a_inf, b_inf, swap;
reg [31:0] larger, smaller;
reg [7:0]  larger_exp, smaller_exp, shift;
reg [26:0] smaller_ext, smaller_aligned;
reg        sticky;

// The addend: b, negated when subtracting.
wire [31:0] addend = {b[31] ^ (SUBTRACT != 0), b[30:0]};

always @* begin
    a_nan = a[30:23] == 8'hFF && a[22:0] != 0;
    b_nan = b[30:23] == 8'hFF && b[22:0] != 0;
    a_inf = a[30:0] == 31'h7F800000;
    b_inf = b[30:0] == 31'h7F800000;

    s1_special_next = a_nan || b_nan || a_inf || b_inf;
    if (a_nan) begin
        s1_special_value_next = a | QUIET_BIT;
    end else if (b_nan) begin
        s1_special_value_next = b | QUIET_BIT;
    end else if (a_inf && b_inf && a[31] != addend[31]) begin
        s1_special_value_next = DEFAULT_NAN;
    end else begin
        s1_special_value_next = a_inf ? a : addend;
    end

    swap = addend[30:0] > a[30:0];
    larger = swap ? addend : a;
    smaller = swap ? a : addend;
    // Subnormals (exponent field 0) have no hidden bit and exponent 1.
    larger_exp = larger[30:23] == 0 ? 8'd1 : larger[30:23];
    smaller_exp = smaller[30:23] == 0 ? 8'd1 : smaller[30:23];
    shift = larger_exp - smaller_exp;
    smaller_ext = {smaller[30:23] != 0, smaller[22:0], 3'b000};
    // Bits shifted out survive as the sticky bit.
    sticky = shift > 8'd26 ? smaller_ext != 0 : (smaller_ext & ~({27{1'b1}} << shift)) != 0;
    smaller_aligned = (shift > 8'd26 ? 27'd0 : smaller_ext >> shift) | {26'd0, sticky};

    s1_sign_next = larger[31];
    s1_subtract_next = a[31] != addend[31];
    s1_zero_sign_next = a[31] && addend[31];
    s1_exp_next = larger_exp;
    s1_larger_next = {larger[30:23] != 0, larger[22:0], 3'b000};
    s1_smaller_next = smaller_aligned;
end

reg [27:0] total;
reg [31:0] probe;
reg [5:0]  lead;
reg [7:0]  left;

always @* begin
    total = s1_subtract_reg ? {1'b0, s1_larger_reg} - {1'b0, s1_smaller_reg}
                            : {1'b0, s1_larger_reg} + {1'b0, s1_smaller_reg};
    // Leading zeros of the 27-bit sum (27 when it is zero), by binary search.
    probe = {total[26:0], 5'b11111};
    lead = 5'd0;
    if (probe[31:16] == 0) begin lead = lead + 5'd16; probe = probe << 16; end
    if (probe[31:24] == 0) begin lead = lead + 5'd8; probe = probe << 8; end
    if (probe[31:28] == 0) begin lead = lead + 5'd4; probe = probe << 4; end
    if (probe[31:30] == 0) begin lead = lead + 5'd2; probe = probe << 2; end
    if (probe[31] == 0) lead = lead + 5'd1;
    left = (s1_exp_reg - 8'd1 < {2'd0, lead}) ? s1_exp_reg - 8'd1 : {2'd0, lead};

    s2_special_next = s1_special_reg;
    s2_special_value_next = s1_special_value_reg;
    s2_sign_next = total == 0 ? s1_zero_sign_reg : s1_sign_reg;
    if (total[27]) begin
        s2_exp_next = {1'b0, s1_exp_reg} + 9'd1;
        s2_mant_next = {total[27:2], total[1] | total[0]};
    end else begin
        s2_exp_next = {1'b0, s1_exp_reg} - {1'b0, left};
        s2_mant_next = total[26:0] << left;
    end
end

fp32_round round_inst (
    .special(s2_special_reg),
    .special_value(s2_special_value_reg),
    .overflow(s2_exp_reg >= 9'd255),
    .sign(s2_sign_reg),
    // A normalised significand has its leading one in bit 26; without it the value is subnormal.
    .exp_field(s2_mant_reg[26] ? s2_exp_reg[7:0] : 8'd0),
    .mant(s2_mant_reg),
    .result(sum_next)
);

always @(posedge ap_clk) begin
    if (ap_ce) begin
        s1_valid_reg <= ap_start;
        s1_special_reg <= s1_special_next;
        s1_special_value_reg <= s1_special_value_next;
        s1_sign_reg <= s1_sign_next;
        s1_subtract_reg <= s1_subtract_next;
        s1_zero_sign_reg <= s1_zero_sign_next;
        s1_exp_reg <= s1_exp_next;
        s1_larger_reg <= s1_larger_next;
        s1_smaller_reg <= s1_smaller_next;
        s2_valid_reg <= s1_valid_reg;
        s2_special_reg <= s2_special_next;
        s2_special_value_reg <= s2_special_value_next;
        s2_sign_reg <= s2_sign_next;
        s2_exp_reg <= s2_exp_next;
        s2_mant_reg <= s2_mant_next;
        s3_valid_reg <= s2_valid_reg;
        sum_reg <= sum_next;
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
