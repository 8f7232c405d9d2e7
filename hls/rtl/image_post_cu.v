`resetall
`timescale 1ns / 1ps
`default_nettype none

// image_post_cu: the post-decode unit behind a Vitis HLS kernel's interface, an RTL kernel with
// the ports and control registers Vitis HLS gives the C++ kernel
//
//   void image_post_cu(const uint8_t* frame, uint32_t height, uint32_t width, uint8_t* out,
//                      uint32_t dst_h, uint32_t dst_w, uint32_t crop_h, uint32_t crop_w,
//                      uint32_t format);
//
// (each pointer an m_axi port on its own bundle, gmem_in and gmem_out; each scalar and the return
// on s_axilite), so that the kernel-level testbench drives it exactly as it drives the
// Vitis-exported image_cu. One run reads height x width packed RGB pixels from frame, resizes them
// to dst_h x dst_w, keeps the centred crop_h x crop_w window and writes it to out as the image
// CU's stages write it: format 0 uint8 HWC, 1 float32 CHW, 2 float16 CHW. Pointers are 4-byte
// aligned. The control register map is in image_post_cu_control_s_axi.v.
module image_post_cu #(
    // Line buffer depth of the post-decode unit: the widest frame and crop, in pixels.
    parameter MAX_WIDTH = 8192
) (
    /*
     * Clock, active-low reset, interrupt
     */
    input  wire        ap_clk,
    input  wire        ap_rst_n,
    output wire        interrupt,

    /*
     * s_axi_control: AXI4-Lite control registers
     */
    input  wire        s_axi_control_AWVALID,
    output wire        s_axi_control_AWREADY,
    input  wire [6:0]  s_axi_control_AWADDR,
    input  wire        s_axi_control_WVALID,
    output wire        s_axi_control_WREADY,
    input  wire [31:0] s_axi_control_WDATA,
    input  wire [3:0]  s_axi_control_WSTRB,
    input  wire        s_axi_control_ARVALID,
    output wire        s_axi_control_ARREADY,
    input  wire [6:0]  s_axi_control_ARADDR,
    output wire        s_axi_control_RVALID,
    input  wire        s_axi_control_RREADY,
    output wire [31:0] s_axi_control_RDATA,
    output wire [1:0]  s_axi_control_RRESP,
    output wire        s_axi_control_BVALID,
    input  wire        s_axi_control_BREADY,
    output wire [1:0]  s_axi_control_BRESP,

    /*
     * m_axi gmem_in: frame (reads only; its write channel is tied off)
     */
    output wire        m_axi_gmem_in_AWVALID,
    input  wire        m_axi_gmem_in_AWREADY,
    output wire [63:0] m_axi_gmem_in_AWADDR,
    output wire [0:0]  m_axi_gmem_in_AWID,
    output wire [7:0]  m_axi_gmem_in_AWLEN,
    output wire [2:0]  m_axi_gmem_in_AWSIZE,
    output wire [1:0]  m_axi_gmem_in_AWBURST,
    output wire [1:0]  m_axi_gmem_in_AWLOCK,
    output wire [3:0]  m_axi_gmem_in_AWCACHE,
    output wire [2:0]  m_axi_gmem_in_AWPROT,
    output wire [3:0]  m_axi_gmem_in_AWQOS,
    output wire [3:0]  m_axi_gmem_in_AWREGION,
    output wire [0:0]  m_axi_gmem_in_AWUSER,
    output wire        m_axi_gmem_in_WVALID,
    input  wire        m_axi_gmem_in_WREADY,
    output wire [31:0] m_axi_gmem_in_WDATA,
    output wire [3:0]  m_axi_gmem_in_WSTRB,
    output wire        m_axi_gmem_in_WLAST,
    output wire [0:0]  m_axi_gmem_in_WID,
    output wire [0:0]  m_axi_gmem_in_WUSER,
    output wire        m_axi_gmem_in_ARVALID,
    input  wire        m_axi_gmem_in_ARREADY,
    output wire [63:0] m_axi_gmem_in_ARADDR,
    output wire [0:0]  m_axi_gmem_in_ARID,
    output wire [7:0]  m_axi_gmem_in_ARLEN,
    output wire [2:0]  m_axi_gmem_in_ARSIZE,
    output wire [1:0]  m_axi_gmem_in_ARBURST,
    output wire [1:0]  m_axi_gmem_in_ARLOCK,
    output wire [3:0]  m_axi_gmem_in_ARCACHE,
    output wire [2:0]  m_axi_gmem_in_ARPROT,
    output wire [3:0]  m_axi_gmem_in_ARQOS,
    output wire [3:0]  m_axi_gmem_in_ARREGION,
    output wire [0:0]  m_axi_gmem_in_ARUSER,
    input  wire        m_axi_gmem_in_RVALID,
    output wire        m_axi_gmem_in_RREADY,
    input  wire [31:0] m_axi_gmem_in_RDATA,
    input  wire        m_axi_gmem_in_RLAST,
    input  wire [0:0]  m_axi_gmem_in_RID,
    input  wire [0:0]  m_axi_gmem_in_RUSER,
    input  wire [1:0]  m_axi_gmem_in_RRESP,
    input  wire        m_axi_gmem_in_BVALID,
    output wire        m_axi_gmem_in_BREADY,
    input  wire [1:0]  m_axi_gmem_in_BRESP,
    input  wire [0:0]  m_axi_gmem_in_BID,
    input  wire [0:0]  m_axi_gmem_in_BUSER,

    /*
     * m_axi gmem_out: out (writes only; its read channel is tied off)
     */
    output wire        m_axi_gmem_out_AWVALID,
    input  wire        m_axi_gmem_out_AWREADY,
    output wire [63:0] m_axi_gmem_out_AWADDR,
    output wire [0:0]  m_axi_gmem_out_AWID,
    output wire [7:0]  m_axi_gmem_out_AWLEN,
    output wire [2:0]  m_axi_gmem_out_AWSIZE,
    output wire [1:0]  m_axi_gmem_out_AWBURST,
    output wire [1:0]  m_axi_gmem_out_AWLOCK,
    output wire [3:0]  m_axi_gmem_out_AWCACHE,
    output wire [2:0]  m_axi_gmem_out_AWPROT,
    output wire [3:0]  m_axi_gmem_out_AWQOS,
    output wire [3:0]  m_axi_gmem_out_AWREGION,
    output wire [0:0]  m_axi_gmem_out_AWUSER,
    output wire        m_axi_gmem_out_WVALID,
    input  wire        m_axi_gmem_out_WREADY,
    output wire [31:0] m_axi_gmem_out_WDATA,
    output wire [3:0]  m_axi_gmem_out_WSTRB,
    output wire        m_axi_gmem_out_WLAST,
    output wire [0:0]  m_axi_gmem_out_WID,
    output wire [0:0]  m_axi_gmem_out_WUSER,
    output wire        m_axi_gmem_out_ARVALID,
    input  wire        m_axi_gmem_out_ARREADY,
    output wire [63:0] m_axi_gmem_out_ARADDR,
    output wire [0:0]  m_axi_gmem_out_ARID,
    output wire [7:0]  m_axi_gmem_out_ARLEN,
    output wire [2:0]  m_axi_gmem_out_ARSIZE,
    output wire [1:0]  m_axi_gmem_out_ARBURST,
    output wire [1:0]  m_axi_gmem_out_ARLOCK,
    output wire [3:0]  m_axi_gmem_out_ARCACHE,
    output wire [2:0]  m_axi_gmem_out_ARPROT,
    output wire [3:0]  m_axi_gmem_out_ARQOS,
    output wire [3:0]  m_axi_gmem_out_ARREGION,
    output wire [0:0]  m_axi_gmem_out_ARUSER,
    input  wire        m_axi_gmem_out_RVALID,
    output wire        m_axi_gmem_out_RREADY,
    input  wire [31:0] m_axi_gmem_out_RDATA,
    input  wire        m_axi_gmem_out_RLAST,
    input  wire [0:0]  m_axi_gmem_out_RID,
    input  wire [0:0]  m_axi_gmem_out_RUSER,
    input  wire [1:0]  m_axi_gmem_out_RRESP,
    input  wire        m_axi_gmem_out_BVALID,
    output wire        m_axi_gmem_out_BREADY,
    input  wire [1:0]  m_axi_gmem_out_BRESP,
    input  wire [0:0]  m_axi_gmem_out_BID,
    input  wire [0:0]  m_axi_gmem_out_BUSER
);

wire rst = !ap_rst_n;

// Block control: idle -> run (the unit, the reader and the writer started together) -> done
// once the unit has emitted its last beat and the writer has its last response.
localparam [1:0] STATE_IDLE = 2'd0, STATE_RUN = 2'd1, STATE_DONE = 2'd2;

reg [1:0] state_reg = STATE_IDLE;
reg       unit_start_reg = 1'b0;
reg       unit_done_reg = 1'b0;

wire        ap_start, ap_done, ap_idle, ap_ready;
wire [63:0] frame, out;
wire [31:0] height, width, dst_h, dst_w, crop_h, crop_w, format;
wire        unit_ready, unit_done, writer_idle;
wire [31:0] pixel_tdata;
wire        pixel_tvalid, pixel_tready;
wire [95:0] beat_tdata;
wire        beat_tvalid, beat_tready;
wire        run = state_reg == STATE_IDLE && ap_start;

assign ap_idle = state_reg == STATE_IDLE;
assign ap_ready = run;
assign ap_done = state_reg == STATE_DONE;

always @(posedge ap_clk) begin
    case (state_reg)
        STATE_IDLE: if (ap_start) state_reg <= STATE_RUN;
        STATE_RUN: if (unit_done_reg && writer_idle) state_reg <= STATE_DONE;
        default: state_reg <= STATE_IDLE;
    endcase
    if (run) unit_start_reg <= 1'b1;
    if (unit_ready) unit_start_reg <= 1'b0;
    if (run) unit_done_reg <= 1'b0;
    if (unit_done) unit_done_reg <= 1'b1;
    if (rst) begin
        state_reg <= STATE_IDLE;
        unit_start_reg <= 1'b0;
        unit_done_reg <= 1'b0;
    end
end

image_post_cu_control_s_axi control_inst (
    .ACLK(ap_clk),
    .ARESETN(ap_rst_n),
    .AWADDR(s_axi_control_AWADDR),
    .AWVALID(s_axi_control_AWVALID),
    .AWREADY(s_axi_control_AWREADY),
    .WDATA(s_axi_control_WDATA),
    .WSTRB(s_axi_control_WSTRB),
    .WVALID(s_axi_control_WVALID),
    .WREADY(s_axi_control_WREADY),
    .BRESP(s_axi_control_BRESP),
    .BVALID(s_axi_control_BVALID),
    .BREADY(s_axi_control_BREADY),
    .ARADDR(s_axi_control_ARADDR),
    .ARVALID(s_axi_control_ARVALID),
    .ARREADY(s_axi_control_ARREADY),
    .RDATA(s_axi_control_RDATA),
    .RRESP(s_axi_control_RRESP),
    .RVALID(s_axi_control_RVALID),
    .RREADY(s_axi_control_RREADY),
    .interrupt(interrupt),
    .ap_start(ap_start),
    .ap_done(ap_done),
    .ap_ready(ap_ready),
    .ap_idle(ap_idle),
    .frame(frame),
    .height(height),
    .width(width),
    .out(out),
    .dst_h(dst_h),
    .dst_w(dst_w),
    .crop_h(crop_h),
    .crop_w(crop_w),
    .format(format)
);

axi_pixel_reader reader_inst (
    .clk(ap_clk),
    .rst(rst),
    .start(run),
    .base(frame),
    .pixels(height * width),
    .done(),
    .m_axi_araddr(m_axi_gmem_in_ARADDR),
    .m_axi_arlen(m_axi_gmem_in_ARLEN),
    .m_axi_arvalid(m_axi_gmem_in_ARVALID),
    .m_axi_arready(m_axi_gmem_in_ARREADY),
    .m_axi_rdata(m_axi_gmem_in_RDATA),
    .m_axi_rvalid(m_axi_gmem_in_RVALID),
    .m_axi_rready(m_axi_gmem_in_RREADY),
    .m_axis_tdata(pixel_tdata),
    .m_axis_tvalid(pixel_tvalid),
    .m_axis_tready(pixel_tready)
);

image_postdecode #(
    .MAX_WIDTH(MAX_WIDTH),
    .PIXELS_PER_BEAT(1)   // the reader streams a pixel a beat
)
unit_inst (
    .ap_clk(ap_clk),
    .ap_rst(rst),
    .ap_start(unit_start_reg),
    .ap_ready(unit_ready),
    .ap_done(unit_done),
    .ap_idle(),
    .src_h(height),
    .src_w(width),
    .dst_h(dst_h),
    .dst_w(dst_w),
    .crop_h(crop_h),
    .crop_w(crop_w),
    .format(format),
    .s_axis_tdata(pixel_tdata),
    .s_axis_tvalid(pixel_tvalid),
    .s_axis_tready(pixel_tready),
    .m_axis_tdata(beat_tdata),
    .m_axis_tvalid(beat_tvalid),
    .m_axis_tready(beat_tready)
);

axi_element_writer writer_inst (
    .clk(ap_clk),
    .rst(rst),
    .start(run),
    .base(out),
    .pixels(crop_h * crop_w),
    .format(format[1:0]),
    .idle(writer_idle),
    .s_axis_tdata(beat_tdata),
    .s_axis_tvalid(beat_tvalid),
    .s_axis_tready(beat_tready),
    .m_axi_awaddr(m_axi_gmem_out_AWADDR),
    .m_axi_awvalid(m_axi_gmem_out_AWVALID),
    .m_axi_awready(m_axi_gmem_out_AWREADY),
    .m_axi_wdata(m_axi_gmem_out_WDATA),
    .m_axi_wstrb(m_axi_gmem_out_WSTRB),
    .m_axi_wvalid(m_axi_gmem_out_WVALID),
    .m_axi_wready(m_axi_gmem_out_WREADY),
    .m_axi_bvalid(m_axi_gmem_out_BVALID),
    .m_axi_bready(m_axi_gmem_out_BREADY)
);

// Reads are 32-bit incrementing bursts, writes single 32-bit beats; IDs, user bits, locks, QoS
// and regions are 0, cache attributes "modifiable, bufferable" as Vitis HLS drives them.
assign m_axi_gmem_in_ARID = 1'b0;
assign m_axi_gmem_in_ARSIZE = 3'd2;
assign m_axi_gmem_in_ARBURST = 2'b01;
assign m_axi_gmem_in_ARLOCK = 2'b00;
assign m_axi_gmem_in_ARCACHE = 4'b0011;
assign m_axi_gmem_in_ARPROT = 3'd0;
assign m_axi_gmem_in_ARQOS = 4'd0;
assign m_axi_gmem_in_ARREGION = 4'd0;
assign m_axi_gmem_in_ARUSER = 1'b0;
assign m_axi_gmem_in_AWVALID = 1'b0;
assign m_axi_gmem_in_AWADDR = 64'd0;
assign m_axi_gmem_in_AWID = 1'b0;
assign m_axi_gmem_in_AWLEN = 8'd0;
assign m_axi_gmem_in_AWSIZE = 3'd2;
assign m_axi_gmem_in_AWBURST = 2'b01;
assign m_axi_gmem_in_AWLOCK = 2'b00;
assign m_axi_gmem_in_AWCACHE = 4'b0011;
assign m_axi_gmem_in_AWPROT = 3'd0;
assign m_axi_gmem_in_AWQOS = 4'd0;
assign m_axi_gmem_in_AWREGION = 4'd0;
assign m_axi_gmem_in_AWUSER = 1'b0;
assign m_axi_gmem_in_WVALID = 1'b0;
assign m_axi_gmem_in_WDATA = 32'd0;
assign m_axi_gmem_in_WSTRB = 4'd0;
assign m_axi_gmem_in_WLAST = 1'b0;
assign m_axi_gmem_in_WID = 1'b0;
assign m_axi_gmem_in_WUSER = 1'b0;
assign m_axi_gmem_in_BREADY = 1'b1;

assign m_axi_gmem_out_AWID = 1'b0;
assign m_axi_gmem_out_AWLEN = 8'd0;
assign m_axi_gmem_out_AWSIZE = 3'd2;
assign m_axi_gmem_out_AWBURST = 2'b01;
assign m_axi_gmem_out_AWLOCK = 2'b00;
assign m_axi_gmem_out_AWCACHE = 4'b0011;
assign m_axi_gmem_out_AWPROT = 3'd0;
assign m_axi_gmem_out_AWQOS = 4'd0;
assign m_axi_gmem_out_AWREGION = 4'd0;
assign m_axi_gmem_out_AWUSER = 1'b0;
assign m_axi_gmem_out_WLAST = 1'b1;
assign m_axi_gmem_out_WID = 1'b0;
assign m_axi_gmem_out_WUSER = 1'b0;
assign m_axi_gmem_out_ARVALID = 1'b0;
assign m_axi_gmem_out_ARADDR = 64'd0;
assign m_axi_gmem_out_ARID = 1'b0;
assign m_axi_gmem_out_ARLEN = 8'd0;
assign m_axi_gmem_out_ARSIZE = 3'd2;
assign m_axi_gmem_out_ARBURST = 2'b01;
assign m_axi_gmem_out_ARLOCK = 2'b00;
assign m_axi_gmem_out_ARCACHE = 4'b0011;
assign m_axi_gmem_out_ARPROT = 3'd0;
assign m_axi_gmem_out_ARQOS = 4'd0;
assign m_axi_gmem_out_ARREGION = 4'd0;
assign m_axi_gmem_out_ARUSER = 1'b0;
assign m_axi_gmem_out_RREADY = 1'b1;

endmodule

`resetall
`default_nettype wire
