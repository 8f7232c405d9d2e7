`resetall
`timescale 1ns / 1ps
`default_nettype none

// Bulk harness for the RTL operators (ap_ctrl_chain + ap_ce units): streams every operand vector of
// a file through the unit, one per cycle where the idle and stall generators allow, and writes the
// results to a file, so that a million operations run at the simulator's own speed.
//
// Plusargs: +operands=<hex file, COUNT words of IN_WIDTH bits> +results=<hex file written at the
// end>. `finished` rises when the last result is in. The first CALM operations run without idle
// cycles or stalls, for the unit's timing: `first_latency` is the cycles from the first ap_start
// to its ap_done, `calm_span` those from the first ap_start to the ap_done of operation CALM - 1.
// The unit sits behind op_bulk_dut (op_bulk_dut.v maps the packed operands and results onto the
// ports of the unit its define selects).
module op_bulk_tb #(
    // Operand bits per operation (the unit's inputs, packed as op_bulk_dut unpacks them).
    parameter IN_WIDTH = 64,
    // Result bits per operation.
    parameter OUT_WIDTH = 32,
    // Operations in the operand file.
    parameter COUNT = 16,
    // Probability, in 1/256, that a cycle has no ap_start (idle) when operands are left.
    parameter IDLE_256 = 64,
    // Probability, in 1/256, that a cycle has ap_ce low (the caller's pipeline stalls).
    parameter STALL_256 = 64,
    // Operations at the start that run without idle cycles or stalls (0: none).
    parameter CALM = 0
) ();

reg clk = 1'b0;
reg rst = 1'b1;
reg finished = 1'b0;
reg [31:0] first_latency = 32'd0;
reg [31:0] calm_span = 32'd0;

reg [IN_WIDTH-1:0] operands [0:COUNT-1];
reg [OUT_WIDTH-1:0] results [0:COUNT-1];
reg [1023:0] operand_file, result_file;

// Two independent Galois LFSRs (x^32 + x^22 + x^2 + x + 1) drive idle and stall cycles.
reg [31:0] idle_lfsr = 32'hACE1_2468, stall_lfsr = 32'h1357_9BDF;
integer issued = 0, received = 0, cycle = 0, first_start = -1;
wire idle = issued >= CALM && idle_lfsr[7:0] < IDLE_256;
wire ce = received < CALM || !(stall_lfsr[7:0] < STALL_256);

wire start = !rst && !idle && issued < COUNT;
wire done;
wire [OUT_WIDTH-1:0] result;

op_bulk_dut #(
    .IN_WIDTH(IN_WIDTH),
    .OUT_WIDTH(OUT_WIDTH)
)
dut (
    .clk(clk),
    .rst(rst),
    .ce(ce),
    .start(start),
    .operands(issued < COUNT ? operands[issued] : {IN_WIDTH{1'b0}}),
    .done(done),
    .result(result)
);

initial begin
    if (!$value$plusargs("operands=%s", operand_file) || !$value$plusargs("results=%s", result_file)) begin
        $display("op_bulk_tb: +operands=<file> and +results=<file> are required");
        $finish;
    end
    $readmemh(operand_file, operands);
    repeat (4) @(posedge clk);
    rst <= 1'b0;
end

always #2 clk = !clk;

always @(posedge clk) begin
    idle_lfsr <= {idle_lfsr[0], idle_lfsr[31:1]} ^ (idle_lfsr[0] ? 32'h80200003 : 32'd0);
    stall_lfsr <= {stall_lfsr[0], stall_lfsr[31:1]} ^ (stall_lfsr[0] ? 32'h80200003 : 32'd0);
    cycle <= cycle + 1;
    if (start && ce) begin
        if (first_start < 0) first_start = cycle;
        issued <= issued + 1;
    end
    if (done) begin
        if (received == 0) first_latency <= cycle - first_start;
        if (received == CALM - 1) calm_span <= cycle - first_start;
        results[received] <= result;
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
