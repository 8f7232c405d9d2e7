`resetall
`timescale 1ns / 1ps
`default_nettype none

// Writes the post-decode unit's beats to memory over an AXI4 write channel, in the image CU's
// output layout: uint8 HWC (channel k of pixel i at byte 3i + k), or float32 / float16 CHW planes
// (at element k * pixels + i).
//
// Each of a beat's three elements is one single-beat write with its byte strobes; the next
// starts after the previous response. start takes the 4-byte-aligned base address, the pixel
// count and the format (0 uint8, 1 float32, 2 float16); idle is high when no write is owed.
module axi_element_writer (
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
    input  wire [1:0]  format,
    output wire        idle,

    /*
     * Beats in: lane k (channel k) in bits [32k +: 32]
     */
    input  wire [95:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * AXI4 write address, data and response channels (32-bit data, ID 0)
     */
    output wire [63:0] m_axi_awaddr,
    output wire        m_axi_awvalid,
    input  wire        m_axi_awready,
    output wire [31:0] m_axi_wdata,
    output wire [3:0]  m_axi_wstrb,
    output wire        m_axi_wvalid,
    input  wire        m_axi_wready,
    input  wire        m_axi_bvalid,
    output wire        m_axi_bready
);

localparam [1:0] FORMAT_U8 = 2'd0, FORMAT_F32 = 2'd1;

reg [63:0] base_reg = 64'd0;
reg [63:0] plane_reg = 64'd0;   // bytes per plane (CHW formats)
reg [1:0]  format_reg = 2'd0;
reg [31:0] pixel_reg = 32'd0;   // index of the beat being written
reg [1:0]  lane_reg = 2'd0;
reg        aw_pending_reg = 1'b0, w_pending_reg = 1'b0, b_pending_reg = 1'b0;
reg [63:0] element_addr_reg = 64'd0;
reg [31:0] element_data_reg = 32'd0;
reg [3:0]  element_strb_reg = 4'd0;

wire busy = aw_pending_reg || w_pending_reg || b_pending_reg;
wire [2:0] size = format_reg == FORMAT_U8 ? 3'd1 : format_reg == FORMAT_F32 ? 3'd4 : 3'd2;
wire [31:0] lane = s_axis_tdata[32*lane_reg +: 32];
// Element address: HWC bytes, or plane k of the CHW layout.
wire [63:0] addr = format_reg == FORMAT_U8 ? base_reg + pixel_reg * 3 + lane_reg
                                           : base_reg + plane_reg * lane_reg + pixel_reg * size;
wire issue = s_axis_tvalid && !busy;

assign idle = !busy;
assign s_axis_tready = issue && lane_reg == 2'd2;
assign m_axi_awaddr = {element_addr_reg[63:2], 2'b00};
assign m_axi_awvalid = aw_pending_reg;
assign m_axi_wdata = element_data_reg;
assign m_axi_wstrb = element_strb_reg;
assign m_axi_wvalid = w_pending_reg;
assign m_axi_bready = 1'b1;

always @(posedge clk) begin
    if (start) begin
        base_reg <= base;
        plane_reg <= format == FORMAT_F32 ? {30'd0, pixels, 2'b00} : {31'd0, pixels, 1'b0};
        format_reg <= format;
        pixel_reg <= 32'd0;
        lane_reg <= 2'd0;
    end
    if (issue) begin
        aw_pending_reg <= 1'b1;
        w_pending_reg <= 1'b1;
        b_pending_reg <= 1'b1;
        element_addr_reg <= addr;
        element_data_reg <= lane << (8 * addr[1:0]);
        element_strb_reg <= (size == 3'd1 ? 4'b0001 : size == 3'd2 ? 4'b0011 : 4'b1111) << addr[1:0];
        lane_reg <= lane_reg == 2'd2 ? 2'd0 : lane_reg + 2'd1;
        if (lane_reg == 2'd2) pixel_reg <= pixel_reg + 1'b1;
    end
    if (aw_pending_reg && m_axi_awready) aw_pending_reg <= 1'b0;
    if (w_pending_reg && m_axi_wready) w_pending_reg <= 1'b0;
    if (m_axi_bvalid) b_pending_reg <= 1'b0;
    if (rst) begin
        aw_pending_reg <= 1'b0;
        w_pending_reg <= 1'b0;
        b_pending_reg <= 1'b0;
    end
end

endmodule

`resetall
`default_nettype wire
