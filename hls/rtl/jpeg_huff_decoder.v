`resetall
`timescale 1ns / 1ps
`default_nettype none

// Baseline JPEG Huffman/coefficient decoder: de-stuffed scan beats in, one coefficient beat per Huffman symbol out.
//
// Decodes the interleaved scan exactly as atoll_image::decode_block and decode_scan do (T.81
// F.2.2): per MCU, per component, its h x v blocks; per block a DC symbol (its difference added
// to the component's predictor) and AC symbols (run/size, EOB, ZRL) up to coefficient 63.
// A symbol whose code fits the 9-bit lookahead table is decoded, its value bits extracted and
// its bits consumed in one cycle; a longer code takes two more cycles (the canonical maxcode
// comparison over lengths 10..16 in parallel, then a symbol table read). Restart intervals: after
// every `restart_interval` MCUs the buffered bits are dropped, the bytes up to the next marker
// skipped, the marker must be RST(n mod 8), and the predictors restart at 0. At a marker or at
// the end of the input zero bits follow the data; a symbol that would consume one is CORRUPT
// (the C model's `overran`), as are codes no table defines, a DC category above 16, a run past
// coefficient 63, and a missing or out-of-order restart marker. After the last MCU (or on
// CORRUPT) the remaining input is drained up to the reader's end beat, so the producer of the
// scan bytes never blocks, and then ap_done pulses with the status. Every cycle either consumes
// input bits or input beats or waits for them, and a block has at most 64 symbols: no input
// makes the unit loop forever.
//
// Tables are written through the tbl_* port while the unit is idle, from the HLS C++'s HuffTable
// (build_huff_table): table t = {ac, id} (DC tables 0..3, AC tables 4..7).
//   addr 0x0000 + t*512 + i: {look_len[i] (4 bits), look_sym[i] (8 bits)} in wdata[11:0]
//   addr 0x1000 + t*256 + i: huffval[i] in wdata[7:0]
//   addr 0x1800 + t*8 + (len - 10), len 10..16: {valoffset[len] & 0xFF, maxcode[len] (17-bit
//                                               two's complement, -1: no code)} in wdata[24:0]
module jpeg_huff_decoder (
    /*
     * Clock and synchronous active-high reset
     */
    input  wire        clk,
    input  wire        rst,

    /*
     * Block-level control (ap_ctrl_chain): ap_start latches the scan's arguments
     */
    input  wire        ap_start,
    output wire        ap_ready,
    output wire        ap_idle,
    output reg         ap_done,
    // MCUs in the scan (mcus_x * mcus_y)
    input  wire [31:0] n_mcus,
    // MCUs per restart interval, 0: no restart markers
    input  wire [15:0] restart_interval,
    // Components in the scan, 1..3
    input  wire [1:0]  n_components,
    // Per component c, bits [6c+5:6c]: {ta (2 bits), td (2 bits), v == 2, h == 2}
    input  wire [17:0] components,
    // Status at ap_done: 0 OK, 2 CORRUPT (atoll_image::Status)
    output reg  [1:0]  status,

    /*
     * Huffman table writes (while idle)
     */
    input  wire        tbl_we,
    input  wire [12:0] tbl_addr,
    input  wire [24:0] tbl_wdata,

    /*
     * De-stuffed scan beats from jpeg_bit_reader
     */
    input  wire [36:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * Coefficient beats: [15:0] value (a DC beat carries the predictor, truncated to 16 bits),
     * [21:16] zigzag index k, [22] a coefficient is present, [23] last beat of the block,
     * [25:24] the block's component
     */
    output wire [25:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

localparam [2:0] S_IDLE = 3'd0, S_RUN = 3'd1, S_SLOW = 3'd2, S_SLOW_SYM = 3'd3, S_RESTART = 3'd4,
                 S_DRAIN = 3'd5, S_DONE = 3'd6;
localparam [1:0] OK = 2'd0, CORRUPT = 2'd2;

/*
 * Tables
 */
// Lookahead: {bad DC category, code + value bits, code length (0: longer than 9), symbol}.
reg [18:0] look_mem [0:4095];
reg [7:0]  huffval_mem [0:2047];
reg [16:0] maxcode_mem [0:63];
reg [7:0]  valoffset_mem [0:63];
reg [7:0]  huffval_q;

wire       tbl_ac = tbl_addr[11];
wire [7:0] tbl_sym = tbl_wdata[7:0];
wire [4:0] tbl_size = tbl_ac ? {1'b0, tbl_sym[3:0]} : tbl_sym[4:0];
wire       tbl_bad = !tbl_ac && tbl_sym > 8'd16;
always @(posedge clk) begin
    if (tbl_we && !tbl_addr[12]) begin
        look_mem[tbl_addr[11:0]] <= {tbl_bad, {2'b00, tbl_wdata[11:8]} + {1'b0, tbl_size}, tbl_wdata[11:8], tbl_sym};
    end
    if (tbl_we && tbl_addr[12:11] == 2'b10) huffval_mem[tbl_addr[10:0]] <= tbl_sym;
    if (tbl_we && tbl_addr[12:11] == 2'b11) begin
        maxcode_mem[tbl_addr[5:0]] <= tbl_wdata[16:0];
        valoffset_mem[tbl_addr[5:0]] <= tbl_wdata[24:17];
    end
end

/*
 * State
 */
reg [2:0]  state_reg = S_IDLE, state_next;
reg [1:0]  status_next;
reg [31:0] mcus_reg = 32'd0, mcus_next;          // MCUs left, the current one included
reg [15:0] interval_reg = 16'd0;
reg [15:0] to_restart_reg = 16'd0, to_restart_next;
reg [2:0]  rst_index_reg = 3'd0, rst_index_next;
reg [1:0]  ncomp_reg = 2'd0;
reg [17:0] comps_reg = 18'd0;
reg [1:0]  comp_reg = 2'd0, comp_next;           // component of the current block
reg        bx_reg = 1'b0, bx_next, by_reg = 1'b0, by_next;
reg        dc_reg = 1'b1, dc_next;               // the next symbol is the block's DC
reg [6:0]  k_reg = 7'd0, k_next;                 // next zigzag index
reg [31:0] pred_reg [0:2];
reg [31:0] pred_new;
reg        pred_we;
reg [63:0] acc_reg = 64'd0, acc_next;            // bits left-aligned, zeros below the valid ones
reg [6:0]  bits_reg = 7'd0, bits_next;
reg [4:0]  slow_len_reg = 5'd0, slow_len_next;
reg [25:0] out_data_reg = 26'd0, out_data_next;
reg        out_valid_reg = 1'b0, out_valid_next;

wire [5:0] comp_cfg = comps_reg[6 * comp_reg +: 6];
wire       comp_h2 = comp_cfg[0], comp_v2 = comp_cfg[1];
wire [2:0] table_sel = dc_reg ? {1'b0, comp_cfg[3:2]} : {1'b1, comp_cfg[5:4]};

wire       in_data = s_axis_tvalid && !s_axis_tdata[35] && !s_axis_tdata[36];
wire       in_mark = s_axis_tvalid && (s_axis_tdata[35] || s_axis_tdata[36]);
wire       out_free = !out_valid_reg || m_axis_tready;
// Enough bits for any symbol (16 code + 16 value bits), or zeros follow (marker or end).
wire       can_decode = bits_reg >= 7'd32 || in_mark;

/*
 * Symbol: from the lookahead table (S_RUN) or the slow path (S_SLOW_SYM)
 */
wire [18:0] look = look_mem[{table_sel, acc_reg[63:55]}];
wire [4:0]  fast_len = {1'b0, look[11:8]};
reg         sym_valid, sym_bad;
reg  [4:0]  sym_len;
reg  [5:0]  sym_total;
reg  [7:0]  sym;
always @* begin
    if (state_reg == S_SLOW_SYM) begin
        sym_valid = 1'b1;
        sym = huffval_q;
        sym_len = slow_len_reg;
        sym_bad = dc_reg && huffval_q > 8'd16;
        sym_total = {1'b0, slow_len_reg} + (dc_reg ? {1'b0, huffval_q[4:0]} : {2'b00, huffval_q[3:0]});
    end else begin
        sym_valid = state_reg == S_RUN && fast_len != 5'd0;
        sym = look[7:0];
        sym_len = fast_len;
        sym_bad = look[18];
        sym_total = look[17:12];
    end
end

// Value bits: the 16 bits after the code, their top `size` bits, sign-extended (T.81 F.12).
wire [4:0]  size = dc_reg ? sym[4:0] : {1'b0, sym[3:0]};
wire [63:0] after_code = acc_reg << sym_len;
wire [15:0] raw = after_code[63:48] >> (5'd16 - size);
wire [16:0] ones = (17'd1 << size) - 17'd1;
wire [31:0] value = size == 5'd0 ? 32'd0
                  : raw[size - 5'd1] ? {16'd0, raw} : {16'd0, raw} - {15'd0, ones};
wire [3:0]  run = sym[7:4];
wire [6:0]  k_run = k_reg + {3'd0, run};

/*
 * Slow path: the canonical code of length 10..16 that the next bits hold
 */
reg        slow_found;
reg [4:0]  slow_len;
reg [10:0] slow_addr;
reg [15:0] cand;
reg [5:0]  code_row;
integer    l;
always @* begin
    slow_found = 1'b0;
    slow_len = 5'd0;
    slow_addr = 11'd0;
    cand = 16'd0;
    for (l = 10; l <= 16; l = l + 1) begin
        cand = acc_reg[63:48] >> (16 - l);
        code_row = {table_sel, 3'd0} + l - 10;
        if (!slow_found && $signed({1'b0, cand}) <= $signed(maxcode_mem[code_row])) begin
            slow_found = 1'b1;
            slow_len = l;
            slow_addr = {table_sel, cand[7:0] + valoffset_mem[code_row]};
        end
    end
end

always @(posedge clk) begin
    huffval_q <= huffval_mem[slow_addr];
end

/*
 * Control
 */
reg        consume;       // the symbol's bits leave the accumulator
reg [5:0]  used;          // how many
reg        block_end;
reg        in_pop;
reg [6:0]  left;
always @* begin
    state_next = state_reg;
    status_next = status;
    mcus_next = mcus_reg;
    to_restart_next = to_restart_reg;
    rst_index_next = rst_index_reg;
    comp_next = comp_reg;
    bx_next = bx_reg;
    by_next = by_reg;
    dc_next = dc_reg;
    k_next = k_reg;
    slow_len_next = slow_len_reg;
    out_data_next = out_data_reg;
    out_valid_next = out_valid_reg && !m_axis_tready;
    pred_new = pred_reg[comp_reg] + value;
    pred_we = 1'b0;
    consume = 1'b0;
    used = 6'd0;
    block_end = 1'b0;
    in_pop = 1'b0;

    case (state_reg)
        S_RUN, S_SLOW_SYM: begin
            if (out_free && can_decode && sym_valid) begin
                if (sym_bad || (in_mark && {1'b0, sym_total} > bits_reg)) begin
                    status_next = CORRUPT;
                    state_next = S_DRAIN;
                end else if (dc_reg) begin
                    consume = 1'b1;
                    pred_we = 1'b1;
                    out_data_next = {comp_reg, 2'b01, 6'd0, pred_new[15:0]};
                    out_valid_next = 1'b1;
                    dc_next = 1'b0;
                    k_next = 7'd1;
                    state_next = S_RUN;
                end else if (size == 5'd0 && run != 4'd15) begin  // EOB
                    consume = 1'b1;
                    out_data_next = {comp_reg, 2'b10, 6'd0, 16'd0};
                    out_valid_next = 1'b1;
                    block_end = 1'b1;
                end else if (size == 5'd0) begin  // ZRL: sixteen zeros; past 63 the block ends
                    consume = 1'b1;
                    k_next = k_reg + 7'd16;
                    if (k_next >= 7'd64) begin
                        out_data_next = {comp_reg, 2'b10, 6'd0, 16'd0};
                        out_valid_next = 1'b1;
                        block_end = 1'b1;
                    end
                    state_next = S_RUN;
                end else if (k_run > 7'd63) begin
                    status_next = CORRUPT;
                    state_next = S_DRAIN;
                end else begin
                    consume = 1'b1;
                    out_data_next = {comp_reg, k_run == 7'd63, 1'b1, k_run[5:0], value[15:0]};
                    out_valid_next = 1'b1;
                    k_next = k_run + 7'd1;
                    block_end = k_run == 7'd63;
                    state_next = S_RUN;
                end
            end else if (out_free && can_decode && state_reg == S_RUN) begin
                state_next = S_SLOW;
            end
        end
        S_SLOW: begin
            if (slow_found) begin
                slow_len_next = slow_len;
                state_next = S_SLOW_SYM;
            end else begin
                status_next = CORRUPT;
                state_next = S_DRAIN;
            end
        end
        S_RESTART: begin
            // The buffered bits were dropped; skip data to the marker, which must be RSTn.
            if (in_data) begin
                in_pop = 1'b1;
            end else if (in_mark) begin
                if (!s_axis_tdata[36] && s_axis_tdata[7:0] == {5'b11010, rst_index_reg}) begin
                    in_pop = 1'b1;
                    rst_index_next = rst_index_reg + 3'd1;
                    to_restart_next = interval_reg;
                    state_next = S_RUN;
                end else begin
                    status_next = CORRUPT;
                    state_next = S_DRAIN;
                end
            end
        end
        S_DRAIN: begin
            if (s_axis_tvalid && s_axis_tdata[36]) begin
                state_next = S_DONE;
            end else begin
                in_pop = s_axis_tvalid;
            end
        end
        S_DONE: begin
            if (!out_valid_reg) state_next = S_IDLE;
        end
        default: begin
            if (ap_start) begin
                status_next = OK;
                mcus_next = n_mcus;
                to_restart_next = restart_interval;
                rst_index_next = 3'd0;
                comp_next = 2'd0;
                bx_next = 1'b0;
                by_next = 1'b0;
                dc_next = 1'b1;
                state_next = n_mcus == 32'd0 ? S_DRAIN : S_RUN;
            end
        end
    endcase

    if (consume) used = sym_total;
    if (block_end) begin
        dc_next = 1'b1;
        state_next = S_RUN;
        if (bx_reg != comp_h2) begin
            bx_next = 1'b1;
        end else if (by_reg != comp_v2) begin
            bx_next = 1'b0;
            by_next = 1'b1;
        end else if (comp_reg + 2'd1 != ncomp_reg) begin
            bx_next = 1'b0;
            by_next = 1'b0;
            comp_next = comp_reg + 2'd1;
        end else begin
            // The MCU is complete.
            bx_next = 1'b0;
            by_next = 1'b0;
            comp_next = 2'd0;
            mcus_next = mcus_reg - 32'd1;
            if (mcus_reg == 32'd1) begin
                state_next = S_DRAIN;
            end else if (interval_reg != 16'd0) begin
                to_restart_next = to_restart_reg - 16'd1;
                if (to_restart_reg == 16'd1) state_next = S_RESTART;
            end
        end
    end

    // Accumulator: drop the consumed bits, then take a data beat where it fits below 32 bits.
    left = bits_reg - {1'b0, used};
    acc_next = acc_reg << used;
    bits_next = left;
    if ((state_reg == S_RUN || state_reg == S_SLOW || state_reg == S_SLOW_SYM) && in_data && left <= 7'd32) begin
        in_pop = 1'b1;
        acc_next = acc_next | ({s_axis_tdata[31:0], 32'd0} >> left);
        bits_next = left + {1'b0, s_axis_tdata[34:32], 3'd0};
    end
    if (state_next == S_RESTART) begin
        acc_next = 64'd0;
        bits_next = 7'd0;
    end
end

assign s_axis_tready = in_pop;
assign m_axis_tdata = out_data_reg;
assign m_axis_tvalid = out_valid_reg;
assign ap_idle = state_reg == S_IDLE;
assign ap_ready = state_reg == S_IDLE && ap_start;

integer c;
always @(posedge clk) begin
    state_reg <= state_next;
    status <= status_next;
    ap_done <= state_reg == S_DONE && state_next == S_IDLE;
    mcus_reg <= mcus_next;
    to_restart_reg <= to_restart_next;
    rst_index_reg <= rst_index_next;
    comp_reg <= comp_next;
    bx_reg <= bx_next;
    by_reg <= by_next;
    dc_reg <= dc_next;
    k_reg <= k_next;
    slow_len_reg <= slow_len_next;
    acc_reg <= acc_next;
    bits_reg <= bits_next;
    out_data_reg <= out_data_next;
    out_valid_reg <= out_valid_next;
    if (pred_we) pred_reg[comp_reg] <= pred_new;
    if (state_reg == S_IDLE && ap_start) begin
        interval_reg <= restart_interval;
        ncomp_reg <= n_components;
        comps_reg <= components;
        acc_reg <= 64'd0;
        bits_reg <= 7'd0;
    end
    if ((state_reg == S_IDLE && ap_start) || (state_reg == S_RESTART && state_next == S_RUN)) begin
        for (c = 0; c < 3; c = c + 1) pred_reg[c] <= 32'd0;
    end
    if (rst) begin
        state_reg <= S_IDLE;
        status <= OK;
        ap_done <= 1'b0;
        out_valid_reg <= 1'b0;
        acc_reg <= 64'd0;
        bits_reg <= 7'd0;
    end
end

endmodule

`resetall
