`resetall
`timescale 1ns / 1ps
`default_nettype none

// File-driven harness for jpeg_entropy_decode, or with CORE defined jpeg_decode_core: runs a list
// of scans one after another on the same unit (its state must not leak from one to the next),
// each with its tables and scan bytes, and writes every output beat (coefficient beats, or the
// core's sample rows) out, at the simulator's own speed (no Python per cycle), so whole JPEG
// files run on Icarus or Verilator.
//
// Plusargs: +jobs=<hex, 8 words a scan: n_mcus, restart_interval, n_components, components, first
// table write, table writes, first scan beat, scan beats> +n_jobs=<count> +tables=<hex, one {addr,
// data} word (14 + 25 bits) a line> +n_tables=<count> +scan=<hex, one 80-bit input beat a line>
// +n_scan=<count> +coefs=<output file>, and +finish to end the simulation itself. Per scan the
// output file gets its beats, one hex beat a line, then "status S cycles C last L symbols N first F":
// C the cycles from ap_start to ap_done, L those to the last output beat, N the symbols the
// decoder consumed, F those to the first scan beat taken (the core reads its tables first, from a
// stream that starts at ap_start; the entropy unit has them written before). S is 3 where the
// cycle limit ran out (the run stops there). `finished` rises when the file is complete.
//
// With DATAPATH defined (implies CORE) the unit is image_cu_datapath, the whole CU datapath: each
// job has 9 more words (width, height, sampling, mode, dst_h, dst_w, crop_h, crop_w, format) and
// the output beats are the post-decode unit's (96 bits).
`ifdef DATAPATH
`define CORE
`endif
module jpeg_entropy_tb #(
    // Lines the job, table and scan memories hold.
    parameter MAX_JOBS = 64,
    parameter MAX_TABLES = 8192,
    parameter MAX_SCAN = 65536,
    // Probability, in 1/256, that a cycle offers no input beat (0: the input never idles).
    parameter IDLE_256 = 0,
    // Probability, in 1/256, that a cycle takes no output beat (0: no backpressure).
    parameter STALL_256 = 0,
    // Cycles after ap_start at which the harness gives up (a hang is a failure, not a wait).
    parameter CYCLE_LIMIT = 50000000
) ();

reg clk = 1'b0;
reg rst = 1'b1;
reg finished = 1'b0;

`ifdef DATAPATH
localparam JOB_WORDS = 17;
`else
localparam JOB_WORDS = 8;
`endif
reg [31:0] jobs [0:JOB_WORDS*MAX_JOBS-1];
reg [38:0] tables [0:MAX_TABLES-1];
reg [79:0] scan [0:MAX_SCAN-1];
reg [1023:0] job_file, table_file, scan_file, coef_file;
integer n_jobs = 0, n_tables = 0, n_scan = 0, job = 0;
// The current scan's arguments and its spans of the table and scan memories.
integer n_mcus = 0, interval = 0, ncomp = 0, comps = 0, table_first = 0, table_end = 0, scan_first = 0, scan_end = 0;
reg [31:0] frame [0:8];  // DATAPATH: the job's frame and post-decode arguments
integer fd, fed = 0, cycle = 0, last_beat = 0, symbols = 0, first_scan = -1, loaded = 0;
reg        job_start = 1'b0;  // the initial block's pulse: the counters take the new scan's spans
reg        hung = 1'b0;
reg [31:0] idle_lfsr = 32'hACE1_2468, stall_lfsr = 32'h1357_9BDF;

reg        tbl_we = 1'b0;
reg [12:0] tbl_addr = 13'd0;
reg [24:0] tbl_wdata = 25'd0;
wire       tbl_ready;
// The core's table stream: every write, then the end beat (addr bit 31).
wire [63:0] tbl_beat = loaded < table_end ? {7'd0, tables[loaded][24:0], 18'd0, tables[loaded][38:25]}
                                          : {32'd0, 32'h8000_0000};
reg        ap_start = 1'b0;
reg        running = 1'b0;
wire       ap_ready, ap_idle, ap_done;
wire [1:0] status;
wire       in_ready, out_valid;
`ifdef DATAPATH
localparam OUT_WIDTH = 96;
`define DECODER dut.core.entropy.decoder
`elsif CORE
localparam OUT_WIDTH = 64;
`define DECODER dut.entropy.decoder
`else
localparam OUT_WIDTH = 26;
`define DECODER dut.decoder
`endif
wire [OUT_WIDTH-1:0] out_data;
wire       in_valid = running && fed < scan_end && !(idle_lfsr[7:0] < IDLE_256);
wire       out_ready = !(stall_lfsr[7:0] < STALL_256);

