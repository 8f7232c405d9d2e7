`resetall
`timescale 1ns / 1ps
`default_nettype none

// Reads packed RGB pixels (3 bytes each, little-endian order) from memory over an AXI4 read
// channel in incrementing bursts, and streams them out one pixel per beat.
//
// start takes the 4-byte-aligned base address and the pixel count. Bursts of up to 16 32-bit
// words never cross a 4 KiB boundary and are issued only while the word FIFO has room for all of
// them, so the read data channel is always ready. done pulses after the last pixel has left.
module axi_pixel_reader #(
    // Depth of the word FIFO, in 32-bit words (a power of two, at least 16).
    parameter FIFO_DEPTH = 32
) (
    /*
     * Clock and synchronous active-high reset
     */
    input  wire        clk,
    input  wire        rst,

    /*
     * Control
     */
    input  wire        start,
    input  wire [63:0] base,
    input  wire [31:0] pixels,
    output wire        done,

    /*
     * AXI4 read address and data channels (32-bit data, ID 0)
     */
    output wire [63:0] m_axi_araddr,
    output wire [7:0]  m_axi_arlen,
    output wire        m_axi_arvalid,
    input  wire        m_axi_arready,
    input  wire [31:0] m_axi_rdata,
    input  wire        m_axi_rvalid,
    output wire        m_axi_rready,

    /*
     * Pixels out: channel k in bits [8k +: 8]
     */
    output wire [31:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

localparam PTR_WIDTH = $clog2(FIFO_DEPTH) + 1;

reg [63:0] addr_reg = 64'd0;
reg [31:0] words_left_reg = 32'd0;     // words not yet requested
reg [31:0] pixels_left_reg = 32'd0;    // pixels not yet sent
reg [PTR_WIDTH-1:0] owed_reg = 0;      // words requested and not yet taken from the FIFO
reg        arvalid_reg = 1'b0;
reg [7:0]  arlen_reg = 8'd0;
reg        done_reg = 1'b0;

reg [31:0] fifo_mem [0:FIFO_DEPTH-1];
reg [PTR_WIDTH-1:0] fifo_wr_reg = 0, fifo_rd_reg = 0;

// Unpacker: up to 6 bytes waiting (a pixel needs 3, a word brings 4).
reg [47:0] bytes_reg = 48'd0;
reg [2:0]  byte_count_reg = 3'd0;

wire [12:0] to_boundary = 13'd4096 - {1'b0, addr_reg[11:0]};   // bytes to the next 4 KiB boundary
wire [31:0] burst_words = words_left_reg < 16 ? words_left_reg : 32'd16;
wire [31:0] burst = burst_words < {21'd0, to_boundary[12:2]} ? burst_words : {21'd0, to_boundary[12:2]};
wire take_word = fifo_wr_reg != fifo_rd_reg && byte_count_reg < 3'd3;
wire request = !arvalid_reg && !start && words_left_reg != 0 && owed_reg + burst <= FIFO_DEPTH;
wire send = byte_count_reg >= 3'd3 && pixels_left_reg != 0;
wire sent = send && m_axis_tready;

assign m_axi_araddr = addr_reg;
assign m_axi_arlen = arlen_reg;
assign m_axi_arvalid = arvalid_reg;
assign m_axi_rready = 1'b1;
assign m_axis_tdata = {8'd0, bytes_reg[23:0]};
assign m_axis_tvalid = send;
assign done = done_reg;

always @(posedge clk) begin
    done_reg <= sent && pixels_left_reg == 1;
    if (start) begin
        addr_reg <= base;
        // ceil(3 * pixels / 4) words
        words_left_reg <= (pixels * 3 + 3) >> 2;
        pixels_left_reg <= pixels;
        byte_count_reg <= 3'd0;
    end

    if (arvalid_reg && m_axi_arready) begin
        arvalid_reg <= 1'b0;
        addr_reg <= addr_reg + {arlen_reg, 2'b00} + 64'd4;
    end
    if (request) begin
        arvalid_reg <= 1'b1;
        arlen_reg <= burst[7:0] - 8'd1;
        words_left_reg <= words_left_reg - burst;
    end
    owed_reg <= owed_reg + (request ? burst[PTR_WIDTH-1:0] : 0) - take_word;

    if (m_axi_rvalid) begin
        fifo_mem[fifo_wr_reg[PTR_WIDTH-2:0]] <= m_axi_rdata;
        fifo_wr_reg <= fifo_wr_reg + 1'b1;
    end
    if (take_word) begin
        bytes_reg[8*byte_count_reg +: 32] <= fifo_mem[fifo_rd_reg[PTR_WIDTH-2:0]];
        byte_count_reg <= byte_count_reg + 3'd4;
        fifo_rd_reg <= fifo_rd_reg + 1'b1;
    end
    if (sent) begin
        bytes_reg <= {24'd0, bytes_reg[47:24]};
        byte_count_reg <= byte_count_reg - 3'd3;
        pixels_left_reg <= pixels_left_reg - 1'b1;
    end

    if (rst) begin
        arvalid_reg <= 1'b0;
        words_left_reg <= 32'd0;
        pixels_left_reg <= 32'd0;
        owed_reg <= 0;
        fifo_wr_reg <= 0;
        fifo_rd_reg <= 0;
        byte_count_reg <= 3'd0;
        done_reg <= 1'b0;
    end
end

endmodule

`resetall
`default_nettype wire
