`resetall
`timescale 1ns / 1ps
`default_nettype none

// The image CU's MCU-row strip: jpeg_decode_core's sample rows in (each block's 8 rows, blocks in
// scan order), upsample_color's column beats out (output rows in raster order, one beat a
// cycle), bit-exact with the C model hls/image/jpeg_mcu_strip.cpp. It replaces the frame store
// between the two: MCU rows stay on chip.
//
// Storage: per component two banks (even and odd plane rows), each a ring of 3 MCU-row slots of
// 8 line pairs x MAX_WIDTH / 8 words of 8 samples. A vertically subsampled component's output
// row reads its nearest and next-nearest plane rows, which differ by one (opposite banks) or are
// the same row (the image's first and last rows): one read port a bank serves both every cycle.
// The writer fills MCU row m into slot m mod 3 while the reader's current output row needs no
// MCU row before m - 2; the reader starts output row y once every MCU row it reads is complete.
// An output row reads at most two adjacent MCU rows, so neither waits for the other for ever.
//
// ap_start takes width, height, sampling (per component c: bit 2c h = 2, bit 2c+1 v = 2),
// n_components and the upsample mode word (bit 2c: subsampled horizontally, 2c+1: vertically);
// the unit reads exactly mcus_x * mcus_y MCUs of rows (jpeg_decode_core pads a CORRUPT scan's)
// and writes height * ceil(width / 2) beats; ap_done pulses after the last beat has left. Lane c
// (bits 32c+31..32c) of a beat is {far b, far a, near b, near a} for output pixels 2p, 2p+1
// (a = b = column p of a subsampled component; columns 2p, 2p+1 of a full-width one); `far` is 0
// where the component is not vertically subsampled, absent components' lanes are 0. Per row: three
// setup cycles, a wait for its MCU rows, then one beat a cycle; 2 cycles of pipeline.
module jpeg_mcu_strip #(
    // Widest frame, in pixels (a multiple of 16; its strips are 6 banks of 3 * MAX_WIDTH words).
    parameter MAX_WIDTH = 8192,
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
     * Frame arguments (C uint32_t; the low DIM_WIDTH bits of the sizes are used)
     */
    input  wire [31:0] width,
    input  wire [31:0] height,
    input  wire [31:0] sampling,
    input  wire [31:0] n_components,
    input  wire [31:0] mode,

    /*
     * Sample rows in: sample k in [8k+7:8k]
     */
    input  wire [63:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * Column beats out: lane c in [32c+31:32c]
     */
    output wire [95:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

localparam WORDS = MAX_WIDTH / 8;           // 8-sample words of a plane line
localparam WB = $clog2(WORDS);
localparam AW = 2 + 3 + WB;                 // {slot, line pair, word}
localparam DEPTH = 3 * 8 * (1 << WB);          // slots of 8 line pairs of 2^WB words
localparam DW = DIM_WIDTH;

localparam [2:0] R_IDLE = 3'd0, R_INIT = 3'd1, R_ROWS = 3'd2, R_SLOTS = 3'd3, R_SPAN = 3'd4, R_WAIT = 3'd5,
                 R_BEATS = 3'd6, R_DRAIN = 3'd7;

// x mod 3, a bit at a time from the top.
function [1:0] mod3(input [DW-1:0] x);
    integer i;
    reg [2:0] r;
    begin
        r = 3'd0;
        for (i = DW - 1; i >= 0; i = i - 1) begin
            r = {r[1:0], x[i]};
            if (r >= 3'd3) r = r - 3'd3;
        end
        mod3 = r[1:0];
    end
endfunction

reg  [2:0]    state_reg = R_IDLE;
reg  [DW-1:0] width_reg = 0, height_reg = 0, mcus_x_reg = 0, mcus_y_reg = 0;
reg  [DW-1:0] last_pair_reg = 0, last_row_reg = 0;  // a row's last pair, the last row (off the stall path)
reg  [5:0]    sampling_reg = 6'd0;
reg  [5:0]    mode_reg = 6'd0;
reg  [1:0]    ncomp_reg = 2'd0;
reg  [DW-1:0] comp_rows_reg [0:2];          // plane rows of each component
reg           done_reg = 1'b0;

wire hmax2 = |{sampling_reg[4], sampling_reg[2], sampling_reg[0]};
wire vmax2 = |{sampling_reg[5], sampling_reg[3], sampling_reg[1]};

assign ap_idle = state_reg == R_IDLE;
assign ap_ready = ap_idle && ap_start;
assign ap_done = done_reg;

/*
 * Writer: MCU row wmy into slot wslot, rows in scan order.
 */
reg  [DW-1:0] wmy_reg = 0, wmx_reg = 0;      // MCU row (= MCU rows complete), column
reg  [1:0]    wslot_reg = 2'd0, wc_reg = 2'd0;
reg           wby_reg = 1'b0, wbx_reg = 1'b0;
reg  [2:0]    wr_reg = 3'd0;
reg  [DW-1:0] lo_reg = 0;                    // lowest MCU row the reader's current row reads
wire          w_h2 = sampling_reg[2 * wc_reg];
wire          w_v2 = sampling_reg[2 * wc_reg + 1];
wire          writing = state_reg != R_IDLE && state_reg != R_INIT && wmy_reg != mcus_y_reg
                        && wmy_reg < lo_reg + 3;
wire          w_take = writing && s_axis_tvalid;
wire [WB-1:0] w_word = w_h2 ? {wmx_reg[WB-2:0], wbx_reg} : wmx_reg[WB-1:0];
wire [AW-1:0] w_addr = {wslot_reg, wby_reg, wr_reg[2:1], w_word};
wire          w_last_row = wr_reg == 3'd7;
wire          w_last_bx = wbx_reg == w_h2;
wire          w_last_by = wby_reg == w_v2;
wire          w_last_c = wc_reg == ncomp_reg - 2'd1;
wire          w_last_mx = wmx_reg == mcus_x_reg - 1'b1;

assign s_axis_tready = writing;

/*
 * Reader: output row y, pair p; per component the plane rows, their slots and banks.
 */
reg  [DW-1:0] y_reg = 0, p_reg = 0;
reg  [DW-1:0] near_reg [0:2], far_reg [0:2];
reg  [AW-1:0] near_base_reg [0:2], far_base_reg [0:2];  // {slot, line pair, 0}
reg  [DW-1:0] hi_reg = 0;
reg  [DW-1:0] comp_lo_reg [0:2], comp_hi_reg [0:2];     // MCU rows each component's rows lie in
wire          issuing = state_reg == R_BEATS;
reg           s2_valid_reg = 1'b0, out_valid_reg = 1'b0;
reg  [2:0]    s2_p_reg = 3'd0;
reg  [2:0]    s2_near_bank_reg = 3'd0, s2_same_reg = 3'd0;
reg  [95:0]   out_data_reg = 96'd0;
wire          advance = !out_valid_reg || m_axis_tready;
wire [383:0]  rdata;                        // bank 2c + b (bits 64(2c+b)+63..): component c, rows of parity b

assign m_axis_tdata = out_data_reg;
assign m_axis_tvalid = out_valid_reg;

// Plane rows of component c for output row y (as load_component_rows picks them).
function [2*DW-1:0] plane_rows(input v2, input [DW-1:0] y, input [DW-1:0] rows);
    reg [DW-1:0] n, f;
    begin
        n = v2 ? y >> 1 : y;
        if (!v2) f = n;
        else if (y[0]) f = n + 1 < rows ? n + 1 : n;
        else f = n > 0 ? n - 1 : n;
        plane_rows = {f, n};
    end
endfunction

// MCU row of plane row r of a component with v = 2 (16 lines a row) or 1.
function [DW-1:0] mcu_row(input v2, input [DW-1:0] r);
    mcu_row = v2 ? r >> 4 : r >> 3;
endfunction

function [AW-1:0] line_base(input v2, input [DW-1:0] r);
    line_base = {mod3(mcu_row(v2, r)), v2 ? r[3:1] : {1'b0, r[2:1]}, {WB{1'b0}}};
endfunction

genvar g;
generate
    for (g = 0; g < 6; g = g + 1) begin : bank
        localparam C = g / 2, B = g % 2;
        // UltraRAM: 6 banks of 24 K x 64 at MAX_WIDTH 8192, 6 URAM288 (4 K x 72) each.
        (* ram_style = "ultra" *) reg [63:0] mem [0:DEPTH-1];
        reg [63:0] rdata_reg = 64'd0;
        wire       h2 = mode_reg[2 * C];
        wire [WB-1:0] word = h2 ? p_reg[WB+2:3] : p_reg[WB+1:2];
        wire       near_here = near_reg[C][0] == B;
        wire [AW-1:0] r_addr = (near_here ? near_base_reg[C] : far_base_reg[C]) | {{(AW-WB){1'b0}}, word};
        always @(posedge ap_clk) begin
            if (w_take && wc_reg == C && wr_reg[0] == B) mem[w_addr] <= s_axis_tdata;
            if (advance) rdata_reg <= mem[r_addr];
        end
        assign rdata[64 * g +: 64] = rdata_reg;
    end
endgenerate

// Lane c of the beat in stage 2.
function [31:0] lane(input h2, input v2, input near_bank, input same, input [2:0] p, input [63:0] bank0,
                     input [63:0] bank1);
    reg [63:0] nw, fw;
    reg [2:0]  a, b;
    begin
        nw = near_bank ? bank1 : bank0;
        fw = same ? nw : (near_bank ? bank0 : bank1);
        a = h2 ? p : {p[1:0], 1'b0};
        b = h2 ? p : {p[1:0], 1'b1};
        lane = {v2 ? fw[8 * b +: 8] : 8'd0, v2 ? fw[8 * a +: 8] : 8'd0, nw[8 * b +: 8], nw[8 * a +: 8]};
    end
endfunction

integer c;
reg [DW-1:0] row_lo, row_hi;
reg [2*DW-1:0] rows_c;
always @(posedge ap_clk) begin
    done_reg <= 1'b0;

    // Writer
    if (w_take) begin
        wr_reg <= wr_reg + 3'd1;
        if (w_last_row) begin
            wbx_reg <= w_last_bx ? 1'b0 : 1'b1;
            if (w_last_bx) begin
                wby_reg <= w_last_by ? 1'b0 : 1'b1;
                if (w_last_by) begin
                    wc_reg <= w_last_c ? 2'd0 : wc_reg + 2'd1;
                    if (w_last_c) begin
                        wmx_reg <= w_last_mx ? {DW{1'b0}} : wmx_reg + 1'b1;
                        if (w_last_mx) begin
                            wmy_reg <= wmy_reg + 1'b1;
                            wslot_reg <= wslot_reg == 2'd2 ? 2'd0 : wslot_reg + 2'd1;
                        end
                    end
                end
            end
        end
    end

    // Reader pipeline: issue (addresses) -> stage 2 (bank words) -> output register.
    if (advance) begin
        out_valid_reg <= s2_valid_reg;
        for (c = 0; c < 3; c = c + 1)
            out_data_reg[32 * c +: 32] <= c < ncomp_reg
                ? lane(mode_reg[2 * c], mode_reg[2 * c + 1], s2_near_bank_reg[c], s2_same_reg[c], s2_p_reg,
                       rdata[128 * c +: 64], rdata[128 * c + 64 +: 64])
                : 32'd0;
        s2_valid_reg <= issuing;
        s2_p_reg <= p_reg[2:0];
        for (c = 0; c < 3; c = c + 1) begin
            s2_near_bank_reg[c] <= near_reg[c][0];
            s2_same_reg[c] <= near_reg[c] == far_reg[c];
        end
        if (issuing) p_reg <= p_reg + 1'b1;
    end

    case (state_reg)
        R_IDLE: begin
            if (ap_start) begin
                width_reg <= width[DW-1:0];
                height_reg <= height[DW-1:0];
                sampling_reg <= sampling[5:0];
                mode_reg <= mode[5:0];
                ncomp_reg <= n_components[1:0];
                state_reg <= R_INIT;
            end
        end
        R_INIT: begin  // the frame's geometry (parse_sof's)
            last_pair_reg <= (width_reg - 1'b1) >> 1;
            last_row_reg <= height_reg - 1'b1;
            mcus_x_reg <= hmax2 ? (width_reg + 5'd15) >> 4 : (width_reg + 4'd7) >> 3;
            mcus_y_reg <= vmax2 ? (height_reg + 5'd15) >> 4 : (height_reg + 4'd7) >> 3;
            for (c = 0; c < 3; c = c + 1)
                comp_rows_reg[c] <= mode_reg[2 * c + 1] ? (height_reg + 1'b1) >> 1 : height_reg;
            wmy_reg <= 0;
            wmx_reg <= 0;
            wslot_reg <= 2'd0;
            wc_reg <= 2'd0;
            wby_reg <= 1'b0;
            wbx_reg <= 1'b0;
            wr_reg <= 3'd0;
            lo_reg <= 0;
            y_reg <= 0;
            state_reg <= R_ROWS;
        end
        R_ROWS: begin  // plane rows of row y
            for (c = 0; c < 3; c = c + 1) begin
                rows_c = plane_rows(mode_reg[2 * c + 1], y_reg, comp_rows_reg[c]);
                near_reg[c] <= rows_c[DW-1:0];
                far_reg[c] <= rows_c[2*DW-1:DW];
            end
            state_reg <= R_SLOTS;
        end
        R_SLOTS: begin  // their slots and line pairs; the MCU rows each component's rows lie in
            for (c = 0; c < 3; c = c + 1) begin
                near_base_reg[c] <= line_base(sampling_reg[2 * c + 1], near_reg[c]);
                far_base_reg[c] <= line_base(sampling_reg[2 * c + 1], far_reg[c]);
                comp_lo_reg[c] <= mcu_row(sampling_reg[2 * c + 1], near_reg[c] < far_reg[c] ? near_reg[c] : far_reg[c]);
                comp_hi_reg[c] <= mcu_row(sampling_reg[2 * c + 1], near_reg[c] < far_reg[c] ? far_reg[c] : near_reg[c]);
            end
            state_reg <= R_SPAN;
        end
        R_SPAN: begin  // the MCU rows the output row spans (a cycle of its own: timing)
            row_lo = {DW{1'b1}};
            row_hi = 0;
            for (c = 0; c < 3; c = c + 1) begin
                if (c < ncomp_reg && comp_lo_reg[c] < row_lo) row_lo = comp_lo_reg[c];
                if (c < ncomp_reg && comp_hi_reg[c] > row_hi) row_hi = comp_hi_reg[c];
            end
            hi_reg <= row_hi;
            lo_reg <= row_lo;
            state_reg <= R_WAIT;
        end
        R_WAIT: begin  // until every MCU row it reads is complete
            p_reg <= 0;
            if (hi_reg < wmy_reg) state_reg <= R_BEATS;
        end
        R_BEATS: begin
            if (advance && p_reg == last_pair_reg) begin
                y_reg <= y_reg + 1'b1;
                state_reg <= y_reg == last_row_reg ? R_DRAIN : R_ROWS;
            end
        end
        default: begin  // R_DRAIN: the last beats leave, every row has been read
            if (!s2_valid_reg && !out_valid_reg && wmy_reg == mcus_y_reg) begin
                state_reg <= R_IDLE;
                done_reg <= 1'b1;
            end
        end
    endcase

    if (ap_rst) begin
        state_reg <= R_IDLE;
        done_reg <= 1'b0;
        s2_valid_reg <= 1'b0;
        out_valid_reg <= 1'b0;
    end
end

endmodule

`resetall
