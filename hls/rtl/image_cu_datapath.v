`resetall
`timescale 1ns / 1ps
`default_nettype none

// The image CU's datapath in RTL, the four blackboxes chained as the HLS DATAFLOW region chains
// them: jpeg_decode_core (tables, scan bytes -> sample rows) -> jpeg_mcu_strip (-> column beats)
// -> upsample_color (-> pixel pairs) -> image_postdecode (resize, crop, normalise -> output
// beats). It exists to time the whole datapath cycle by cycle on real files (sim_tb's
// image_cu_datapath harness, `atoll bench dpu`) and to synthesize it as one (its Yosys row); the
// kernel itself instantiates the units from the HLS C++.
//
// ap_start latches every unit's arguments (each unit takes its own ap_start until its ap_ready);
// ap_done pulses once all four are done, with the decode core's status (0 OK, 2 CORRUPT: the
// frame's beats still all leave, from the core's zero rows).
module image_cu_datapath #(
    parameter MAX_WIDTH = 8192,
    parameter DIM_WIDTH = 14
) (
    input  wire        ap_clk,
    input  wire        ap_rst,

    input  wire        ap_start,
    output wire        ap_ready,
    output wire        ap_done,
    output wire        ap_idle,

    /*
     * The scan's arguments (jpeg_decode_core), the frame's (jpeg_mcu_strip, upsample_color) and
     * the post-decode unit's (C uint32_t each)
     */
    input  wire [31:0] n_mcus,
    input  wire [31:0] restart_interval,
    input  wire [31:0] n_components,
    input  wire [31:0] components,
    input  wire [31:0] width,
    input  wire [31:0] height,
    input  wire [31:0] sampling,
    input  wire [31:0] mode,
    input  wire [31:0] dst_h,
    input  wire [31:0] dst_w,
    input  wire [31:0] crop_h,
    input  wire [31:0] crop_w,
    input  wire [31:0] format,
    output reg  [31:0] status = 32'd0,

    /*
     * Table writes and scan beats in (jpeg_decode_core's), output beats out (image_postdecode's)
     */
    input  wire [63:0] s_tbl_tdata,
    input  wire        s_tbl_tvalid,
    output wire        s_tbl_tready,
    input  wire [79:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,
    output wire [95:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

// The arguments, held while the units start one by one.
reg [31:0] n_mcus_reg = 0, interval_reg = 0, ncomp_reg = 0, components_reg = 0, width_reg = 0, height_reg = 0,
           sampling_reg = 0, mode_reg = 0, dst_h_reg = 0, dst_w_reg = 0, crop_h_reg = 0, crop_w_reg = 0,
           format_reg = 0;
reg         running_reg = 1'b0, done_reg = 1'b0;
reg  [3:0]  started_reg = 4'd0, finished_reg = 4'd0;  // per unit: core, strip, colour, post
wire [3:0]  ready, done;
wire [31:0] core_status;
wire [63:0] rows_tdata;
wire        rows_tvalid, rows_tready;
wire [95:0] cols_tdata;
wire        cols_tvalid, cols_tready;
wire [63:0] pix_tdata;
wire        pix_tvalid, pix_tready;
wire [3:0]  start = {4{running_reg}} & ~started_reg;
wire        core_idle, strip_idle, colour_idle, post_idle;

assign ap_idle = !running_reg;
assign ap_ready = ap_idle && ap_start;
assign ap_done = done_reg;

jpeg_decode_core core (
    .clk(ap_clk),
    .rst(ap_rst),
    .ap_start(start[0]),
    .ap_ready(ready[0]),
    .ap_idle(core_idle),
    .ap_done(done[0]),
    .n_mcus(n_mcus_reg),
    .restart_interval(interval_reg),
    .n_components(ncomp_reg),
    .components(components_reg),
    .status(core_status),
    .status_ap_vld(),
    .s_tbl_tdata(s_tbl_tdata),
    .s_tbl_tvalid(s_tbl_tvalid),
    .s_tbl_tready(s_tbl_tready),
    .s_axis_tdata(s_axis_tdata),
    .s_axis_tvalid(s_axis_tvalid),
    .s_axis_tready(s_axis_tready),
    .m_axis_tdata(rows_tdata),
    .m_axis_tvalid(rows_tvalid),
    .m_axis_tready(rows_tready)
);

jpeg_mcu_strip #(.MAX_WIDTH(MAX_WIDTH), .DIM_WIDTH(DIM_WIDTH)) strip (
    .ap_clk(ap_clk),
    .ap_rst(ap_rst),
    .ap_start(start[1]),
    .ap_ready(ready[1]),
    .ap_done(done[1]),
    .ap_idle(strip_idle),
    .width(width_reg),
    .height(height_reg),
    .sampling(sampling_reg),
    .n_components(ncomp_reg),
    .mode(mode_reg),
    .s_axis_tdata(rows_tdata),
    .s_axis_tvalid(rows_tvalid),
    .s_axis_tready(rows_tready),
    .m_axis_tdata(cols_tdata),
    .m_axis_tvalid(cols_tvalid),
    .m_axis_tready(cols_tready)
);

upsample_color #(.DIM_WIDTH(DIM_WIDTH)) colour (
    .ap_clk(ap_clk),
    .ap_rst(ap_rst),
    .ap_start(start[2]),
    .ap_ready(ready[2]),
    .ap_done(done[2]),
    .ap_idle(colour_idle),
    .width(width_reg),
    .height(height_reg),
    .mode(mode_reg),
    .s_axis_tdata(cols_tdata),
    .s_axis_tvalid(cols_tvalid),
    .s_axis_tready(cols_tready),
    .m_axis_tdata(pix_tdata),
    .m_axis_tvalid(pix_tvalid),
    .m_axis_tready(pix_tready)
);

image_postdecode #(.MAX_WIDTH(MAX_WIDTH), .DIM_WIDTH(DIM_WIDTH)) post (
    .ap_clk(ap_clk),
    .ap_rst(ap_rst),
    .ap_start(start[3]),
    .ap_ready(ready[3]),
    .ap_done(done[3]),
    .ap_idle(post_idle),
    .src_h(height_reg),
    .src_w(width_reg),
    .dst_h(dst_h_reg),
    .dst_w(dst_w_reg),
    .crop_h(crop_h_reg),
    .crop_w(crop_w_reg),
    .format(format_reg),
    .s_axis_tdata(pix_tdata),
    .s_axis_tvalid(pix_tvalid),
    .s_axis_tready(pix_tready),
    .m_axis_tdata(m_axis_tdata),
    .m_axis_tvalid(m_axis_tvalid),
    .m_axis_tready(m_axis_tready)
);

always @(posedge ap_clk) begin
    done_reg <= 1'b0;
    if (!running_reg) begin
        if (ap_start) begin
            {n_mcus_reg, interval_reg, ncomp_reg, components_reg} <= {n_mcus, restart_interval, n_components,
                                                                       components};
            {width_reg, height_reg, sampling_reg, mode_reg} <= {width, height, sampling, mode};
            {dst_h_reg, dst_w_reg, crop_h_reg, crop_w_reg, format_reg} <= {dst_h, dst_w, crop_h, crop_w, format};
            started_reg <= 4'd0;
            finished_reg <= 4'd0;
            running_reg <= 1'b1;
        end
    end else begin
        started_reg <= started_reg | (start & ready);
        finished_reg <= finished_reg | done;
        if (done[0]) status <= core_status;
        if ((finished_reg | done) == 4'hF) begin
            running_reg <= 1'b0;
            done_reg <= 1'b1;
        end
    end
    if (ap_rst) begin
        running_reg <= 1'b0;
        done_reg <= 1'b0;
    end
end

endmodule

`resetall
