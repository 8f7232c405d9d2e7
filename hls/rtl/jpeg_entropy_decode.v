`resetall
`timescale 1ns / 1ps
`default_nettype none

// JPEG entropy decode: scan bytes in 8-byte beats, quantised coefficients out, one Huffman symbol a cycle.
//
// jpeg_bit_reader (byte de-stuffing, markers, up to 32 bits a cycle) feeding jpeg_huff_decoder
// (lookahead table decode, DC prediction, restart intervals); see those two modules for the
// beat formats and the table port. ap_start also clears the reader, so whatever the previous
// image left in it is gone; the decoder drains its input to the end beat before ap_done, so the
// producer of the scan bytes can always write the whole scan.
module jpeg_entropy_decode (
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
    output wire        ap_done,
    input  wire [31:0] n_mcus,
    input  wire [15:0] restart_interval,
    input  wire [1:0]  n_components,
    input  wire [17:0] components,
    output wire [1:0]  status,

    /*
     * Huffman table writes (while idle)
     */
    input  wire        tbl_we,
    input  wire [12:0] tbl_addr,
    input  wire [24:0] tbl_wdata,

    /*
     * Scan bytes in: [63:0] bytes (byte k in [8k+7:8k]), [71:64] byte count 1..8, [72] last beat
     */
    input  wire [79:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * Coefficient beats: [15:0] value, [21:16] zigzag index, [22] coefficient present, [23] block
     * end, [25:24] component
     */
    output wire [25:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

wire [36:0] bits_tdata;
wire        bits_tvalid, bits_tready;

jpeg_bit_reader reader (
    .clk(clk),
    .rst(rst),
    .clear(ap_start && ap_idle),
    .s_axis_tdata(s_axis_tdata),
    .s_axis_tvalid(s_axis_tvalid),
    .s_axis_tready(s_axis_tready),
    .m_axis_tdata(bits_tdata),
    .m_axis_tvalid(bits_tvalid),
    .m_axis_tready(bits_tready)
);

jpeg_huff_decoder decoder (
    .clk(clk),
    .rst(rst),
    .ap_start(ap_start),
    .ap_ready(ap_ready),
    .ap_idle(ap_idle),
    .ap_done(ap_done),
    .n_mcus(n_mcus),
    .restart_interval(restart_interval),
    .n_components(n_components),
    .components(components),
    .status(status),
    .tbl_we(tbl_we),
    .tbl_addr(tbl_addr),
    .tbl_wdata(tbl_wdata),
    .s_axis_tdata(bits_tdata),
    .s_axis_tvalid(bits_tvalid),
    .s_axis_tready(bits_tready),
    .m_axis_tdata(m_axis_tdata),
    .m_axis_tvalid(m_axis_tvalid),
    .m_axis_tready(m_axis_tready)
);

endmodule

`resetall
