`resetall
`timescale 1ns / 1ps
`default_nettype none

// Bulk harness for resize_tap_gen: a column (CLAMP_WEIGHT = 1) and a row (0) generator take the
// same requests, so that every coordinate of a vector file is checked in both modes at the
// simulator's own speed.
//
// +vectors=<hex file: COUNT rows of {0, d, dst, src}, 16 bits each> +results=<hex file written at
// the end: per row {row tap, column tap}, each {w1, w0, src1, src0} in 16-bit fields>. A new
// (src, dst) pair waits for the taps in flight, then sets both generators up; its coordinates
// then go in one per cycle. `finished` rises when the last taps are in.
module resize_tap_gen_tb #(
    // Rows in the vector file.
    parameter COUNT = 16
) ();

localparam DIM_WIDTH = 14;

reg clk = 1'b0;
reg rst = 1'b1;
reg finished = 1'b0;

reg [63:0] vectors [0:COUNT-1];
reg [127:0] results [0:COUNT-1];
reg [1023:0] vector_file, result_file;

integer issued = 0, received = 0, setup_row = -1;
reg setup_valid = 1'b0;
wire [63:0] row = vectors[issued < COUNT ? issued : COUNT - 1];
wire [63:0] previous = vectors[issued > 0 ? issued - 1 : 0];
wire needs_setup = (issued == 0 || row[31:0] != previous[31:0]) && setup_row != issued;
wire column_ready, row_ready;
wire tap_valid = !rst && issued < COUNT && !needs_setup && !setup_valid && column_ready && row_ready;
wire column_valid, row_valid;
wire [DIM_WIDTH-1:0] column_src0, column_src1, row_src0, row_src1;
wire [11:0] column_w0, column_w1, row_w0, row_w1;

resize_tap_gen #(.CLAMP_WEIGHT(1), .DIM_WIDTH(DIM_WIDTH)) column_gen (
    .clk(clk), .rst(rst), .setup_valid(setup_valid), .setup_src(row[DIM_WIDTH-1:0]),
    .setup_dst(row[16 +: DIM_WIDTH]), .ready(column_ready), .tap_valid(tap_valid), .tap_d(row[32 +: DIM_WIDTH]),
    .out_valid(column_valid), .out_src0(column_src0), .out_src1(column_src1), .out_w0(column_w0), .out_w1(column_w1)
);

resize_tap_gen #(.CLAMP_WEIGHT(0), .DIM_WIDTH(DIM_WIDTH)) row_gen (
    .clk(clk), .rst(rst), .setup_valid(setup_valid), .setup_src(row[DIM_WIDTH-1:0]),
    .setup_dst(row[16 +: DIM_WIDTH]), .ready(row_ready), .tap_valid(tap_valid), .tap_d(row[32 +: DIM_WIDTH]),
    .out_valid(row_valid), .out_src0(row_src0), .out_src1(row_src1), .out_w0(row_w0), .out_w1(row_w1)
);

initial begin
    if (!$value$plusargs("vectors=%s", vector_file) || !$value$plusargs("results=%s", result_file)) begin
        $display("resize_tap_gen_tb: +vectors=<file> and +results=<file> are required");
        $finish;
    end
    $readmemh(vector_file, vectors);
    repeat (4) @(posedge clk);
    rst <= 1'b0;
end

always #2 clk = !clk;

always @(posedge clk) begin
    // A new pair sets up once every tap of the previous one is out.
    setup_valid <= 1'b0;
    if (!rst && issued < COUNT && needs_setup && !setup_valid && received == issued) begin
        setup_valid <= 1'b1;
        setup_row <= issued;
    end
    if (tap_valid) issued <= issued + 1;
    if (column_valid) begin
        results[received] <= {4'd0, row_w1, 4'd0, row_w0, 2'd0, row_src1, 2'd0, row_src0,
                              4'd0, column_w1, 4'd0, column_w0, 2'd0, column_src1, 2'd0, column_src0};
        received <= received + 1;
        if (received == COUNT - 1) finished <= 1'b1;
    end
end

always @(posedge finished) begin
    $writememh(result_file, results);
end

endmodule

`resetall
`default_nettype wire
