`resetall
`timescale 1ns / 1ps
`default_nettype none

// The image CU's post-decode unit: resize (OpenCV INTER_LINEAR, 11-bit weights) -> centre crop ->
// normalise, on an RGB pixel stream, bit-exact with the C model hls/image/image_postdecode.cpp.
//
// ap_start takes the frame's dimensions and output format; the unit then reads src_h rows of
// src_w pixels, PIXELS_PER_BEAT to a beat (row-major, AXI-stream; a row's last beat may hold
// fewer), and writes one beat per pixel of the centred crop_h x crop_w window of the dst_h x dst_w
// resized frame, row-major, and pulses ap_done after the last one. Only what the window needs is
// computed: the column taps of its columns (resize_tap_gen, before the first pixel), the
// horizontal pass over the window's columns of each source row a remaining window row can read,
// and the vertical pass of every window row when its lower source row is done.
//
// Three engines overlap, row by row: the reader fills one of two line buffers at a beat a cycle
// (two source pixels with PIXELS_PER_BEAT = 2); the horizontal pass works on the other, two
// window columns a cycle, into one of three row-sum buffers; the vertical pass emits a pixel a
// cycle from the two row sums its window row reads while the next row's horizontal pass fills
// the third. A source row costs max(src_w / PIXELS_PER_BEAT, crop_w / 2, crop_w per window row it
// completes) cycles plus a few to fill pipelines: downscaling to a crop (the image CU's case),
// the reader sets the pace. The output has an 8-entry FIFO.
//
// Formats: 0 uint8 (lane k = channel k's byte), 1 float32 and 2 float16 of the normalised value
// (px / 255 - mean[c]) / std[c] (image_norm_rom, from NumPy). Dimensions are at least 1, the
// crop no larger than the resized frame, widths at most MAX_WIDTH; dst = src is the identity.
module image_postdecode #(
    // Line buffer and tap table depth: the widest source and crop, in pixels.
    parameter MAX_WIDTH = 8192,
    // Width of a dimension or index, in bits (dimensions up to 2^DIM_WIDTH - 1).
    parameter DIM_WIDTH = 14,
    // Source pixels a beat: 2 (the image CU, behind upsample_color) or 1.
    parameter PIXELS_PER_BEAT = 2
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
     * Frame arguments (C uint32_t; only the low DIM_WIDTH bits, format's low 2, are used)
     */
    input  wire [31:0] src_h,
    input  wire [31:0] src_w,
    input  wire [31:0] dst_h,
    input  wire [31:0] dst_w,
    input  wire [31:0] crop_h,
    input  wire [31:0] crop_w,
    input  wire [31:0] format,

    /*
     * Pixels in: channel k of the beat's pixel j in bits [32j + 8k +: 8]
     */
    input  wire [32*PIXELS_PER_BEAT-1:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * Beats out: lane k (channel k) in bits [32k +: 32]
     */
    output wire [95:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

localparam FIFO_DEPTH = 8;
localparam HALF_WIDTH = MAX_WIDTH / 2;
localparam TAP_BITS = 2 * DIM_WIDTH + 24;   // {w1, w0, src1, src0}
localparam [2:0] STATE_IDLE = 3'd0, STATE_SETUP = 3'd1, STATE_SETUP_WAIT = 3'd2, STATE_COLUMN_TAPS = 3'd3,
                 STATE_RUN = 3'd4, STATE_DONE = 3'd5;
localparam [1:0] H_IDLE = 2'd0, H_ISSUE = 2'd1, H_DRAIN = 2'd2;
localparam [1:0] V_CHECK = 2'd0, V_ISSUE = 2'd1, V_DRAIN = 2'd2, V_TAP = 2'd3;

function [DIM_WIDTH-1:0] center_offset;
    input [DIM_WIDTH-1:0] size;
    input [DIM_WIDTH-1:0] crop;
    reg   [DIM_WIDTH-1:0] excess;
    begin
        excess = size - crop;
        // x.5 rounds to the even neighbour
        center_offset = (excess[0] && excess[1]) ? (excess >> 1) + 1'b1 : excess >> 1;
    end
endfunction

// One channel of OpenCV's vertical pass: ((r0 >> 4) * w0 >> 16) + ((r1 >> 4) * w1 >> 16), + 2,
// >> 2, saturated to 255 (the sums are never negative).
function [7:0] vertical;
    input [18:0] r0;
    input [18:0] r1;
    input [11:0] w0;
    input [11:0] w1;
    reg   [26:0] p0, p1;
    reg   [11:0] v;
    begin
        p0 = r0[18:4] * w0;
        p1 = r1[18:4] * w1;
        v = ({1'b0, p0[26:16]} + {1'b0, p1[26:16]} + 12'd2) >> 2;
        vertical = v > 12'd255 ? 8'd255 : v[7:0];
    end
endfunction

// One channel of the horizontal pass: a * w0 + b * w1 (at most 255 * 2049 < 2^19).
function [18:0] horizontal;
    input [7:0]  a;
    input [7:0]  b;
    input [11:0] w0;
    input [11:0] w1;
    begin
        horizontal = {11'd0, a} * {7'd0, w0} + {11'd0, b} * {7'd0, w1};
    end
endfunction

// A pixel's place in a line memory: buffer b's half, then the pixel's pair.
function [DIM_WIDTH-1:0] line_addr;
    input                 buffer;
    input [DIM_WIDTH-1:0] pixel;
    begin
        line_addr = (buffer ? HALF_WIDTH : 0) + pixel[DIM_WIDTH-1:1];
    end
endfunction

function [1:0] next_slot;
    input [1:0] slot;
    begin
        next_slot = slot == 2'd2 ? 2'd0 : slot + 1'b1;
    end
endfunction

// Frame arguments, and the crop window's offsets (torchvision's placement).
reg [2:0]           state_reg = STATE_IDLE, state_next;
reg [DIM_WIDTH-1:0] src_h_reg = 0, src_w_reg = 0, dst_h_reg = 0, dst_w_reg = 0;
reg [DIM_WIDTH-1:0] crop_h_reg = 0, crop_w_reg = 0;
reg [1:0]           format_reg = 0;
wire [DIM_WIDTH-1:0] top = center_offset(dst_h_reg, crop_h_reg);
wire [DIM_WIDTH-1:0] left = center_offset(dst_w_reg, crop_w_reg);
wire                run = state_reg == STATE_RUN;

// Setup: the column taps written and the row tap in flight.
reg [DIM_WIDTH-1:0] taps_in_reg = 0, taps_issued_reg = 0;
reg                 row_tap_wait_reg = 1'b0;
reg                 done_reg = 1'b0;

// Progress of the three engines, in source rows completed: read (the reader may run two rows
// ahead of the horizontal pass: two line buffers), horizontal (one row ahead of the vertical
// pass's rows, which read row sums of that row and the one before: three buffers).
reg [DIM_WIDTH-1:0] rd_row_reg = 0, rd_col_reg = 0;
reg [DIM_WIDTH-1:0] h_row_reg = 0, v_row_reg = 0;
reg [1:0]           h_slot_reg = 0, v_slot_reg = 0, v_prev_slot_reg = 0;

// Column and row tap generators (set up at the start of a frame, idle while taps are in flight).
wire                 x_ready, y_ready, x_valid, y_valid;
wire [DIM_WIDTH-1:0] x_src0, x_src1, y_src0, y_src1;
wire [11:0]          x_w0, x_w1, y_w0, y_w1;
wire                 setup_valid = state_reg == STATE_SETUP;
wire                 x_tap_valid = state_reg == STATE_COLUMN_TAPS && taps_issued_reg < crop_w_reg;
reg                  y_tap_valid;
reg [DIM_WIDTH-1:0]  y_tap_d;
reg [DIM_WIDTH-1:0]  out_row_reg = 0;
reg [DIM_WIDTH-1:0]  ty_src0_reg = 0, ty_src1_reg = 0;
reg [11:0]           ty_w0_reg = 0, ty_w1_reg = 0;

resize_tap_gen #(
    .CLAMP_WEIGHT(1),
    .DIM_WIDTH(DIM_WIDTH)
)
x_gen_inst (
    .clk(ap_clk), .rst(ap_rst), .setup_valid(setup_valid), .setup_src(src_w_reg), .setup_dst(dst_w_reg),
    .ready(x_ready), .tap_valid(x_tap_valid), .tap_d(left + taps_issued_reg), .out_valid(x_valid),
    .out_src0(x_src0), .out_src1(x_src1), .out_w0(x_w0), .out_w1(x_w1)
);

resize_tap_gen #(
    .CLAMP_WEIGHT(0),
    .DIM_WIDTH(DIM_WIDTH)
)
y_gen_inst (
    .clk(ap_clk), .rst(ap_rst), .setup_valid(setup_valid), .setup_src(src_h_reg), .setup_dst(dst_h_reg),
    .ready(y_ready), .tap_valid(y_tap_valid), .tap_d(y_tap_d), .out_valid(y_valid), .out_src0(y_src0),
    .out_src1(y_src1), .out_w0(y_w0), .out_w1(y_w1)
);

// Memories. Line buffers: per horizontal lane (window columns 2i and 2i+1) a copy of the even and
// of the odd source pixels, both line buffers in one memory ({buffer, pixel / 2}): a column's two
// taps are adjacent pixels (or one), so each lane reads each copy once a cycle. Column taps of
// the window's even and odd columns. Row sums: three buffers of the window's columns in pairs
// (three 19-bit sums a column).
reg [23:0]          line_e0_mem [0:MAX_WIDTH-1];
reg [23:0]          line_o0_mem [0:MAX_WIDTH-1];
reg [23:0]          line_e1_mem [0:MAX_WIDTH-1];
reg [23:0]          line_o1_mem [0:MAX_WIDTH-1];
reg [TAP_BITS-1:0]  tap_e_mem [0:HALF_WIDTH-1];
reg [TAP_BITS-1:0]  tap_o_mem [0:HALF_WIDTH-1];
reg [113:0]         sums0_mem [0:HALF_WIDTH-1];
reg [113:0]         sums1_mem [0:HALF_WIDTH-1];
reg [113:0]         sums2_mem [0:HALF_WIDTH-1];

// Reader.
wire in_fire = s_axis_tvalid && s_axis_tready;
wire [DIM_WIDTH-1:0] rd_ahead = rd_row_reg - h_row_reg;
assign s_axis_tready = run && rd_row_reg < src_h_reg && rd_ahead < 2;
wire rd_row_end = rd_col_reg + PIXELS_PER_BEAT >= src_w_reg;

// Horizontal pass: h1 the columns' taps, h2 their source pixels, h3 the sums.
reg [1:0]           h_state_reg = H_IDLE;
reg [DIM_WIDTH-1:0] h_issue_reg = 0;
wire                h_issue = h_state_reg == H_ISSUE;
reg                 h1_valid_reg = 1'b0, h2_valid_reg = 1'b0, h3_valid_reg = 1'b0;
reg [DIM_WIDTH-2:0] h1_pair_reg = 0, h2_pair_reg = 0, h3_pair_reg = 0;
reg [TAP_BITS-1:0]  h1_tap_e_reg = 0, h1_tap_o_reg = 0;
reg [23:0]          h2_e0_reg = 0, h2_o0_reg = 0, h2_e1_reg = 0, h2_o1_reg = 0;
reg                 h2_a0_odd_reg = 0, h2_b0_odd_reg = 0, h2_a1_odd_reg = 0, h2_b1_odd_reg = 0;
reg [47:0]          h2_weights_reg = 0;
reg [113:0]         h3_sums_reg = 0;
wire                h_busy = h1_valid_reg || h2_valid_reg || h3_valid_reg;
wire [DIM_WIDTH-1:0] h_ahead = h_row_reg - v_row_reg;
wire                h_may_start = run && h_row_reg < src_h_reg && rd_row_reg != h_row_reg && h_ahead <= 1;
wire                h_needed = out_row_reg < crop_h_reg && h_row_reg >= ty_src0_reg;

// Where a lane's two taps sit in the even and odd copies.
wire [DIM_WIDTH-1:0] t0_s0 = h1_tap_e_reg[0 +: DIM_WIDTH], t0_s1 = h1_tap_e_reg[DIM_WIDTH +: DIM_WIDTH];
wire [DIM_WIDTH-1:0] t1_s0 = h1_tap_o_reg[0 +: DIM_WIDTH], t1_s1 = h1_tap_o_reg[DIM_WIDTH +: DIM_WIDTH];
wire [DIM_WIDTH-1:0] t0_even = t0_s0[0] ? t0_s1 : t0_s0, t0_odd = t0_s0[0] ? t0_s0 : t0_s1;
wire [DIM_WIDTH-1:0] t1_even = t1_s0[0] ? t1_s1 : t1_s0, t1_odd = t1_s0[0] ? t1_s0 : t1_s1;
wire                 h_buffer = h_row_reg[0];

// Vertical pass: v1 the two rows' sums, v2 the resized pixel, v3 its table entries.
reg [1:0]           v_state_reg = V_CHECK;
reg [DIM_WIDTH-1:0] v_issue_reg = 0;
reg                 v1_valid_reg = 1'b0, v2_valid_reg = 1'b0, v3_valid_reg = 1'b0;
reg                 v1_odd_reg = 1'b0;
reg [113:0]         v1_sums0_reg = 0, v1_sums1_reg = 0, v1_sums2_reg = 0;
reg [23:0]          v2_pixel_reg = 0, v3_pixel_reg = 0;
reg [1:0]           ty_slot0_reg = 0, ty_slot1_reg = 0;
wire [31:0]         f32_0, f32_1, f32_2;
wire [15:0]         f16_0, f16_1, f16_2;
reg [3:0]           owed_reg = 0;
wire                v_issue = v_state_reg == V_ISSUE && v_issue_reg < crop_w_reg && owed_reg < FIFO_DEPTH;
wire                v_busy = v1_valid_reg || v2_valid_reg || v3_valid_reg;

image_norm_rom norm_rom_inst (
    .clk(ap_clk), .ce(1'b1), .pixel(v2_pixel_reg), .f32_0(f32_0), .f32_1(f32_1), .f32_2(f32_2),
    .f16_0(f16_0), .f16_1(f16_1), .f16_2(f16_2)
);

// Output FIFO; `owed` never exceeds its depth, so it cannot overflow.
reg [95:0] fifo_mem [0:FIFO_DEPTH-1];
reg [3:0]  fifo_wr_reg = 0, fifo_rd_reg = 0;
wire       out_fire = m_axis_tvalid && m_axis_tready;

assign m_axis_tvalid = fifo_wr_reg != fifo_rd_reg;
assign m_axis_tdata = fifo_mem[fifo_rd_reg[2:0]];
assign ap_idle = state_reg == STATE_IDLE;
assign ap_ready = state_reg == STATE_IDLE && ap_start;
assign ap_done = done_reg;

// The row sums of a window row's source rows, from the v1 words (column pair, half by parity).
function [56:0] sums_of;
    input [1:0]   slot;
    input         odd;
    input [113:0] s0, s1, s2;
    reg   [113:0] word;
    begin
        word = slot == 2'd0 ? s0 : slot == 2'd1 ? s1 : s2;
        sums_of = odd ? word[113:57] : word[56:0];
    end
endfunction

always @* begin
    state_next = state_reg;
    y_tap_valid = 1'b0;
    y_tap_d = top + out_row_reg + 1'b1;
    case (state_reg)
        STATE_IDLE: if (ap_start) state_next = STATE_SETUP;
        STATE_SETUP: state_next = STATE_SETUP_WAIT;
        STATE_SETUP_WAIT: begin
            if (x_ready && y_ready) begin
                state_next = STATE_COLUMN_TAPS;
                y_tap_valid = 1'b1;  // the first window row's tap
                y_tap_d = top;
            end
        end
        STATE_COLUMN_TAPS: if (taps_in_reg == crop_w_reg && !row_tap_wait_reg) state_next = STATE_RUN;
        STATE_RUN: if (v_row_reg == src_h_reg && owed_reg == 0 && !v_busy) state_next = STATE_DONE;
        STATE_DONE: state_next = STATE_IDLE;
        default: state_next = STATE_IDLE;
    endcase
    // The vertical pass asks for the next window row's tap when it finishes one.
    if (v_state_reg == V_ISSUE && v_issue_reg == crop_w_reg && !v_busy && out_row_reg + 1'b1 < crop_h_reg) begin
        y_tap_valid = 1'b1;
    end
end

always @(posedge ap_clk) begin
    state_reg <= state_next;
    done_reg <= state_reg == STATE_DONE;

    if (state_reg == STATE_IDLE && ap_start) begin
        src_h_reg <= src_h[DIM_WIDTH-1:0];
        src_w_reg <= src_w[DIM_WIDTH-1:0];
        dst_h_reg <= dst_h[DIM_WIDTH-1:0];
        dst_w_reg <= dst_w[DIM_WIDTH-1:0];
        crop_h_reg <= crop_h[DIM_WIDTH-1:0];
        crop_w_reg <= crop_w[DIM_WIDTH-1:0];
        format_reg <= format[1:0];
        taps_in_reg <= 0;
        taps_issued_reg <= 0;
        rd_row_reg <= 0;
        rd_col_reg <= 0;
        h_row_reg <= 0;
        v_row_reg <= 0;
        h_slot_reg <= 0;
        v_slot_reg <= 0;
        v_prev_slot_reg <= 2'd2;
        out_row_reg <= 0;
        h_state_reg <= H_IDLE;
        v_state_reg <= V_CHECK;
    end
    if (x_tap_valid) taps_issued_reg <= taps_issued_reg + 1'b1;
    if (x_valid) taps_in_reg <= taps_in_reg + 1'b1;
    if (y_tap_valid) row_tap_wait_reg <= 1'b1;
    if (y_valid) begin
        row_tap_wait_reg <= 1'b0;
        {ty_w1_reg, ty_w0_reg, ty_src1_reg, ty_src0_reg} <= {y_w1, y_w0, y_src1, y_src0};
    end

    // Reader.
    if (in_fire) begin
        rd_col_reg <= rd_row_end ? {DIM_WIDTH{1'b0}} : rd_col_reg + PIXELS_PER_BEAT;
        if (rd_row_end) rd_row_reg <= rd_row_reg + 1'b1;
    end

    // Horizontal pass: a row the remaining window rows cannot read is skipped.
    case (h_state_reg)
        H_IDLE: begin
            if (h_may_start) begin
                h_issue_reg <= 0;
                if (h_needed) begin
                    h_state_reg <= H_ISSUE;
                end else begin
                    h_row_reg <= h_row_reg + 1'b1;
                    h_slot_reg <= next_slot(h_slot_reg);
                end
            end
        end
        H_ISSUE: begin
            h_issue_reg <= h_issue_reg + 2'd2;
            if (h_issue_reg + 2'd2 >= crop_w_reg) h_state_reg <= H_DRAIN;
        end
        H_DRAIN: begin
            if (!h_busy) begin
                h_row_reg <= h_row_reg + 1'b1;
                h_slot_reg <= next_slot(h_slot_reg);
                h_state_reg <= H_IDLE;
            end
        end
        default: h_state_reg <= H_IDLE;
    endcase
    h1_valid_reg <= h_issue;
    h1_pair_reg <= h_issue_reg[DIM_WIDTH-1:1];
    h2_valid_reg <= h1_valid_reg;
    h2_pair_reg <= h1_pair_reg;
    h2_weights_reg <= {h1_tap_o_reg[2*DIM_WIDTH +: 24], h1_tap_e_reg[2*DIM_WIDTH +: 24]};
    {h2_b1_odd_reg, h2_a1_odd_reg, h2_b0_odd_reg, h2_a0_odd_reg} <= {t1_s1[0], t1_s0[0], t0_s1[0], t0_s0[0]};
    h3_valid_reg <= h2_valid_reg;
    h3_pair_reg <= h2_pair_reg;
    if (h2_valid_reg) begin
        h3_sums_reg <= {
            horizontal(h2_a1_odd_reg ? h2_o1_reg[23:16] : h2_e1_reg[23:16], h2_b1_odd_reg ? h2_o1_reg[23:16] : h2_e1_reg[23:16],
                       h2_weights_reg[35:24], h2_weights_reg[47:36]),
            horizontal(h2_a1_odd_reg ? h2_o1_reg[15:8] : h2_e1_reg[15:8], h2_b1_odd_reg ? h2_o1_reg[15:8] : h2_e1_reg[15:8],
                       h2_weights_reg[35:24], h2_weights_reg[47:36]),
            horizontal(h2_a1_odd_reg ? h2_o1_reg[7:0] : h2_e1_reg[7:0], h2_b1_odd_reg ? h2_o1_reg[7:0] : h2_e1_reg[7:0],
                       h2_weights_reg[35:24], h2_weights_reg[47:36]),
            horizontal(h2_a0_odd_reg ? h2_o0_reg[23:16] : h2_e0_reg[23:16], h2_b0_odd_reg ? h2_o0_reg[23:16] : h2_e0_reg[23:16],
                       h2_weights_reg[11:0], h2_weights_reg[23:12]),
            horizontal(h2_a0_odd_reg ? h2_o0_reg[15:8] : h2_e0_reg[15:8], h2_b0_odd_reg ? h2_o0_reg[15:8] : h2_e0_reg[15:8],
                       h2_weights_reg[11:0], h2_weights_reg[23:12]),
            horizontal(h2_a0_odd_reg ? h2_o0_reg[7:0] : h2_e0_reg[7:0], h2_b0_odd_reg ? h2_o0_reg[7:0] : h2_e0_reg[7:0],
                       h2_weights_reg[11:0], h2_weights_reg[23:12])};
    end

    // Vertical pass: every window row whose lower source row is this one, then the next row.
    case (v_state_reg)
        V_CHECK: begin
            if (run && h_row_reg != v_row_reg) begin
                v_issue_reg <= 0;
                if (out_row_reg < crop_h_reg && ty_src1_reg == v_row_reg) begin
                    v_state_reg <= V_ISSUE;
                    // The upper source row is this one (clamped at the top) or the one before.
                    ty_slot0_reg <= ty_src0_reg == v_row_reg ? v_slot_reg : v_prev_slot_reg;
                    ty_slot1_reg <= v_slot_reg;
                end else begin
                    v_row_reg <= v_row_reg + 1'b1;
                    v_prev_slot_reg <= v_slot_reg;
                    v_slot_reg <= next_slot(v_slot_reg);
                end
            end
        end
        V_ISSUE: begin
            if (v_issue) v_issue_reg <= v_issue_reg + 1'b1;
            if (v_issue_reg == crop_w_reg && !v_busy) begin
                out_row_reg <= out_row_reg + 1'b1;
                v_state_reg <= out_row_reg + 1'b1 < crop_h_reg ? V_TAP : V_CHECK;
            end
        end
        V_TAP: if (!row_tap_wait_reg) v_state_reg <= V_CHECK;
        default: v_state_reg <= V_CHECK;
    endcase
    v1_valid_reg <= v_issue;
    v1_odd_reg <= v_issue_reg[0];
    v2_valid_reg <= v1_valid_reg;
    v3_valid_reg <= v2_valid_reg;
    if (v1_valid_reg) begin : vertical_pass
        reg [56:0] r0, r1;
        r0 = sums_of(ty_slot0_reg, v1_odd_reg, v1_sums0_reg, v1_sums1_reg, v1_sums2_reg);
        r1 = sums_of(ty_slot1_reg, v1_odd_reg, v1_sums0_reg, v1_sums1_reg, v1_sums2_reg);
        v2_pixel_reg <= {vertical(r0[56:38], r1[56:38], ty_w0_reg, ty_w1_reg),
                         vertical(r0[37:19], r1[37:19], ty_w0_reg, ty_w1_reg),
                         vertical(r0[18:0], r1[18:0], ty_w0_reg, ty_w1_reg)};
    end
    v3_pixel_reg <= v2_pixel_reg;
    if (v3_valid_reg) begin
        fifo_mem[fifo_wr_reg[2:0]] <= format_reg == 2'd1 ? {f32_2, f32_1, f32_0}
                                    : format_reg == 2'd2 ? {16'd0, f16_2, 16'd0, f16_1, 16'd0, f16_0}
                                    : {24'd0, v3_pixel_reg[23:16], 24'd0, v3_pixel_reg[15:8], 24'd0, v3_pixel_reg[7:0]};
        fifo_wr_reg <= fifo_wr_reg + 1'b1;
    end
    owed_reg <= owed_reg + v_issue - out_fire;
    if (out_fire) fifo_rd_reg <= fifo_rd_reg + 1'b1;

    if (ap_rst) begin
        state_reg <= STATE_IDLE;
        done_reg <= 1'b0;
        row_tap_wait_reg <= 1'b0;
        owed_reg <= 0;
        fifo_wr_reg <= 0;
        fifo_rd_reg <= 0;
        h_state_reg <= H_IDLE;
        v_state_reg <= V_CHECK;
        h1_valid_reg <= 1'b0;
        h2_valid_reg <= 1'b0;
        h3_valid_reg <= 1'b0;
        v1_valid_reg <= 1'b0;
        v2_valid_reg <= 1'b0;
        v3_valid_reg <= 1'b0;
    end
end

// The memories: registered reads, one write port each (no reset: read only once written).
wire [DIM_WIDTH-1:0] wr_pixel0 = rd_col_reg;
wire [DIM_WIDTH-1:0] wr_pixel1 = rd_col_reg + 1'b1;
always @(posedge ap_clk) begin
    if (in_fire) begin
        if (PIXELS_PER_BEAT == 2) begin
            line_e0_mem[line_addr(rd_row_reg[0], wr_pixel0)] <= s_axis_tdata[23:0];
            line_e1_mem[line_addr(rd_row_reg[0], wr_pixel0)] <= s_axis_tdata[23:0];
            line_o0_mem[line_addr(rd_row_reg[0], wr_pixel1)] <= s_axis_tdata[32*PIXELS_PER_BEAT-9 -: 24];
            line_o1_mem[line_addr(rd_row_reg[0], wr_pixel1)] <= s_axis_tdata[32*PIXELS_PER_BEAT-9 -: 24];
        end else if (!wr_pixel0[0]) begin
            line_e0_mem[line_addr(rd_row_reg[0], wr_pixel0)] <= s_axis_tdata[23:0];
            line_e1_mem[line_addr(rd_row_reg[0], wr_pixel0)] <= s_axis_tdata[23:0];
        end else begin
            line_o0_mem[line_addr(rd_row_reg[0], wr_pixel0)] <= s_axis_tdata[23:0];
            line_o1_mem[line_addr(rd_row_reg[0], wr_pixel0)] <= s_axis_tdata[23:0];
        end
    end
    if (x_valid && !taps_in_reg[0]) tap_e_mem[taps_in_reg[DIM_WIDTH-1:1]] <= {x_w1, x_w0, x_src1, x_src0};
    if (x_valid && taps_in_reg[0]) tap_o_mem[taps_in_reg[DIM_WIDTH-1:1]] <= {x_w1, x_w0, x_src1, x_src0};
    h1_tap_e_reg <= tap_e_mem[h_issue_reg[DIM_WIDTH-1:1]];
    h1_tap_o_reg <= tap_o_mem[h_issue_reg[DIM_WIDTH-1:1]];
    h2_e0_reg <= line_e0_mem[line_addr(h_buffer, t0_even)];
    h2_o0_reg <= line_o0_mem[line_addr(h_buffer, t0_odd)];
    h2_e1_reg <= line_e1_mem[line_addr(h_buffer, t1_even)];
    h2_o1_reg <= line_o1_mem[line_addr(h_buffer, t1_odd)];
    if (h3_valid_reg && h_slot_reg == 2'd0) sums0_mem[h3_pair_reg] <= h3_sums_reg;
    if (h3_valid_reg && h_slot_reg == 2'd1) sums1_mem[h3_pair_reg] <= h3_sums_reg;
    if (h3_valid_reg && h_slot_reg == 2'd2) sums2_mem[h3_pair_reg] <= h3_sums_reg;
    v1_sums0_reg <= sums0_mem[v_issue_reg[DIM_WIDTH-1:1]];
    v1_sums1_reg <= sums1_mem[v_issue_reg[DIM_WIDTH-1:1]];
    v1_sums2_reg <= sums2_mem[v_issue_reg[DIM_WIDTH-1:1]];
end

endmodule

`resetall
`default_nettype wire
