`resetall
`timescale 1ns / 1ps
`default_nettype none

// The image CU's upsampling + colour unit: libjpeg(-turbo)'s "fancy" chroma upsampling (h2v1,
// h2v2, h1v2; box replication for components 2 samples wide or less) and its fixed-point
// YCbCr -> RGB, two output pixels a cycle, bit-exact with the C model
// hls/image/upsample_color.cpp (jpeg_upsample.h, jpeg_color.h).
//
// ap_start takes the frame's width, height and mode word (per component ci: bit 2ci subsampled
// horizontally, bit 2ci+1 vertically; bit 6 grayscale, R = G = B = Y; bit 7 RGB, no conversion).
// Per output row the unit reads P = ceil(width / 2) column beats: lane ci (bits 32ci+31..32ci) is
// component ci's {far b, far a, near b, near a} bytes, `a` = column p of a subsampled component,
// `a`, `b` = columns 2p, 2p+1 of a full-width one; `far` is the next-nearest plane row of a
// vertically subsampled one. It writes P pixel-pair beats (pixel 2p in bits 23..0, 2p+1 in
// 55..32, an odd width's missing pixel 0). Pair p leaves when column p+1 has arrived (a
// subsampled component's right neighbour), the row's last pair one cycle after its last beat:
// P + 1 cycles a row. The output has an 8-entry FIFO; the row parity decides h1v2's bias.
module upsample_color #(
    // Width of a dimension or index, in bits.
    parameter DIM_WIDTH = 14
) (
    /*
     * Clock and synchronous active-high reset
     */
    input  wire        ap_clk,
    input  wire        ap_rst,

    /*
     * Block control: ap_start takes the arguments below; ap_done pulses after the frame's last beat
     */
    input  wire        ap_start,
    output wire        ap_ready,
    output wire        ap_done,
    output wire        ap_idle,

    /*
     * Frame arguments (C uint32_t; only the low DIM_WIDTH bits, mode's low 8, are used)
     */
    input  wire [31:0] width,
    input  wire [31:0] height,
    input  wire [31:0] mode,

    /*
     * Column beats in
     */
    input  wire [95:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * Pixel pairs out: channel k of pixel j in bits [32j + 8k +: 8]
     */
    output wire [63:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

localparam FIFO_DEPTH = 8;
localparam [1:0] STATE_IDLE = 2'd0, STATE_ROW = 2'd1, STATE_FLUSH = 2'd2, STATE_DRAIN = 2'd3;

// libjpeg's FIX() of the conversion constants (16 fraction bits) and ONE_HALF.
localparam signed [31:0] FIX_1_40200 = 32'sd91881, FIX_1_77200 = 32'sd116130;
localparam signed [31:0] FIX_0_71414 = 32'sd46802, FIX_0_34414 = 32'sd22554, ONE_HALF = 32'sd32768;

// One output sample of a component: `odd` picks pixel 2q+1. m1/n0/p1 are the near (and f* the
// far) samples of subsampled columns q-1, q, q+1; a/b, fa/fb a full-width component's columns
// 2q, 2q+1. narrow: the component is 2 samples wide or less (P <= 2); first/last: q = 0 / P-1.
function [7:0] sample;
    input       h2, v2, odd, narrow, first, last, lower;
    input [7:0] m1, n0, p1, fm1, f0, fp1, a, b, fa, fb;
    reg   [9:0] cur, side;
    reg   [11:0] t;
    begin
        cur = 3 * n0 + f0;
        if (h2 && (narrow || (!v2 && (odd ? last : first)))) begin
            sample = n0;
        end else if (h2 && !v2) begin
            t = 3 * n0 + (odd ? p1 : m1) + (odd ? 2 : 1);
            sample = t[9:2];
        end else if (h2) begin
            side = odd ? 3 * p1 + fp1 : 3 * m1 + fm1;
            t = (odd ? last : first) ? 4 * cur + (odd ? 7 : 8) : 3 * cur + side + (odd ? 7 : 8);
            sample = t[11:4];
        end else if (v2) begin
            t = 3 * (odd ? b : a) + (odd ? fb : fa) + (lower ? 2 : 1);
            sample = t[9:2];
        end else begin
            sample = odd ? b : a;
        end
    end
endfunction

function [7:0] clamp;
    input signed [31:0] v;
    begin
        clamp = v < 0 ? 8'd0 : v > 255 ? 8'd255 : v[7:0];
    end
endfunction

// libjpeg's ycc_rgb_convert of one pixel, or the grayscale / RGB pass-through.
function [23:0] color;
    input [7:0] y, cb, cr;
    input       gray, rgb;
    reg signed [31:0] x_cb, x_cr;
    begin
        x_cb = $signed({24'd0, cb}) - 32'sd128;
        x_cr = $signed({24'd0, cr}) - 32'sd128;
        if (gray) color = {y, y, y};
        else if (rgb) color = {cr, cb, y};
        else color = {clamp($signed({24'd0, y}) + ((FIX_1_77200 * x_cb + ONE_HALF) >>> 16)),
                      clamp($signed({24'd0, y}) + ((ONE_HALF - FIX_0_34414 * x_cb - FIX_0_71414 * x_cr) >>> 16)),
                      clamp($signed({24'd0, y}) + ((FIX_1_40200 * x_cr + ONE_HALF) >>> 16))};
    end
endfunction

reg [1:0]           state_reg = STATE_IDLE, state_next;
reg [DIM_WIDTH-1:0] pairs_reg = 0, height_reg = 0;
reg                 odd_width_reg = 1'b0;
reg [7:0]           mode_reg = 0;
reg [DIM_WIDTH-1:0] column_reg = 0, row_reg = 0;
reg [95:0]          prev_reg = 0, cur_reg = 0;
reg [3:0]           owed_reg = 0;
reg                 done_reg = 1'b0;

// Launch: pair q's three column beats and where it sits in its row.
reg                 l_valid_reg = 1'b0;
reg [95:0]          l_prev_reg = 0, l_cur_reg = 0, l_next_reg = 0;
reg                 l_first_reg = 1'b0, l_last_reg = 1'b0, l_lower_reg = 1'b0, l_half_reg = 1'b0;
// Stage 2: the two pixels' samples; stage 3: their colours.
reg                 s_valid_reg = 1'b0, s_half_reg = 1'b0;
reg [47:0]          s_samples_reg = 0;
reg [63:0]          fifo_mem [0:FIFO_DEPTH-1];
reg [3:0]           fifo_wr_reg = 0, fifo_rd_reg = 0;

wire out_fire = m_axis_tvalid && m_axis_tready;
wire room = owed_reg < FIFO_DEPTH;
wire in_fire = s_axis_tvalid && s_axis_tready;
wire row_end = column_reg == pairs_reg - 1'b1;
// A beat launches the pair to its left; the flush cycle launches the row's last pair.
wire launch = (in_fire && column_reg != 0) || (state_reg == STATE_FLUSH && room);

assign s_axis_tready = state_reg == STATE_ROW && (column_reg == 0 || room);
assign m_axis_tvalid = fifo_wr_reg != fifo_rd_reg;
assign m_axis_tdata = fifo_mem[fifo_rd_reg[2:0]];
assign ap_idle = state_reg == STATE_IDLE;
assign ap_ready = state_reg == STATE_IDLE && ap_start;
assign ap_done = done_reg;

always @* begin
    state_next = state_reg;
    case (state_reg)
        STATE_IDLE: if (ap_start) state_next = height[DIM_WIDTH-1:0] == 0 ? STATE_DRAIN : STATE_ROW;
        STATE_ROW: if (in_fire && row_end) state_next = STATE_FLUSH;
        STATE_FLUSH: if (room) state_next = row_reg == height_reg - 1'b1 ? STATE_DRAIN : STATE_ROW;
        STATE_DRAIN: if (owed_reg == 0 && !l_valid_reg && !s_valid_reg) state_next = STATE_IDLE;
        default: state_next = STATE_IDLE;
    endcase
end

integer ci;
always @(posedge ap_clk) begin
    state_reg <= state_next;
    done_reg <= state_reg == STATE_DRAIN && state_next == STATE_IDLE;

    if (state_reg == STATE_IDLE && ap_start) begin
        pairs_reg <= (width[DIM_WIDTH-1:0] + 1'b1) >> 1;
        odd_width_reg <= width[0];
        height_reg <= height[DIM_WIDTH-1:0];
        mode_reg <= mode[7:0];
        column_reg <= 0;
        row_reg <= 0;
    end
    if (in_fire) begin
        column_reg <= row_end ? {DIM_WIDTH{1'b0}} : column_reg + 1'b1;
        prev_reg <= cur_reg;
        cur_reg <= s_axis_tdata;
    end
    if (state_reg == STATE_FLUSH && room) row_reg <= row_reg + 1'b1;

    // Launch registers: pair q's columns q-1, q are prev and cur when column q+1 arrives (before
    // the shift), and when the flush launches the row's last pair (after it; its right
    // neighbour, the beat lanes then, is never read).
    l_valid_reg <= launch;
    if (launch) begin
        l_prev_reg <= prev_reg;
        l_cur_reg <= cur_reg;
        l_next_reg <= s_axis_tdata;
        l_first_reg <= in_fire ? column_reg == 1 : pairs_reg == 1;
        l_last_reg <= !in_fire;
        l_lower_reg <= row_reg[0];
        l_half_reg <= !in_fire && odd_width_reg;
    end

    s_valid_reg <= l_valid_reg;
    s_half_reg <= l_half_reg;
    if (l_valid_reg) begin
        for (ci = 0; ci < 3; ci = ci + 1) begin
            s_samples_reg[8*ci +: 8] <= sample(mode_reg[2*ci], mode_reg[2*ci+1], 1'b0, pairs_reg <= 2, l_first_reg,
                                               l_last_reg, l_lower_reg, l_prev_reg[32*ci +: 8], l_cur_reg[32*ci +: 8],
                                               l_next_reg[32*ci +: 8], l_prev_reg[32*ci+16 +: 8],
                                               l_cur_reg[32*ci+16 +: 8], l_next_reg[32*ci+16 +: 8],
                                               l_cur_reg[32*ci +: 8], l_cur_reg[32*ci+8 +: 8],
                                               l_cur_reg[32*ci+16 +: 8], l_cur_reg[32*ci+24 +: 8]);
            s_samples_reg[24+8*ci +: 8] <= sample(mode_reg[2*ci], mode_reg[2*ci+1], 1'b1, pairs_reg <= 2, l_first_reg,
                                                  l_last_reg, l_lower_reg, l_prev_reg[32*ci +: 8], l_cur_reg[32*ci +: 8],
                                                  l_next_reg[32*ci +: 8], l_prev_reg[32*ci+16 +: 8],
                                                  l_cur_reg[32*ci+16 +: 8], l_next_reg[32*ci+16 +: 8],
                                                  l_cur_reg[32*ci +: 8], l_cur_reg[32*ci+8 +: 8],
                                                  l_cur_reg[32*ci+16 +: 8], l_cur_reg[32*ci+24 +: 8]);
        end
    end

    if (s_valid_reg) begin
        fifo_mem[fifo_wr_reg[2:0]] <= {8'd0, s_half_reg ? 24'd0
                                                : color(s_samples_reg[24 +: 8], s_samples_reg[32 +: 8], s_samples_reg[40 +: 8],
                                                        mode_reg[6], mode_reg[7]),
                                       8'd0, color(s_samples_reg[0 +: 8], s_samples_reg[8 +: 8], s_samples_reg[16 +: 8],
                                                   mode_reg[6], mode_reg[7])};
        fifo_wr_reg <= fifo_wr_reg + 1'b1;
    end
    if (out_fire) fifo_rd_reg <= fifo_rd_reg + 1'b1;
    owed_reg <= owed_reg + launch - out_fire;

    if (ap_rst) begin
        state_reg <= STATE_IDLE;
        done_reg <= 1'b0;
        owed_reg <= 0;
        fifo_wr_reg <= 0;
        fifo_rd_reg <= 0;
        l_valid_reg <= 1'b0;
        s_valid_reg <= 1'b0;
        column_reg <= 0;
    end
end

endmodule

`resetall
`default_nettype wire
