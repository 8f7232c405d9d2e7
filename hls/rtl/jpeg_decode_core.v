`resetall
`timescale 1ns / 1ps
`default_nettype none

// JPEG decode core: tables and scan bytes in, 8x8 sample blocks out (entropy decode, de-zigzag, dequantise, islow IDCT).
//
// jpeg_entropy_decode (one Huffman symbol a cycle) -> jpeg_coef_block (double-buffered blocks)
// -> idct8x8_islow (II 8, beside the decoder). Blocks leave in scan order (MCU by MCU, per
// component its h x v blocks), each as 8 rows of 8 samples, exactly as atoll_image::idct_islow
// computes them from decode_block's coefficients. ap_start latches the scan's arguments; the core
// then reads the table writes the HLS C++ streams in (Huffman tables at addr 0x0000-0x1FFF in
// jpeg_huff_decoder's map, the components' quantisation steps at 0x2000 + component * 64 +
// natural index) up to one with bit 31 of addr set, then decodes the scan. ap_done (with
// status_ap_vld) pulses once the decoder has finished, drained its input to the end of the scan
// bytes, and every block it emitted has left the IDCT, followed by zero rows for every block it
// did not decode (on CORRUPT), so that exactly n_mcus MCUs of blocks always leave: jpeg_mcu_strip
// reads that many, and the chain behind it completes on any input.
module jpeg_decode_core (
    /*
     * Clock and synchronous active-high reset
     */
    input  wire        clk,
    input  wire        rst,

    /*
     * Block-level control (ap_ctrl_chain); the scan's arguments (C uint32_t, see jpeg_huff_decoder)
     */
    input  wire        ap_start,
    output wire        ap_ready,
    output wire        ap_idle,
    output wire        ap_done,
    input  wire [31:0] n_mcus,
    input  wire [31:0] restart_interval,
    input  wire [31:0] n_components,
    input  wire [31:0] components,
    // 0 OK, 2 CORRUPT (atoll_image::Status), valid with status_ap_vld (= ap_done)
    output wire [31:0] status,
    output wire        status_ap_vld,

    /*
     * Table writes: [31:0] addr (bit 31: the last, not written), [63:32] data
     */
    input  wire [63:0] s_tbl_tdata,
    input  wire        s_tbl_tvalid,
    output wire        s_tbl_tready,

    /*
     * Scan bytes in: [63:0] bytes (byte k in [8k+7:8k]), [71:64] byte count 1..8, [72] last beat
     */
    input  wire [79:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * Sample rows out: sample k (column k) in [8k+7:8k], 8 rows a block
     */
    output wire [63:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

localparam [2:0] S_IDLE = 3'd0, S_LOAD = 3'd1, S_START = 3'd2, S_RUN = 3'd3, S_PAD = 3'd4;

reg  [2:0]   state_reg = S_IDLE;
reg  [31:0]  n_mcus_reg = 32'd0;
reg  [15:0]  interval_reg = 16'd0;
reg  [1:0]   ncomp_reg = 2'd0;
reg  [17:0]  comps_reg = 18'd0;
reg  [5:0]   pending_reg = 6'd0;   // blocks between the decoder's block end and the IDCT's last row
reg  [2:0]   out_row_reg = 3'd0;
reg  [3:0]   mcu_blocks_reg = 4'd0; // blocks an MCU holds
reg  [3:0]   out_block_reg = 4'd0;  // blocks of the current MCU out
reg  [31:0]  out_mcus_reg = 32'd0;  // MCUs out, decoded or padded
reg          done_reg = 1'b0;
reg          decoded_reg = 1'b0;   // the decoder's ap_done has come
wire [25:0]  coef_tdata;
wire         coef_tvalid, coef_tready;
wire [255:0] row_tdata;
wire         row_tvalid, row_tready;
wire         entropy_ready, entropy_idle, entropy_done;
wire [1:0]   entropy_status;
wire         tbl_take = state_reg == S_LOAD && s_tbl_tvalid;
wire         tbl_write = tbl_take && !s_tbl_tdata[31];
wire         block_in = coef_tvalid && coef_tready && coef_tdata[23];
wire         block_out = m_axis_tvalid && m_axis_tready && out_row_reg == 3'd7;
// Scan bytes enter once the tables are in (the decoder's start clears its reader).
wire         scan_open = state_reg == S_START || state_reg == S_RUN;
wire         scan_ready;
wire [63:0]  idct_tdata;
wire         idct_tvalid;
wire         padding = state_reg == S_PAD;
wire         last_block = out_block_reg == mcu_blocks_reg - 4'd1;

assign ap_idle = state_reg == S_IDLE;
assign ap_ready = ap_idle && ap_start;
assign s_tbl_tready = state_reg == S_LOAD;
assign s_axis_tready = scan_ready && scan_open;
assign status = {30'd0, entropy_status};
assign status_ap_vld = done_reg;
assign ap_done = done_reg;
assign m_axis_tdata = padding ? 64'd0 : idct_tdata;
assign m_axis_tvalid = padding || idct_tvalid;

// Blocks an MCU holds: (h + 1)(v + 1) of each present component ({.., v == 2, h == 2} per 6 bits).
function [3:0] mcu_blocks(input [1:0] ncomp, input [17:0] comps);
    integer c;
    begin
        mcu_blocks = 4'd0;
        for (c = 0; c < 3; c = c + 1)
            if (c < ncomp) mcu_blocks = mcu_blocks + ({3'd0, comps[6 * c]} + 4'd1) * ({3'd0, comps[6 * c + 1]} + 4'd1);
    end
endfunction

jpeg_entropy_decode entropy (
    .clk(clk),
    .rst(rst),
    .ap_start(state_reg == S_START),
    .ap_ready(entropy_ready),
    .ap_idle(entropy_idle),
    .ap_done(entropy_done),
    .n_mcus(n_mcus_reg),
    .restart_interval(interval_reg),
    .n_components(ncomp_reg),
    .components(comps_reg),
    .status(entropy_status),
    .tbl_we(tbl_write && !s_tbl_tdata[13]),
    .tbl_addr(s_tbl_tdata[12:0]),
    .tbl_wdata(s_tbl_tdata[56:32]),
    .s_axis_tdata(s_axis_tdata),
    .s_axis_tvalid(s_axis_tvalid && scan_open),
    .s_axis_tready(scan_ready),
    .m_axis_tdata(coef_tdata),
    .m_axis_tvalid(coef_tvalid),
    .m_axis_tready(coef_tready)
);

jpeg_coef_block blocks (
    .clk(clk),
    .rst(rst),
    .clear(ap_ready),
    .q_we(tbl_write && s_tbl_tdata[13]),
    .q_addr(s_tbl_tdata[7:0]),
    .q_wdata(s_tbl_tdata[47:32]),
    .s_axis_tdata(coef_tdata),
    .s_axis_tvalid(coef_tvalid),
    .s_axis_tready(coef_tready),
    .m_axis_tdata(row_tdata),
    .m_axis_tvalid(row_tvalid),
    .m_axis_tready(row_tready)
);

idct8x8_islow idct (
    .clk(clk),
    .rst(rst),
    .s_axis_tdata(row_tdata),
    .s_axis_tvalid(row_tvalid),
    .s_axis_tready(row_tready),
    .m_axis_tdata(idct_tdata),
    .m_axis_tvalid(idct_tvalid),
    .m_axis_tready(m_axis_tready && !padding)
);

always @(posedge clk) begin
    pending_reg <= pending_reg + {5'd0, block_in} - {5'd0, block_out && !padding};
    if (m_axis_tvalid && m_axis_tready) out_row_reg <= out_row_reg + 3'd1;
    if (block_out) begin
        out_block_reg <= last_block ? 4'd0 : out_block_reg + 4'd1;
        if (last_block) out_mcus_reg <= out_mcus_reg + 32'd1;
    end
    if (entropy_done) decoded_reg <= 1'b1;
    done_reg <= 1'b0;
    case (state_reg)
        S_IDLE: begin
            if (ap_start) begin
                n_mcus_reg <= n_mcus;
                interval_reg <= restart_interval[15:0];
                ncomp_reg <= n_components[1:0];
                comps_reg <= components[17:0];
                decoded_reg <= 1'b0;
                mcu_blocks_reg <= mcu_blocks(n_components[1:0], components[17:0]);
                out_block_reg <= 4'd0;
                out_mcus_reg <= 32'd0;
                state_reg <= S_LOAD;
            end
        end
        S_LOAD: if (tbl_take && s_tbl_tdata[31]) state_reg <= S_START;
        S_START: if (entropy_ready) state_reg <= S_RUN;
        S_RUN: begin
            if (decoded_reg && pending_reg == 6'd0) begin
                if (out_mcus_reg == n_mcus_reg) begin
                    state_reg <= S_IDLE;
                    done_reg <= 1'b1;
                end else begin
                    state_reg <= S_PAD;
                end
            end
        end
        default: begin  // S_PAD: zero rows up to the last block
            if (block_out && last_block && out_mcus_reg + 32'd1 == n_mcus_reg) begin
                state_reg <= S_IDLE;
                done_reg <= 1'b1;
            end
        end
    endcase
    if (rst) begin
        state_reg <= S_IDLE;
        pending_reg <= 6'd0;
        out_row_reg <= 3'd0;
        decoded_reg <= 1'b0;
        done_reg <= 1'b0;
    end
end

endmodule

`resetall
