`timescale 1ns / 1ps
`default_nettype none

// Full-rate harness for upsample_color: streams the column beats of +BEATS=<file> (hex, one a
// line) with tvalid held high and tready held high, writes every output beat to +OUT=<file> and
// prints the cycles from ap_start to ap_done. +WIDTH, +HEIGHT, +MODE, +COUNT (beats) from the caller.
module upsample_rate_tb;

reg clk = 1'b0, rst = 1'b1, start = 1'b0;
always #2 clk = ~clk;

reg [31:0] width, height, mode, count;
reg [95:0] beats [0:1048575];
reg [31:0] sent = 0, cycles = 0;
reg        running = 1'b0;
integer    out_file;
reg [1023:0] beats_path, out_path;

wire        ready, done, idle, in_ready, out_valid;
wire [63:0] out_data;

upsample_color dut (
    .ap_clk(clk), .ap_rst(rst), .ap_start(start), .ap_ready(ready), .ap_done(done), .ap_idle(idle),
    .width(width), .height(height), .mode(mode),
    .s_axis_tdata(beats[sent[19:0]]), .s_axis_tvalid(running && sent < count), .s_axis_tready(in_ready),
    .m_axis_tdata(out_data), .m_axis_tvalid(out_valid), .m_axis_tready(1'b1)
);

initial begin
    if (!$value$plusargs("BEATS=%s", beats_path) || !$value$plusargs("OUT=%s", out_path)
        || !$value$plusargs("WIDTH=%d", width) || !$value$plusargs("HEIGHT=%d", height)
        || !$value$plusargs("MODE=%d", mode) || !$value$plusargs("COUNT=%d", count)) begin
        $display("missing plusargs");
        $finish;
    end
    $readmemh(beats_path, beats);
    out_file = $fopen(out_path, "w");
    repeat (3) @(posedge clk);
    rst <= 1'b0;
    @(posedge clk);
    start <= 1'b1;
    running <= 1'b1;
    @(posedge clk);
    start <= 1'b0;
end

always @(posedge clk) begin
    if (running) cycles <= cycles + 1;
    if (running && in_ready && sent < count) sent <= sent + 1;
    if (out_valid) $fwrite(out_file, "%h\n", out_data);
    if (done) begin
        $display("CYCLES %0d", cycles + 1);
        $fclose(out_file);
        $finish;
    end
end

endmodule

`default_nettype wire
