`resetall
`timescale 1ns / 1ps
`default_nettype none

// The image CU's post-decode unit: resize (OpenCV INTER_LINEAR, 11-bit weights) -> centre crop ->
// normalise, on an RGB pixel stream, bit-exact with the C model hls/image/image_postdecode.cpp.
//
// ap_start takes the frame's dimensions and output format; the unit then reads src_h x src_w
// pixels (row-major, AXI-stream) and writes one beat per pixel of the centred crop_h x crop_w
// window of the dst_h x dst_w resized frame, row-major, and pulses ap_done after the last one.
// Only what the window needs is computed: the column taps of its columns (resize_tap_gen, before
// the first pixel), and per source row the horizontal pass over the window's columns when a
// window row reads that row, then the vertical pass of every window row whose lower source row
// it is. Phases follow each other: a source row takes src_w cycles to read, plus crop_w cycles
// per pass it feeds (and a few to fill each pipeline). The output has an 8-entry FIFO.
//
// Formats: 0 uint8 (lane k = channel k's byte), 1 float32 and 2 float16 of the normalised value
// (px / 255 - mean[c]) / std[c] (image_norm_rom, from NumPy). Dimensions are at least 1, the
// crop no larger than the resized frame, widths at most MAX_WIDTH; dst = src is the identity.
module image_postdecode #(
    // Line buffer and tap table depth: the widest source and crop, in pixels.
    parameter MAX_WIDTH = 8192,
    // Width of a dimension or index, in bits (dimensions up to 2^DIM_WIDTH - 1).
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
     * Pixels in: channel k in bits [8k +: 8]
     */
    input  wire [31:0] s_axis_tdata,
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
localparam [3:0] STATE_IDLE = 4'd0, STATE_SETUP = 4'd1, STATE_SETUP_WAIT = 4'd2, STATE_COLUMN_TAPS = 4'd3,
                 STATE_READ = 4'd4, STATE_HPASS = 4'd5, STATE_EMIT_CHECK = 4'd6, STATE_VPASS = 4'd7,
                 STATE_ROW_TAP = 4'd8, STATE_NEXT_ROW = 4'd9, STATE_DRAIN = 4'd10;

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

// Frame arguments, and the crop window's offsets (torchvision's placement).
reg [3:0]           state_reg = STATE_IDLE, state_next;
reg [DIM_WIDTH-1:0] src_h_reg = 0, src_w_reg = 0, dst_h_reg = 0, dst_w_reg = 0;
reg [DIM_WIDTH-1:0] crop_h_reg = 0, crop_w_reg = 0;
reg [1:0]           format_reg = 0;
wire [DIM_WIDTH-1:0] top = center_offset(dst_h_reg, crop_h_reg);
wire [DIM_WIDTH-1:0] left = center_offset(dst_w_reg, crop_w_reg);

// Progress: the source row being read and its column, the window row to emit next and its row
// tap, the columns a pass has issued, the column taps written, and the beats owed (issued to the
// vertical pass and not yet taken from the FIFO).
reg [DIM_WIDTH-1:0] row_reg = 0, row_next;
reg [DIM_WIDTH-1:0] column_reg = 0, column_next;
reg [DIM_WIDTH-1:0] out_row_reg = 0, out_row_next;
reg [DIM_WIDTH-1:0] issue_reg = 0, issue_next;
reg [DIM_WIDTH-1:0] taps_in_reg = 0;
reg                 row_tap_wait_reg = 1'b0;
reg [DIM_WIDTH-1:0] ty_src0_reg = 0, ty_src1_reg = 0;
reg [11:0]          ty_w0_reg = 0, ty_w1_reg = 0;
reg [3:0]           owed_reg = 0;
reg                 done_reg = 1'b0;

// Column and row tap generators (set up at the start of a frame, idle while taps are in flight).
wire                 x_ready, y_ready, x_valid, y_valid;
wire [DIM_WIDTH-1:0] x_src0, x_src1, y_src0, y_src1;
wire [11:0]          x_w0, x_w1, y_w0, y_w1;
wire                 setup_valid = state_reg == STATE_SETUP;
wire                 x_tap_valid = state_reg == STATE_COLUMN_TAPS && issue_reg < crop_w_reg;
wire [DIM_WIDTH-1:0] x_tap_d = left + issue_reg;
reg                  y_tap_valid;
wire [DIM_WIDTH-1:0] y_tap_d = top + out_row_next;

resize_tap_gen #(
    .CLAMP_WEIGHT(1),
    .DIM_WIDTH(DIM_WIDTH)
)
x_gen_inst (
    .clk(ap_clk), .rst(ap_rst), .setup_valid(setup_valid), .setup_src(src_w_reg), .setup_dst(dst_w_reg),
    .ready(x_ready), .tap_valid(x_tap_valid), .tap_d(x_tap_d), .out_valid(x_valid), .out_src0(x_src0),
    .out_src1(x_src1), .out_w0(x_w0), .out_w1(x_w1)
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

// Memories: the source row (two copies, one per read port of the horizontal pass), the window's
// column taps {w1, w0, src1, src0}, and the horizontal passes of the last even and odd source
// rows over the window's columns (three 19-bit sums each).
reg [23:0]              line_a_mem [0:MAX_WIDTH-1];
reg [23:0]              line_b_mem [0:MAX_WIDTH-1];
reg [2*DIM_WIDTH+23:0]  tap_mem [0:MAX_WIDTH-1];
reg [56:0]              hrow0_mem [0:MAX_WIDTH-1];
reg [56:0]              hrow1_mem [0:MAX_WIDTH-1];

// Horizontal pass pipeline: h1 the column's tap, h2 its two source pixels, h3 the sums.
reg                     h1_valid_reg = 1'b0, h2_valid_reg = 1'b0, h3_valid_reg = 1'b0;
reg [DIM_WIDTH-1:0]     h1_index_reg = 0, h2_index_reg = 0, h3_index_reg = 0;
reg [2*DIM_WIDTH+23:0]  h1_tap_reg = 0;
reg [23:0]              h2_a_reg = 0, h2_b_reg = 0, h2_weights_reg = 0;
reg [56:0]              h3_sums_reg = 0;

// Vertical pass pipeline: v1 both rows' sums, v2 the resized pixel, v3 its table entries.
reg                     v1_valid_reg = 1'b0, v2_valid_reg = 1'b0, v3_valid_reg = 1'b0;
reg [56:0]              v1_row0_reg = 0, v1_row1_reg = 0;
reg [23:0]              v2_pixel_reg = 0, v3_pixel_reg = 0;
wire [31:0]             f32_0, f32_1, f32_2;
wire [15:0]             f16_0, f16_1, f16_2;

image_norm_rom norm_rom_inst (
    .clk(ap_clk), .ce(1'b1), .pixel(v2_pixel_reg), .f32_0(f32_0), .f32_1(f32_1), .f32_2(f32_2),
    .f16_0(f16_0), .f16_1(f16_1), .f16_2(f16_2)
);

// Output FIFO; `owed` never exceeds its depth, so it cannot overflow.
reg [95:0] fifo_mem [0:FIFO_DEPTH-1];
reg [3:0]  fifo_wr_reg = 0, fifo_rd_reg = 0;
wire       out_fire = m_axis_tvalid && m_axis_tready;
wire       in_fire = s_axis_tvalid && s_axis_tready;
wire       h_issue = state_reg == STATE_HPASS && issue_reg < crop_w_reg;
wire       v_issue = state_reg == STATE_VPASS && issue_reg < crop_w_reg && owed_reg < FIFO_DEPTH;
wire       h_busy = h1_valid_reg || h2_valid_reg || h3_valid_reg;
wire       v_busy = v1_valid_reg || v2_valid_reg || v3_valid_reg;
wire       window_row_pending = out_row_reg < crop_h_reg;

assign m_axis_tvalid = fifo_wr_reg != fifo_rd_reg;
assign m_axis_tdata = fifo_mem[fifo_rd_reg[2:0]];
assign s_axis_tready = state_reg == STATE_READ;
assign ap_idle = state_reg == STATE_IDLE;
assign ap_ready = state_reg == STATE_IDLE && ap_start;
assign ap_done = done_reg;

always @* begin
    state_next = state_reg;
    row_next = row_reg;
    column_next = column_reg;
    out_row_next = out_row_reg;
    issue_next = issue_reg;
    y_tap_valid = 1'b0;

    case (state_reg)
        STATE_IDLE: begin
            if (ap_start) state_next = STATE_SETUP;
        end
        STATE_SETUP: begin
            state_next = STATE_SETUP_WAIT;
        end
        STATE_SETUP_WAIT: begin
            if (x_ready && y_ready) begin
                state_next = STATE_COLUMN_TAPS;
                issue_next = 0;
                out_row_next = 0;
                y_tap_valid = 1'b1;  // the first window row's tap
            end
        end
        STATE_COLUMN_TAPS: begin
            if (x_tap_valid) issue_next = issue_reg + 1'b1;
            if (taps_in_reg == crop_w_reg && !row_tap_wait_reg) begin
                state_next = STATE_READ;
                row_next = 0;
                column_next = 0;
            end
        end
        STATE_READ: begin
            if (in_fire) begin
                column_next = column_reg + 1'b1;
                if (column_reg == src_w_reg - 1'b1) begin
                    column_next = 0;
                    issue_next = 0;
                    state_next = window_row_pending && row_reg >= ty_src0_reg ? STATE_HPASS : STATE_NEXT_ROW;
                end
            end
        end
        STATE_HPASS: begin
            if (h_issue) issue_next = issue_reg + 1'b1;
            if (!h_issue && !h_busy) state_next = STATE_EMIT_CHECK;
        end
        STATE_EMIT_CHECK: begin
            issue_next = 0;
            state_next = window_row_pending && ty_src1_reg == row_reg ? STATE_VPASS : STATE_NEXT_ROW;
        end
        STATE_VPASS: begin
            if (v_issue) issue_next = issue_reg + 1'b1;
            if (issue_reg == crop_w_reg && !v_busy) begin
                out_row_next = out_row_reg + 1'b1;
                if (out_row_reg + 1'b1 < crop_h_reg) begin
                    y_tap_valid = 1'b1;
                    state_next = STATE_ROW_TAP;
                end else begin
                    state_next = STATE_EMIT_CHECK;
                end
            end
        end
        STATE_ROW_TAP: begin
            if (!row_tap_wait_reg) state_next = STATE_EMIT_CHECK;
        end
        STATE_NEXT_ROW: begin
            if (row_reg == src_h_reg - 1'b1) begin
                state_next = STATE_DRAIN;
            end else begin
                row_next = row_reg + 1'b1;
                state_next = STATE_READ;
            end
        end
        STATE_DRAIN: begin
            if (owed_reg == 0) state_next = STATE_IDLE;
        end
        default: state_next = STATE_IDLE;
    endcase
end

always @(posedge ap_clk) begin
    state_reg <= state_next;
    row_reg <= row_next;
    column_reg <= column_next;
    out_row_reg <= out_row_next;
    issue_reg <= issue_next;
    done_reg <= state_reg == STATE_DRAIN && owed_reg == 0;

    if (state_reg == STATE_IDLE && ap_start) begin
        src_h_reg <= src_h[DIM_WIDTH-1:0];
        src_w_reg <= src_w[DIM_WIDTH-1:0];
        dst_h_reg <= dst_h[DIM_WIDTH-1:0];
        dst_w_reg <= dst_w[DIM_WIDTH-1:0];
        crop_h_reg <= crop_h[DIM_WIDTH-1:0];
        crop_w_reg <= crop_w[DIM_WIDTH-1:0];
        format_reg <= format[1:0];
        taps_in_reg <= 0;
    end
    if (x_valid) taps_in_reg <= taps_in_reg + 1'b1;
    if (y_tap_valid) row_tap_wait_reg <= 1'b1;
    if (y_valid) begin
        row_tap_wait_reg <= 1'b0;
        {ty_w1_reg, ty_w0_reg, ty_src1_reg, ty_src0_reg} <= {y_w1, y_w0, y_src1, y_src0};
    end
    owed_reg <= owed_reg + v_issue - out_fire;
    if (out_fire) fifo_rd_reg <= fifo_rd_reg + 1'b1;

    // Horizontal pass (stage registers load only behind valid data).
    h1_valid_reg <= h_issue;
    h1_index_reg <= issue_reg;
    h2_valid_reg <= h1_valid_reg;
    h2_index_reg <= h1_index_reg;
    h2_weights_reg <= h1_tap_reg[2*DIM_WIDTH +: 24];
    h3_valid_reg <= h2_valid_reg;
    h3_index_reg <= h2_index_reg;
    if (h2_valid_reg) begin
        h3_sums_reg <= {horizontal(h2_a_reg[23:16], h2_b_reg[23:16], h2_weights_reg[11:0], h2_weights_reg[23:12]),
                        horizontal(h2_a_reg[15:8], h2_b_reg[15:8], h2_weights_reg[11:0], h2_weights_reg[23:12]),
                        horizontal(h2_a_reg[7:0], h2_b_reg[7:0], h2_weights_reg[11:0], h2_weights_reg[23:12])};
    end

    // Vertical pass: rows by the parity of the window row's source rows.
    v1_valid_reg <= v_issue;
    v2_valid_reg <= v1_valid_reg;
    v3_valid_reg <= v2_valid_reg;
    if (v1_valid_reg) begin
        v2_pixel_reg <= {vertical(ty_src0_reg[0] ? v1_row1_reg[56:38] : v1_row0_reg[56:38],
                                  ty_src1_reg[0] ? v1_row1_reg[56:38] : v1_row0_reg[56:38], ty_w0_reg, ty_w1_reg),
                         vertical(ty_src0_reg[0] ? v1_row1_reg[37:19] : v1_row0_reg[37:19],
                                  ty_src1_reg[0] ? v1_row1_reg[37:19] : v1_row0_reg[37:19], ty_w0_reg, ty_w1_reg),
                         vertical(ty_src0_reg[0] ? v1_row1_reg[18:0] : v1_row0_reg[18:0],
                                  ty_src1_reg[0] ? v1_row1_reg[18:0] : v1_row0_reg[18:0], ty_w0_reg, ty_w1_reg)};
    end
    v3_pixel_reg <= v2_pixel_reg;
    if (v3_valid_reg) begin
        fifo_mem[fifo_wr_reg[2:0]] <= format_reg == 2'd1 ? {f32_2, f32_1, f32_0}
                                    : format_reg == 2'd2 ? {16'd0, f16_2, 16'd0, f16_1, 16'd0, f16_0}
                                    : {24'd0, v3_pixel_reg[23:16], 24'd0, v3_pixel_reg[15:8], 24'd0, v3_pixel_reg[7:0]};
        fifo_wr_reg <= fifo_wr_reg + 1'b1;
    end

    if (ap_rst) begin
        state_reg <= STATE_IDLE;
        done_reg <= 1'b0;
        row_tap_wait_reg <= 1'b0;
        owed_reg <= 0;
        fifo_wr_reg <= 0;
        fifo_rd_reg <= 0;
        h1_valid_reg <= 1'b0;
        h2_valid_reg <= 1'b0;
        h3_valid_reg <= 1'b0;
        v1_valid_reg <= 1'b0;
        v2_valid_reg <= 1'b0;
        v3_valid_reg <= 1'b0;
    end
end

// The memories: registered reads, one write port each (no reset: read only once written).
always @(posedge ap_clk) begin
    if (in_fire) begin
        line_a_mem[column_reg] <= s_axis_tdata[23:0];
        line_b_mem[column_reg] <= s_axis_tdata[23:0];
    end
    if (x_valid) tap_mem[taps_in_reg] <= {x_w1, x_w0, x_src1, x_src0};
    h1_tap_reg <= tap_mem[issue_reg];
    h2_a_reg <= line_a_mem[h1_tap_reg[DIM_WIDTH-1:0]];
    h2_b_reg <= line_b_mem[h1_tap_reg[DIM_WIDTH +: DIM_WIDTH]];
    if (h3_valid_reg && !row_reg[0]) hrow0_mem[h3_index_reg] <= h3_sums_reg;
    if (h3_valid_reg && row_reg[0]) hrow1_mem[h3_index_reg] <= h3_sums_reg;
    v1_row0_reg <= hrow0_mem[issue_reg];
    v1_row1_reg <= hrow1_mem[issue_reg];
end

endmodule

`resetall
`default_nettype wire
