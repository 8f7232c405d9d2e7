`resetall
`timescale 1ns / 1ps
`default_nettype none

// 8x8 inverse DCT bit-exact with atoll_image::idct_islow (libjpeg islow): coefficient rows in, sample rows out.
//
// Streams are valid/ready (AXI-stream handshake: a beat moves on a cycle where tvalid and tready
// are both high). A block is 8 beats each way, rows 0..7 in natural (not zigzag) order, and
// blocks follow each other with no framing signal. Column pass, row pass and input loading
// overlap on double-buffered blocks: one beat per cycle in and out when neither side stalls
// (II = 8 cycles per block), first input beat to last output beat 26 cycles.
module idct8x8_islow #(
    // Width of each two's-complement coefficient in an input lane, in bits: quantised when
    // DEQUANT = 1, already dequantised when DEQUANT = 0.
    parameter COEF_WIDTH = 16,
    // Width of each unsigned quantisation step in an input lane, in bits (DEQUANT = 1 only).
    parameter QUANT_WIDTH = 16,
    // 1: lane = {quant, coef} and the unit dequantises (coef * quant, as idct_islow does);
    // 0: lane = coef, already dequantised.
    parameter DEQUANT = 1,
    // Datapath word width, in bits: 32 wraps every intermediate modulo 2^32 as the image CU's
    // 32-bit idct_islow does (hostile coefficients only; legal JPEG data never wraps); 0 sizes
    // each stage so that nothing can overflow (equal to a 64-bit idct_islow for every input).
    // Must be 0 or at least LANE_WIDTH.
    parameter DATAPATH_WIDTH = 32,
    // Width of one input lane, in bits: derived from the above, do not override.
    parameter LANE_WIDTH = DEQUANT ? COEF_WIDTH + QUANT_WIDTH : COEF_WIDTH
) (
    /*
     * Clock and synchronous active-high reset
     */
    input  wire                    clk,
    input  wire                    rst,

    /*
     * Coefficient rows in: lane k (column k) in bits [k*LANE_WIDTH +: LANE_WIDTH]
     */
    input  wire [8*LANE_WIDTH-1:0] s_axis_tdata,
    input  wire                    s_axis_tvalid,
    output wire                    s_axis_tready,

    /*
     * Sample rows out: sample k (column k) in bits [8*k +: 8]
     */
    output wire [63:0]             m_axis_tdata,
    output wire                    m_axis_tvalid,
    input  wire                    m_axis_tready
);

// Dequantised coefficient: a signed COEF_WIDTH by unsigned QUANT_WIDTH product fits LANE_WIDTH.
localparam DQ_WIDTH = LANE_WIDTH;
// Column pass: 16 bits of growth (see idct8_1d_islow), then descaled by CONST_BITS - PASS1_BITS;
// row pass: 16 more bits of growth, then descaled by CONST_BITS + PASS1_BITS + 3. A fixed
// datapath width instead keeps every stage at that width.
localparam COL_SHIFT = 11;
localparam ROW_SHIFT = 18;
localparam DC_SHIFT = 5;
localparam COL_WIDTH = DATAPATH_WIDTH ? DATAPATH_WIDTH : DQ_WIDTH + 16;
localparam WS_WIDTH = DATAPATH_WIDTH ? DATAPATH_WIDTH : COL_WIDTH - COL_SHIFT;
localparam ROW_WIDTH = DATAPATH_WIDTH ? DATAPATH_WIDTH : WS_WIDTH + 16;
// One more bit than the wider of a descaled row result and a descaled AC-free row (the
// shortcut descales the workspace word by only PASS1_BITS + 3), for the +128 level shift.
localparam PIX_WIDTH = (ROW_WIDTH - ROW_SHIFT > WS_WIDTH - DC_SHIFT ? ROW_WIDTH - ROW_SHIFT : WS_WIDTH - DC_SHIFT) + 1;

localparam signed [COL_WIDTH-1:0] COL_ROUND = 1 <<< (COL_SHIFT - 1);
localparam signed [ROW_WIDTH-1:0] ROW_ROUND = 1 <<< (ROW_SHIFT - 1);
localparam signed [WS_WIDTH-1:0] DC_ROUND = 1 <<< (DC_SHIFT - 1);
localparam signed [PIX_WIDTH-1:0] LEVEL_SHIFT = 128;

// Two blocks of dequantised coefficients and two of column-pass results, indexed
// bank*64 + row*8 + column.
reg signed [DQ_WIDTH-1:0] coef_mem [0:127];
reg signed [WS_WIDTH-1:0] ws_mem [0:127];

// Loader: bank and row being written, and which coefficient banks hold a whole block.
reg       load_bank_reg = 1'b0, load_bank_next;
reg [2:0] load_row_reg = 3'd0, load_row_next;
reg [1:0] coef_full_reg = 2'b00, coef_full_next;

// Column pass: coefficient bank and column to read next, the column being transformed (one
// cycle after its read) with where its results go, and which workspace banks hold a whole block.
reg       col_bank_reg = 1'b0, col_bank_next;
reg [2:0] col_idx_reg = 3'd0, col_idx_next;
reg [8*DQ_WIDTH-1:0] col_in_reg = {8*DQ_WIDTH{1'b0}};
reg       col_in_valid_reg = 1'b0, col_in_valid_next;
reg       col_in_last_reg = 1'b0, col_in_last_next;
reg       col_in_bank_reg = 1'b0, col_in_bank_next;
reg [2:0] col_in_idx_reg = 3'd0, col_in_idx_next;
reg       ws_wr_bank_reg = 1'b0, ws_wr_bank_next;
reg [1:0] ws_full_reg = 2'b00, ws_full_next;

// Row pass: workspace bank and row to read next, the row being transformed, and the output
// register.
reg        row_bank_reg = 1'b0, row_bank_next;
reg [2:0]  row_idx_reg = 3'd0, row_idx_next;
reg [8*WS_WIDTH-1:0] row_in_reg = {8*WS_WIDTH{1'b0}};
reg        row_in_valid_reg = 1'b0, row_in_valid_next;
reg [63:0] m_axis_tdata_reg = 64'd0, m_axis_tdata_next;
reg        m_axis_tvalid_reg = 1'b0, m_axis_tvalid_next;

assign s_axis_tready = !coef_full_reg[load_bank_reg];
assign m_axis_tdata = m_axis_tdata_reg;
assign m_axis_tvalid = m_axis_tvalid_reg;

// Each pass reads its operands into a register and transforms them the next cycle, which also
// gives the event-driven simulator one change per cycle to propagate instead of one per word.
wire load_fire = s_axis_tvalid && s_axis_tready;
wire out_ready = !m_axis_tvalid_reg || m_axis_tready;
wire row_fire = ws_full_reg[row_bank_reg] && (!row_in_valid_reg || out_ready);
// The column pass may start on the workspace bank whose last row the row pass reads this cycle:
// its first write lands a cycle later. Without this, blocks would follow 9 cycles apart.
wire ws_freeing = row_fire && row_idx_reg == 3'd7 && row_bank_reg == ws_wr_bank_reg;
wire col_fire = coef_full_reg[col_bank_reg] && (!ws_full_reg[ws_wr_bank_reg] || ws_freeing);

wire [8*DQ_WIDTH-1:0] lane_dq;
wire [8*COL_WIDTH-1:0] col_out;
wire [8*WS_WIDTH-1:0] col_ws;
wire [8*ROW_WIDTH-1:0] row_out;
wire [63:0] row_pix;

// idct_islow takes a closed form for a column or row whose AC inputs are all zero (its first
// input times 2^PASS1_BITS, resp. descaled by PASS1_BITS + 3). Without wrapping that equals the
// full transform; with it, it does not for huge inputs, so the unit takes the same shortcut.
wire col_ac_zero = col_in_reg[8*DQ_WIDTH-1:DQ_WIDTH] == 0;
wire row_ac_zero = row_in_reg[8*WS_WIDTH-1:WS_WIDTH] == 0;
wire signed [WS_WIDTH-1:0] col_dc = $signed(col_in_reg[DQ_WIDTH-1:0]) <<< 2;
wire signed [WS_WIDTH-1:0] row_dc_rounded = $signed(row_in_reg[WS_WIDTH-1:0]) + DC_ROUND;
wire signed [PIX_WIDTH-1:0] row_dc_descaled = row_dc_rounded >>> DC_SHIFT;

genvar k;
generate
    for (k = 0; k < 8; k = k + 1) begin : lanes
        if (DEQUANT) begin : dequant
            wire signed [COEF_WIDTH-1:0] coef = s_axis_tdata[k*LANE_WIDTH +: COEF_WIDTH];
            wire [QUANT_WIDTH-1:0] quant = s_axis_tdata[k*LANE_WIDTH+COEF_WIDTH +: QUANT_WIDTH];
            wire signed [DQ_WIDTH-1:0] product = coef * $signed({1'b0, quant});
            assign lane_dq[k*DQ_WIDTH +: DQ_WIDTH] = product;
        end else begin : passthrough
            assign lane_dq[k*DQ_WIDTH +: DQ_WIDTH] = s_axis_tdata[k*LANE_WIDTH +: LANE_WIDTH];
        end

        // Descale with rounding (libjpeg's DESCALE), after the column and after the row pass.
        wire signed [COL_WIDTH-1:0] col_rounded = $signed(col_out[k*COL_WIDTH +: COL_WIDTH]) + COL_ROUND;
        wire signed [WS_WIDTH-1:0] col_descaled = col_rounded >>> COL_SHIFT;
        assign col_ws[k*WS_WIDTH +: WS_WIDTH] = col_ac_zero ? col_dc : col_descaled;

        // Level shift by +128 and saturation to 0..255.
        wire signed [ROW_WIDTH-1:0] row_rounded = $signed(row_out[k*ROW_WIDTH +: ROW_WIDTH]) + ROW_ROUND;
        wire signed [PIX_WIDTH-1:0] row_descaled = row_rounded >>> ROW_SHIFT;
        wire signed [PIX_WIDTH-1:0] row_shifted = (row_ac_zero ? row_dc_descaled : row_descaled) + LEVEL_SHIFT;
        assign row_pix[k*8 +: 8] = row_shifted < 0 ? 8'd0
                                 : row_shifted > 255 ? 8'd255 : row_shifted[7:0];
    end
endgenerate

idct8_1d_islow #(
    .IN_WIDTH(DQ_WIDTH),
    .OUT_WIDTH(COL_WIDTH)
)
col_idct_inst (
    .in_data(col_in_reg),
    .out_data(col_out)
);

idct8_1d_islow #(
    .IN_WIDTH(WS_WIDTH),
    .OUT_WIDTH(ROW_WIDTH)
)
row_idct_inst (
    .in_data(row_in_reg),
    .out_data(row_out)
);

always @* begin
    load_bank_next = load_bank_reg;
    load_row_next = load_row_reg;
    coef_full_next = coef_full_reg;
    col_bank_next = col_bank_reg;
    col_idx_next = col_idx_reg;
    col_in_valid_next = col_fire;
    col_in_last_next = col_fire && col_idx_reg == 3'd7;
    col_in_bank_next = ws_wr_bank_reg;
    col_in_idx_next = col_idx_reg;
    ws_wr_bank_next = ws_wr_bank_reg;
    ws_full_next = ws_full_reg;
    row_bank_next = row_bank_reg;
    row_idx_next = row_idx_reg;
    row_in_valid_next = row_in_valid_reg;
    m_axis_tdata_next = m_axis_tdata_reg;
    m_axis_tvalid_next = m_axis_tvalid_reg;

    if (load_fire) begin
        load_row_next = load_row_reg + 3'd1;
        if (load_row_reg == 3'd7) begin
            coef_full_next[load_bank_reg] = 1'b1;
            load_bank_next = !load_bank_reg;
        end
    end

    // A coefficient bank is free once its last column is read; a workspace bank is full once
    // its last column is written.
    if (col_fire) begin
        col_idx_next = col_idx_reg + 3'd1;
        if (col_idx_reg == 3'd7) begin
            coef_full_next[col_bank_reg] = 1'b0;
            col_bank_next = !col_bank_reg;
            ws_wr_bank_next = !ws_wr_bank_reg;
        end
    end
    if (col_in_valid_reg && col_in_last_reg) begin
        ws_full_next[col_in_bank_reg] = 1'b1;
    end

    if (out_ready) begin
        m_axis_tdata_next = row_pix;
        m_axis_tvalid_next = row_in_valid_reg;
        row_in_valid_next = 1'b0;
    end
    if (row_fire) begin
        row_idx_next = row_idx_reg + 3'd1;
        row_in_valid_next = 1'b1;
        if (row_idx_reg == 3'd7) begin
            ws_full_next[row_bank_reg] = 1'b0;
            row_bank_next = !row_bank_reg;
        end
    end
end

always @(posedge clk) begin
    load_bank_reg <= load_bank_next;
    load_row_reg <= load_row_next;
    coef_full_reg <= coef_full_next;
    col_bank_reg <= col_bank_next;
    col_idx_reg <= col_idx_next;
    col_in_valid_reg <= col_in_valid_next;
    col_in_last_reg <= col_in_last_next;
    col_in_bank_reg <= col_in_bank_next;
    col_in_idx_reg <= col_in_idx_next;
    ws_wr_bank_reg <= ws_wr_bank_next;
    ws_full_reg <= ws_full_next;
    row_bank_reg <= row_bank_next;
    row_idx_reg <= row_idx_next;
    row_in_valid_reg <= row_in_valid_next;
    m_axis_tdata_reg <= m_axis_tdata_next;
    m_axis_tvalid_reg <= m_axis_tvalid_next;

    if (rst) begin
        load_bank_reg <= 1'b0;
        load_row_reg <= 3'd0;
        coef_full_reg <= 2'b00;
        col_bank_reg <= 1'b0;
        col_idx_reg <= 3'd0;
        col_in_valid_reg <= 1'b0;
        col_in_last_reg <= 1'b0;
        ws_wr_bank_reg <= 1'b0;
        ws_full_reg <= 2'b00;
        row_bank_reg <= 1'b0;
        row_idx_reg <= 3'd0;
        row_in_valid_reg <= 1'b0;
        m_axis_tvalid_reg <= 1'b0;
    end
end

// The banks and operand registers need no reset: a bank is read only after its full flag says
// it was written, and operands only matter with their valid flag.
integer i;
reg [8*DQ_WIDTH-1:0] col_gather;
reg [8*WS_WIDTH-1:0] row_gather;
always @(posedge clk) begin
    for (i = 0; i < 8; i = i + 1) begin
        if (load_fire) begin
            coef_mem[load_bank_reg*64 + load_row_reg*8 + i] <= lane_dq[i*DQ_WIDTH +: DQ_WIDTH];
        end
        if (col_in_valid_reg) begin
            ws_mem[col_in_bank_reg*64 + i*8 + col_in_idx_reg] <= col_ws[i*WS_WIDTH +: WS_WIDTH];
        end
        col_gather[i*DQ_WIDTH +: DQ_WIDTH] = coef_mem[col_bank_reg*64 + i*8 + col_idx_reg];
        row_gather[i*WS_WIDTH +: WS_WIDTH] = ws_mem[row_bank_reg*64 + row_idx_reg*8 + i];
    end
    // Whole-vector updates: each pass's network sees one input change per cycle.
    if (col_fire) begin
        col_in_reg <= col_gather;
    end
    if (row_fire) begin
        row_in_reg <= row_gather;
    end
end

endmodule

`resetall
`default_nettype wire
