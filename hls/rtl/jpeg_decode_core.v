`resetall
`timescale 1ns / 1ps
`default_nettype none

// JPEG decode core: scan bytes in, 8x8 sample blocks out (entropy decode, de-zigzag, dequantise, islow IDCT).
//
// jpeg_entropy_decode (one Huffman symbol a cycle) -> jpeg_coef_block (double-buffered blocks)
// -> idct8x8_islow (II 8, beside the decoder). Blocks leave in scan order (MCU by MCU, per
// component its h x v blocks), each as 8 rows of 8 samples, exactly as atoll_image::idct_islow
// computes them from decode_block's coefficients. The HLS C++ parses the markers and writes the
// tables: Huffman tables at tbl_addr 0x0000-0x1FFF (jpeg_huff_decoder's map), the components'
// quantisation steps at 0x2000 + component * 64 + natural index. ap_done pulses once the
// decoder has finished (and drained its input) and every block it emitted has left the IDCT;
// on CORRUPT the blocks already decoded still leave.
module jpeg_decode_core (
    /*
     * Clock and synchronous active-high reset
     */
    input  wire        clk,
    input  wire        rst,

    /*
     * Block-level control (ap_ctrl_chain) and the scan's arguments (see jpeg_huff_decoder)
     */
    input  wire        ap_start,
    output wire        ap_ready,
    output wire        ap_idle,
    output reg         ap_done,
    input  wire [31:0] n_mcus,
    input  wire [15:0] restart_interval,
    input  wire [1:0]  n_components,
    input  wire [17:0] components,
    output wire [1:0]  status,

    /*
     * Table writes (while idle)
     */
    input  wire        tbl_we,
    input  wire [13:0] tbl_addr,
    input  wire [24:0] tbl_wdata,

    /*
     * Scan bytes in: [63:0] bytes (byte k in [8k+7:8k]), [67:64] byte count 1..8, [68] last beat
     */
    input  wire [68:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * Sample rows out: sample k (column k) in [8k+7:8k], 8 rows a block
     */
    output wire [63:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

wire [25:0]  coef_tdata;
wire         coef_tvalid, coef_tready;
wire [255:0] row_tdata;
wire         row_tvalid, row_tready;
wire         entropy_idle, entropy_done;
reg          busy_reg = 1'b0;

jpeg_entropy_decode entropy (
    .clk(clk),
    .rst(rst),
    .ap_start(ap_start && ap_idle),
    .ap_ready(ap_ready),
    .ap_idle(entropy_idle),
    .ap_done(entropy_done),
    .n_mcus(n_mcus),
    .restart_interval(restart_interval),
    .n_components(n_components),
    .components(components),
    .status(status),
    .tbl_we(tbl_we && !tbl_addr[13]),
    .tbl_addr(tbl_addr[12:0]),
    .tbl_wdata(tbl_wdata),
    .s_axis_tdata(s_axis_tdata),
    .s_axis_tvalid(s_axis_tvalid),
    .s_axis_tready(s_axis_tready),
    .m_axis_tdata(coef_tdata),
    .m_axis_tvalid(coef_tvalid),
    .m_axis_tready(coef_tready)
);

jpeg_coef_block blocks (
    .clk(clk),
    .rst(rst),
    .clear(ap_start && !busy_reg),
    .q_we(tbl_we && tbl_addr[13]),
    .q_addr(tbl_addr[7:0]),
    .q_wdata(tbl_wdata[15:0]),
    .s_axis_tdata(coef_tdata),
    .s_axis_tvalid(coef_tvalid),
    .s_axis_tready(coef_tready),
    .m_axis_tdata(row_tdata),
    .m_axis_tvalid(row_tvalid),
    .m_axis_tready(row_tready)
);

idct8x8_islow idct (
    .clk(clk),
    .rst(rst),
    .s_axis_tdata(row_tdata),
    .s_axis_tvalid(row_tvalid),
    .s_axis_tready(row_tready),
    .m_axis_tdata(m_axis_tdata),
    .m_axis_tvalid(m_axis_tvalid),
    .m_axis_tready(m_axis_tready)
);

// Blocks between the decoder's block end and the IDCT's last row; the run ends when the decoder
// is done and none is left.
reg [5:0] pending_reg = 6'd0;
reg [2:0] out_row_reg = 3'd0;
reg       decoded_reg = 1'b0;   // the decoder's ap_done has come
wire      block_in = coef_tvalid && coef_tready && coef_tdata[23];
wire      block_out = m_axis_tvalid && m_axis_tready && out_row_reg == 3'd7;

assign ap_idle = !busy_reg;

always @(posedge clk) begin
    pending_reg <= pending_reg + {5'd0, block_in} - {5'd0, block_out};
    if (m_axis_tvalid && m_axis_tready) out_row_reg <= out_row_reg + 3'd1;
    if (entropy_done) decoded_reg <= 1'b1;
    ap_done <= 1'b0;
    if (ap_start && !busy_reg) begin
        busy_reg <= 1'b1;
        decoded_reg <= 1'b0;
    end else if (busy_reg && decoded_reg && pending_reg == 6'd0) begin
        busy_reg <= 1'b0;
        ap_done <= 1'b1;
    end
    if (rst) begin
        pending_reg <= 6'd0;
        out_row_reg <= 3'd0;
        decoded_reg <= 1'b0;
        busy_reg <= 1'b0;
        ap_done <= 1'b0;
    end
end

endmodule

`resetall
