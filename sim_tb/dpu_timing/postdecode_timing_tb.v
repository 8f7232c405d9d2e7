`resetall
`timescale 1ns / 1ps
`default_nettype none

// Cycle count of image_postdecode on one frame: pixels offered every cycle, beats taken every cycle.
//
// The unit's timing depends on the frame's arguments only, not on the pixel values, so the pixels
// are a counter. Plusargs: +src_h= +src_w= +dst_h= +dst_w= +crop_h= +crop_w= +format= (decimal).
// Prints "postdecode cycles C pixels P beats B": C from ap_start to ap_done, P the pixels it took,
// B the beats it gave; then ends the simulation.
module postdecode_timing_tb #(
    // Cycles after ap_start at which the harness gives up.
    parameter CYCLE_LIMIT = 100000000
) ();

reg clk = 1'b0;
reg rst = 1'b1;
reg ap_start = 1'b0;
integer src_h = 1, src_w = 1, dst_h = 1, dst_w = 1, crop_h = 1, crop_w = 1, format = 0;
integer cycles = 0, pixels = 0, beats = 0;
reg counting = 1'b0;
wire ap_ready, ap_done, ap_idle, in_ready, out_valid;
wire [95:0] out_data;

image_postdecode dut (
    .ap_clk(clk),
    .ap_rst(rst),
    .ap_start(ap_start),
    .ap_ready(ap_ready),
    .ap_done(ap_done),
    .ap_idle(ap_idle),
    .src_h(src_h[31:0]),
    .src_w(src_w[31:0]),
    .dst_h(dst_h[31:0]),
    .dst_w(dst_w[31:0]),
    .crop_h(crop_h[31:0]),
    .crop_w(crop_w[31:0]),
    .format(format[31:0]),
    .s_axis_tdata(pixels),
    .s_axis_tvalid(counting && pixels < src_h * src_w),
    .s_axis_tready(in_ready),
    .m_axis_tdata(out_data),
    .m_axis_tvalid(out_valid),
    .m_axis_tready(1'b1)
);

always #2 clk = !clk;

initial begin
    if ($value$plusargs("src_h=%d", src_h)) begin end
    if ($value$plusargs("src_w=%d", src_w)) begin end
    if ($value$plusargs("dst_h=%d", dst_h)) begin end
    if ($value$plusargs("dst_w=%d", dst_w)) begin end
    if ($value$plusargs("crop_h=%d", crop_h)) begin end
    if ($value$plusargs("crop_w=%d", crop_w)) begin end
    if ($value$plusargs("format=%d", format)) begin end
    repeat (4) @(posedge clk);
    rst = 1'b0;
    @(posedge clk);
    ap_start = 1'b1;
    counting = 1'b1;
    @(posedge clk);
    while (!ap_ready) @(posedge clk);
    ap_start = 1'b0;
end

always @(posedge clk) begin
    if (counting) begin
        cycles <= cycles + 1;
        if (in_ready && pixels < src_h * src_w) pixels <= pixels + 1;
        if (out_valid) beats <= beats + 1;
        if (ap_done || cycles >= CYCLE_LIMIT) begin
            $display("postdecode cycles %0d pixels %0d beats %0d done %0d", cycles, pixels, beats, ap_done);
            $finish;
        end
    end
end

endmodule

`resetall