`ifdef DATAPATH
wire [31:0] status_word;
assign status = status_word[1:0];
image_cu_datapath dut (
    .ap_clk(clk),
    .ap_rst(rst),
    .ap_start(ap_start),
    .ap_ready(ap_ready),
    .ap_idle(ap_idle),
    .ap_done(ap_done),
    .n_mcus(n_mcus),
    .restart_interval(interval),
    .n_components(ncomp),
    .components(comps),
    .width(frame[0]),
    .height(frame[1]),
    .sampling(frame[2]),
    .mode(frame[3]),
    .dst_h(frame[4]),
    .dst_w(frame[5]),
    .crop_h(frame[6]),
    .crop_w(frame[7]),
    .format(frame[8]),
    .status(status_word),
    .s_tbl_tdata(tbl_beat),
    .s_tbl_tvalid(running && loaded <= table_end),
    .s_tbl_tready(tbl_ready),
`elsif CORE
wire [31:0] status_word;
wire        status_vld;
assign status = status_word[1:0];
jpeg_decode_core dut (
    .clk(clk),
    .rst(rst),
    .ap_start(ap_start),
    .ap_ready(ap_ready),
    .ap_idle(ap_idle),
    .ap_done(ap_done),
    .n_mcus(n_mcus),
    .restart_interval(interval),
    .n_components(ncomp),
    .components(comps),
    .status(status_word),
    .status_ap_vld(status_vld),
    .s_tbl_tdata(tbl_beat),
    .s_tbl_tvalid(running && loaded <= table_end),
    .s_tbl_tready(tbl_ready),
`else
assign tbl_ready = 1'b0;
jpeg_entropy_decode dut (
    .clk(clk),
    .rst(rst),
    .ap_start(ap_start),
    .ap_ready(ap_ready),
    .ap_idle(ap_idle),
    .ap_done(ap_done),
    .n_mcus(n_mcus[31:0]),
    .restart_interval(interval[15:0]),
    .n_components(ncomp[1:0]),
    .components(comps[17:0]),
    .status(status),
    .tbl_we(tbl_we),
    .tbl_addr(tbl_addr),
    .tbl_wdata(tbl_wdata),
`endif
    .s_axis_tdata(fed < scan_end ? scan[fed] : 80'd0),
    .s_axis_tvalid(in_valid),
    .s_axis_tready(in_ready),
    .m_axis_tdata(out_data),
    .m_axis_tvalid(out_valid),
    .m_axis_tready(out_ready)
);

always #2 clk = !clk;

integer i;
initial begin
    if (!$value$plusargs("jobs=%s", job_file) || !$value$plusargs("tables=%s", table_file)
            || !$value$plusargs("scan=%s", scan_file) || !$value$plusargs("coefs=%s", coef_file)) begin
        $display("jpeg_entropy_tb: +jobs, +tables, +scan and +coefs are required");
        $finish;
    end
    if ($value$plusargs("n_jobs=%d", n_jobs)) begin end
    if ($value$plusargs("n_tables=%d", n_tables)) begin end
    if ($value$plusargs("n_scan=%d", n_scan)) begin end
    if (n_jobs > 0) $readmemh(job_file, jobs, 0, JOB_WORDS * n_jobs - 1);
    if (n_tables > 0) $readmemh(table_file, tables, 0, n_tables - 1);
    if (n_scan > 0) $readmemh(scan_file, scan, 0, n_scan - 1);
    fd = $fopen(coef_file, "w");
    repeat (4) @(posedge clk);
    rst <= 1'b0;
    for (job = 0; job < n_jobs && !hung; job = job + 1) begin
        n_mcus = jobs[JOB_WORDS * job];
        interval = jobs[JOB_WORDS * job + 1];
        ncomp = jobs[JOB_WORDS * job + 2];
        comps = jobs[JOB_WORDS * job + 3];
        table_first = jobs[JOB_WORDS * job + 4];
        table_end = table_first + jobs[JOB_WORDS * job + 5];
        scan_first = jobs[JOB_WORDS * job + 6];
        scan_end = scan_first + jobs[JOB_WORDS * job + 7];
        for (i = 8; i < JOB_WORDS; i = i + 1) frame[i - 8] = jobs[JOB_WORDS * job + i];
`ifndef CORE
        for (i = table_first; i < table_end; i = i + 1) begin
            @(posedge clk);
            tbl_we <= 1'b1;
            tbl_addr <= tables[i][37:25];
            tbl_wdata <= tables[i][24:0];
        end
`endif
        @(posedge clk);
        tbl_we <= 1'b0;
        job_start <= 1'b1;
        @(posedge clk);
        job_start <= 1'b0;
        ap_start <= 1'b1;
        @(posedge clk);
        while (!ap_ready) @(posedge clk);
        ap_start <= 1'b0;
        while (running) @(posedge clk);
    end
    $fclose(fd);
    finished <= 1'b1;
    if ($test$plusargs("finish")) $finish;
end

always @(posedge clk) begin
    idle_lfsr <= {idle_lfsr[30:0], 1'b0} ^ (idle_lfsr[31] ? 32'h0040_0007 : 32'd0);
    stall_lfsr <= {stall_lfsr[30:0], 1'b0} ^ (stall_lfsr[31] ? 32'h0040_0007 : 32'd0);
    if (job_start) begin
        running <= 1'b1;
        fed <= scan_first;
        loaded <= table_first;
        cycle <= 0;
        last_beat <= 0;
        symbols <= 0;
        first_scan <= -1;
    end else if (running) begin
        cycle <= cycle + 1;
        if (in_valid && in_ready) fed <= fed + 1;
        if (in_valid && in_ready && first_scan < 0) first_scan <= cycle;
        if (tbl_ready && loaded <= table_end) loaded <= loaded + 1;
        if (`DECODER.consume) symbols <= symbols + 1;
        if (out_valid && out_ready) begin
            $fdisplay(fd, "%h", out_data);
            last_beat <= cycle + 1;
        end
        if (ap_done || cycle >= CYCLE_LIMIT) begin
            $fdisplay(fd, "status %0d cycles %0d last %0d symbols %0d first %0d", ap_done ? status : 3, cycle + 1,
                      last_beat, symbols, first_scan);
            running <= 1'b0;
            hung <= !ap_done;
        end
    end
end

endmodule

`resetall
