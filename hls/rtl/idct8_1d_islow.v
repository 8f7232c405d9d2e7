`resetall
`timescale 1ns / 1ps
`default_nettype none

// 8-point 1-D inverse DCT with libjpeg's islow integer arithmetic, before descaling (combinational).
module idct8_1d_islow #(
    // Width of each two's-complement input sample, in bits.
    parameter IN_WIDTH = 16,
    // Width of each two's-complement output and of every intermediate, in bits. IN_WIDTH + 16
    // never overflows: the largest sum of absolute gains from the inputs to any intermediate
    // value (or output) of this factorisation is 61214 < 2^16. Narrower widths wrap modulo
    // 2^OUT_WIDTH (a C model computing in uint32_t is matched with 32).
    parameter OUT_WIDTH = IN_WIDTH + 16
) (
    /*
     * Inputs x[0..7]: x[k] in bits [k*IN_WIDTH +: IN_WIDTH]
     */
    input  wire [8*IN_WIDTH-1:0]  in_data,

    /*
     * Outputs y[0..7], scaled by 2^13 and not descaled: y[k] in bits [k*OUT_WIDTH +: OUT_WIDTH]
     */
    output wire [8*OUT_WIDTH-1:0] out_data
);

// round(c * 2^13) for the rotation constants (CONST_BITS = 13).
localparam signed [15:0] K_0_298631336 = 16'sd2446;
localparam signed [15:0] K_0_390180644 = 16'sd3196;
localparam signed [15:0] K_0_541196100 = 16'sd4433;
localparam signed [15:0] K_0_765366865 = 16'sd6270;
localparam signed [15:0] K_0_899976223 = 16'sd7373;
localparam signed [15:0] K_1_175875602 = 16'sd9633;
localparam signed [15:0] K_1_501321110 = 16'sd12299;
localparam signed [15:0] K_1_847759065 = 16'sd15137;
localparam signed [15:0] K_1_961570560 = 16'sd16069;
localparam signed [15:0] K_2_053119869 = 16'sd16819;
localparam signed [15:0] K_2_562915447 = 16'sd20995;
localparam signed [15:0] K_3_072711026 = 16'sd25172;

// The whole network is one always block rather than a net per term: an event-driven simulator
// then evaluates it once per input change instead of once per path through it.
reg signed [OUT_WIDTH-1:0] x0, x1, x2, x3, x4, x5, x6, x7;
reg signed [OUT_WIDTH-1:0] rot26, even_t0, even_t1, even_t2, even_t3;
reg signed [OUT_WIDTH-1:0] even_10, even_11, even_12, even_13;
reg signed [OUT_WIDTH-1:0] sum_71, sum_53, sum_73, sum_51, rot_all;
reg signed [OUT_WIDTH-1:0] part_71, part_53, part_73, part_51;
reg signed [OUT_WIDTH-1:0] odd_7, odd_5, odd_3, odd_1;
reg [8*OUT_WIDTH-1:0] out_data_int;

assign out_data = out_data_int;

always @* begin
    // Inputs sign-extended to the working width, so every sum and product below is exact.
    x0 = $signed(in_data[0*IN_WIDTH +: IN_WIDTH]);
    x1 = $signed(in_data[1*IN_WIDTH +: IN_WIDTH]);
    x2 = $signed(in_data[2*IN_WIDTH +: IN_WIDTH]);
    x3 = $signed(in_data[3*IN_WIDTH +: IN_WIDTH]);
    x4 = $signed(in_data[4*IN_WIDTH +: IN_WIDTH]);
    x5 = $signed(in_data[5*IN_WIDTH +: IN_WIDTH]);
    x6 = $signed(in_data[6*IN_WIDTH +: IN_WIDTH]);
    x7 = $signed(in_data[7*IN_WIDTH +: IN_WIDTH]);

    // Even part: the rotation of x2/x6 and the butterflies with x0/x4.
    rot26 = (x2 + x6) * K_0_541196100;
    even_t2 = rot26 - x6 * K_1_847759065;
    even_t3 = rot26 + x2 * K_0_765366865;
    even_t0 = (x0 + x4) <<< 13;
    even_t1 = (x0 - x4) <<< 13;
    even_10 = even_t0 + even_t3;
    even_13 = even_t0 - even_t3;
    even_11 = even_t1 + even_t2;
    even_12 = even_t1 - even_t2;

    // Odd part: pair sums of x7, x5, x3, x1, their shared rotation and the per-input rotations.
    sum_71 = x7 + x1;
    sum_53 = x5 + x3;
    sum_73 = x7 + x3;
    sum_51 = x5 + x1;
    rot_all = (sum_73 + sum_51) * K_1_175875602;
    part_71 = -(sum_71 * K_0_899976223);
    part_53 = -(sum_53 * K_2_562915447);
    part_73 = rot_all - sum_73 * K_1_961570560;
    part_51 = rot_all - sum_51 * K_0_390180644;
    odd_7 = x7 * K_0_298631336 + part_71 + part_73;
    odd_5 = x5 * K_2_053119869 + part_53 + part_51;
    odd_3 = x3 * K_3_072711026 + part_53 + part_73;
    odd_1 = x1 * K_1_501321110 + part_71 + part_51;

    // Final butterflies.
    out_data_int = {
        even_10 - odd_1, even_11 - odd_3, even_12 - odd_5, even_13 - odd_7,
        even_13 + odd_7, even_12 + odd_5, even_11 + odd_3, even_10 + odd_1
    };
end

endmodule

`resetall
`default_nettype wire
