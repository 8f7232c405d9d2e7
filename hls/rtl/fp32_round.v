`resetall
`timescale 1ns / 1ps
`default_nettype none

// The last step of a binary32 add or multiply: round to nearest even and pack (combinational).
//
// The significand comes normalised with guard, round and sticky bits below it; a carry out of the
// rounding moves into the exponent field (up to infinity) by itself. Specials and overflow are
// decided by the caller.
module fp32_round (
    /*
     * The result when special is high (NaN, infinity or zero, decided from the operands)
     */
    input  wire        special,
    input  wire [31:0] special_value,

    /*
     * The finite result: overflow (beyond the largest finite: infinity), sign, biased exponent
     * field (0 for a subnormal), significand {hidden bit, 23 fraction bits, guard, round, sticky}
     */
    input  wire        overflow,
    input  wire        sign,
    input  wire [7:0]  exp_field,
    input  wire [26:0] mant,

    output wire [31:0] result
);

wire        round_up = mant[2] && (mant[1] || mant[0] || mant[3]);
wire [30:0] rounded = {exp_field, mant[25:3]} + {30'd0, round_up};

assign result = special ? special_value : overflow ? {sign, 31'h7F800000} : {sign, rounded};

endmodule

`resetall
`default_nettype wire
