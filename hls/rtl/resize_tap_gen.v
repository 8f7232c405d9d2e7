`resetall
`timescale 1ns / 1ps
`default_nettype none

// OpenCV INTER_LINEAR taps (source indices and 11-bit weights) of one resize axis, bit-exact with
// resize_tap() in hls/image/resize.h without float64 hardware.
//
// OpenCV computes the source coordinate of destination index d as
// (float)((d + 0.5) * (1.0 / ((double)dst / src)) - 0.5) in float64. Setup finds the float64
// significands of dst / src and of its reciprocal, the scale, by two restoring divisions (one bit
// per cycle, about 190 cycles); each tap then multiplies the scale's significand by 2d + 1 exactly
// and repeats float64's roundings on integers (the product to 53 bits, the difference with 0.5 to
// 53 bits, then float32's 24), and OpenCV's float32 steps in fixed point: floor, fraction,
// 1 - fraction, both times 2^11 rounded to nearest even. One tap per cycle, LATENCY = 5 cycles;
// a new setup waits until no tap is in flight (the pipeline reads the setup's results).
module resize_tap_gen #(
    // 1: columns (OpenCV's x table: an out-of-range neighbour's weight moves onto the edge pixel);
    // 0: rows (its y table: weights kept, indices clamped).
    parameter CLAMP_WEIGHT = 1,
    // Width of a dimension or index, in bits (dimensions up to 2^DIM_WIDTH - 1).
    parameter DIM_WIDTH = 14
) (
    /*
     * Clock and synchronous active-high reset
     */
    input  wire                 clk,
    input  wire                 rst,

    /*
     * Setup: the axis's source and destination sizes (>= 1), taken when setup_valid and ready
     */
    input  wire                 setup_valid,
    input  wire [DIM_WIDTH-1:0] setup_src,
    input  wire [DIM_WIDTH-1:0] setup_dst,
    output wire                 ready,

    /*
     * Tap requests (any time ready is high) and the taps, LATENCY cycles later
     */
    input  wire                 tap_valid,
    input  wire [DIM_WIDTH-1:0] tap_d,
    output wire                 out_valid,
    output wire [DIM_WIDTH-1:0] out_src0,
    output wire [DIM_WIDTH-1:0] out_src1,
    output wire [11:0]          out_w0,
    output wire [11:0]          out_w1
);

localparam [1:0] STATE_IDLE = 2'd0, STATE_RATIO = 2'd1, STATE_SCALE = 2'd2, STATE_READY = 2'd3;
localparam W = 72;  // wide enough for every fixed-point value of a tap (at most 2^67)

// Setup: restoring division state. A quotient is complete when it reaches 53 bits and the
// numerator's bits are used up (dst's own bits for the ratio, a single 1 for the scale).
reg [1:0]           state_reg = STATE_IDLE, state_next;
reg [DIM_WIDTH-1:0] src_reg = 0, src_next;
reg [DIM_WIDTH-1:0] dst_reg = 0, dst_next;
reg [DIM_WIDTH-1:0] last_reg = 0, last_next;   // src - 1
reg [7:0]           bits_left_reg = 0, bits_left_next;  // numerator bits still to bring down
reg [53:0]          rem_reg = 0, rem_next;
reg [53:0]          quot_reg = 0, quot_next;
reg [7:0]           frac_bits_reg = 0, frac_bits_next;  // quotient bits below the binary point
reg [52:0]          ratio_reg = 0, ratio_next;          // significand of dst / src
reg [7:0]           ratio_frac_reg = 0, ratio_frac_next;
reg [52:0]          scale_reg = 0, scale_next;          // significand of the scale
reg [7:0]           grid_reg = 0, grid_next;            // -(scale's exponent - 1): t's fraction bits

assign ready = state_reg == STATE_READY;

reg [53:0] den, rem_shift, quot_rounded;
reg        bit_in, round_up;

always @* begin
    state_next = state_reg;
    src_next = src_reg;
    dst_next = dst_reg;
    last_next = last_reg;
    bits_left_next = bits_left_reg;
    rem_next = rem_reg;
    quot_next = quot_reg;
    frac_bits_next = frac_bits_reg;
    ratio_next = ratio_reg;
    ratio_frac_next = ratio_frac_reg;
    scale_next = scale_reg;
    grid_next = grid_reg;

    den = state_reg == STATE_RATIO ? {{(54-DIM_WIDTH){1'b0}}, src_reg} : {1'b0, ratio_reg};
    bit_in = state_reg == STATE_RATIO ? bits_left_reg != 0 && dst_reg[bits_left_reg - 8'd1] : bits_left_reg != 0;
    rem_shift = {rem_reg[52:0], bit_in};
    quot_rounded = quot_reg + 54'd1;
    round_up = {rem_reg, 1'b0} > {1'b0, den} || ({rem_reg, 1'b0} == {1'b0, den} && quot_reg[0]);

    case (state_reg)
        STATE_IDLE, STATE_READY: begin
            if (setup_valid) begin
                state_next = STATE_RATIO;
                src_next = setup_src;
                dst_next = setup_dst;
                last_next = setup_src - 1'b1;
                bits_left_next = DIM_WIDTH;
                rem_next = 0;
                quot_next = 0;
                frac_bits_next = 0;
            end
        end
        STATE_RATIO, STATE_SCALE: begin
            if (bits_left_reg != 0 || !quot_reg[52]) begin
                // Bring down the next numerator bit (zeros past the numerator).
                rem_next = rem_shift >= den ? rem_shift - den : rem_shift;
                quot_next = {quot_reg[52:0], rem_shift >= den};
                if (bits_left_reg != 0) begin
                    bits_left_next = bits_left_reg - 8'd1;
                end else begin
                    frac_bits_next = frac_bits_reg + 8'd1;
                end
            end else if (state_reg == STATE_RATIO) begin
                // Round to nearest even (a carry out of 53 bits halves the significand).
                ratio_next = round_up ? (quot_rounded[53] ? quot_rounded[53:1] : quot_rounded[52:0]) : quot_reg[52:0];
                ratio_frac_next = round_up && quot_rounded[53] ? frac_bits_reg - 8'd1 : frac_bits_reg;
                state_next = STATE_SCALE;
                bits_left_next = 8'd1;  // the numerator of 1 / ratio
                rem_next = 0;
                quot_next = 0;
                frac_bits_next = 0;
            end else begin
                // scale = q * 2^-frac_bits / (ratio * 2^-ratio_frac); t = (2d + 1) * scale / 2.
                scale_next = round_up ? (quot_rounded[53] ? quot_rounded[53:1] : quot_rounded[52:0]) : quot_reg[52:0];
                grid_next = frac_bits_reg - ratio_frac_reg + 8'd1 - (round_up && quot_rounded[53]);
                state_next = STATE_READY;
            end
        end
    endcase
end

always @(posedge clk) begin
    state_reg <= state_next;
    src_reg <= src_next;
    dst_reg <= dst_next;
    last_reg <= last_next;
    bits_left_reg <= bits_left_next;
    rem_reg <= rem_next;
    quot_reg <= quot_next;
    frac_bits_reg <= frac_bits_next;
    ratio_reg <= ratio_next;
    ratio_frac_reg <= ratio_frac_next;
    scale_reg <= scale_next;
    grid_reg <= grid_next;
    if (rst) begin
        state_reg <= STATE_IDLE;
    end
end

// Number of significant bits of v.
function [7:0] bit_length;
    input [W-1:0] v;
    reg [W-1:0] probe;
    begin
        probe = v;
        bit_length = 0;
        if (probe[W-1:64] != 0) begin bit_length = bit_length + 8'd64; probe = probe >> 64; end
        if (probe[63:32] != 0) begin bit_length = bit_length + 8'd32; probe = probe >> 32; end
        if (probe[31:16] != 0) begin bit_length = bit_length + 8'd16; probe = probe >> 16; end
        if (probe[15:8] != 0) begin bit_length = bit_length + 8'd8; probe = probe >> 8; end
        if (probe[7:4] != 0) begin bit_length = bit_length + 8'd4; probe = probe >> 4; end
        if (probe[3:2] != 0) begin bit_length = bit_length + 8'd2; probe = probe >> 2; end
        if (probe[1] != 0) begin bit_length = bit_length + 8'd1; probe = probe >> 1; end
        bit_length = bit_length + probe[0];
    end
endfunction

// v with its bits below 2^position rounded off to nearest even (v stays on its own grid).
function [W-1:0] round_at;
    input [W-1:0] v;
    input [7:0]   position;
    reg   [W-1:0] unit, rem;
    begin
        if (position == 0) begin
            round_at = v;
        end else begin
            unit = {{(W-1){1'b0}}, 1'b1} << position;
            rem = v & (unit - 1'b1);
            round_at = v - rem;
            if (rem > (unit >> 1) || (rem == (unit >> 1) && (round_at & unit) != 0)) round_at = round_at + unit;
        end
    end
endfunction

// v rounded to nearest even at `bits` significant bits.
function [W-1:0] round_significant;
    input [W-1:0] v;
    input [7:0]   bits;
    reg   [7:0]   size;
    begin
        size = bit_length(v);
        round_significant = size > bits ? round_at(v, size - bits) : v;
    end
endfunction

// The tap pipeline: a: 2d + 1; b: times the scale, rounded to 53 bits (t on the grid);
// c: |t - 0.5|, rounded to 53 then 24 bits (fx); d: floor, the float32 fraction, the clamps;
// e: the weights and indices.
reg [4:0]           valid_reg = 0;
reg [DIM_WIDTH:0]   a_odd_reg = 0;
reg [W-1:0]         b_t_reg = 0;
reg [W-1:0]         c_x_reg = 0;
reg                 c_negative_reg = 1'b0;
reg signed [DIM_WIDTH+1:0] d_sx_reg = 0;
reg [W-1:0]         d_frac_reg = 0;  // the fraction on the grid, <= 2^grid
reg [DIM_WIDTH-1:0] src0_reg = 0, src1_reg = 0;
reg [11:0]          w0_reg = 0, w1_reg = 0;

assign out_valid = valid_reg[4];
assign out_src0 = src0_reg;
assign out_src1 = src1_reg;
assign out_w0 = w0_reg;
assign out_w1 = w1_reg;

reg [W-1:0] one, half_grid, difference, frac, complement;
reg signed [DIM_WIDTH+1:0] sx, last_signed;

always @* begin
    one = {{(W-1){1'b0}}, 1'b1} << grid_reg;
    half_grid = one >> 1;
    difference = b_t_reg < half_grid ? half_grid - b_t_reg : b_t_reg - half_grid;

    // fx = -+c_x * 2^-grid. A negative fx lies in (-0.5, 0): floor -1, and the fraction fx + 1
    // rounds to float32's 24 bits; a non-negative one splits exactly.
    if (c_negative_reg) begin
        sx = -1;
        frac = round_at(one - c_x_reg, grid_reg - 8'd24);
    end else begin
        sx = c_x_reg >> grid_reg;
        frac = c_x_reg & (one - 1'b1);
    end
    last_signed = {2'b00, last_reg};
    if (CLAMP_WEIGHT && sx < 0) begin
        sx = 0;
        frac = 0;
    end
    if (CLAMP_WEIGHT && sx >= last_signed) begin
        sx = last_signed;
        frac = 0;
    end

    // 1 - fraction in float32: exact from 0.5 down, rounded to 24 bits above (and 1 for 0).
    complement = one - d_frac_reg;
    if (d_frac_reg != 0 && complement > half_grid) complement = round_at(complement, grid_reg - 8'd24);
end

// Each stage's registers load only behind a valid tap (no toggling, and a fast simulation).
always @(posedge clk) begin
    valid_reg <= {valid_reg[3:0], tap_valid};
    if (tap_valid) begin
        a_odd_reg <= {tap_d, 1'b1};
    end
    if (valid_reg[0]) begin
        b_t_reg <= round_significant({{(W-DIM_WIDTH-1){1'b0}}, a_odd_reg} * {{(W-53){1'b0}}, scale_reg}, 53);
    end
    if (valid_reg[1]) begin
        c_negative_reg <= b_t_reg < half_grid;
        c_x_reg <= round_significant(round_significant(difference, 53), 24);
    end
    if (valid_reg[2]) begin
        d_sx_reg <= sx;
        d_frac_reg <= frac;
    end
    if (valid_reg[3]) begin
        w1_reg <= round_at(d_frac_reg, grid_reg - 8'd11) >> (grid_reg - 8'd11);
        w0_reg <= round_at(complement, grid_reg - 8'd11) >> (grid_reg - 8'd11);
        src0_reg <= d_sx_reg < 0 ? 0 : (d_sx_reg > last_signed ? last_reg : d_sx_reg[DIM_WIDTH-1:0]);
        src1_reg <= d_sx_reg + 1 < 0 ? 0 : (d_sx_reg + 1 > last_signed ? last_reg : d_sx_reg[DIM_WIDTH-1:0] + 1'b1);
    end
    if (rst) begin
        valid_reg <= 0;
    end
end

endmodule

`resetall
`default_nettype wire
