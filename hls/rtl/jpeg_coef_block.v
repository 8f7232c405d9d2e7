`resetall
`timescale 1ns / 1ps
`default_nettype none

// Coefficient beats to dequantisation-ready 8x8 blocks: de-zigzag into a ring of four blocks, rows out to idct8x8_islow.
//
// Takes jpeg_huff_decoder's beats (value, zigzag index, present, block end, component) and writes
// each coefficient at its natural index of the block being filled; the block end hands the block
// to the reader, which sends it to the IDCT as 8 row beats, lane c = {quant, coef} of column c
// (the IDCT's DEQUANT = 1 layout, coef 16 bits, quant 16 bits), the quantisation step from the
// component's table. Coefficients the beats did not name are 0 (a per-block mask, cleared when
// the block leaves, instead of clearing 64 registers). Four blocks in a ring: one fills while the
// others wait or leave, 8 cycles a block out, so the decoder runs up to three blocks ahead of
// the IDCT through a run of blocks with few symbols (chroma, flat areas); a beat waits only
// while all four are full.
module jpeg_coef_block (
    /*
     * Clock and synchronous active-high reset
     */
    input  wire         clk,
    input  wire         rst,
    // Drops a partly filled block and any block not yet sent (a new image after a CORRUPT one)
    input  wire         clear,

    /*
     * Quantisation tables (while idle): addr = component * 64 + natural index, 16-bit steps
     */
    input  wire         q_we,
    input  wire [7:0]   q_addr,
    input  wire [15:0]  q_wdata,

    /*
     * Coefficient beats (jpeg_huff_decoder's m_axis)
     */
    input  wire [25:0]  s_axis_tdata,
    input  wire         s_axis_tvalid,
    output wire         s_axis_tready,

    /*
     * Block rows to idct8x8_islow: lane c in [32c+31:32c] = {quant, coef}
     */
    output wire [255:0] m_axis_tdata,
    output wire         m_axis_tvalid,
    input  wire         m_axis_tready
);

function [5:0] zigzag(input [5:0] k);
    case (k)
        6'd0: zigzag = 6'd0;
        6'd1: zigzag = 6'd1;
        6'd2: zigzag = 6'd8;
        6'd3: zigzag = 6'd16;
        6'd4: zigzag = 6'd9;
        6'd5: zigzag = 6'd2;
        6'd6: zigzag = 6'd3;
        6'd7: zigzag = 6'd10;
        6'd8: zigzag = 6'd17;
        6'd9: zigzag = 6'd24;
        6'd10: zigzag = 6'd32;
        6'd11: zigzag = 6'd25;
        6'd12: zigzag = 6'd18;
        6'd13: zigzag = 6'd11;
        6'd14: zigzag = 6'd4;
        6'd15: zigzag = 6'd5;
        6'd16: zigzag = 6'd12;
        6'd17: zigzag = 6'd19;
        6'd18: zigzag = 6'd26;
        6'd19: zigzag = 6'd33;
        6'd20: zigzag = 6'd40;
        6'd21: zigzag = 6'd48;
        6'd22: zigzag = 6'd41;
        6'd23: zigzag = 6'd34;
        6'd24: zigzag = 6'd27;
        6'd25: zigzag = 6'd20;
        6'd26: zigzag = 6'd13;
        6'd27: zigzag = 6'd6;
        6'd28: zigzag = 6'd7;
        6'd29: zigzag = 6'd14;
        6'd30: zigzag = 6'd21;
        6'd31: zigzag = 6'd28;
        6'd32: zigzag = 6'd35;
        6'd33: zigzag = 6'd42;
        6'd34: zigzag = 6'd49;
        6'd35: zigzag = 6'd56;
        6'd36: zigzag = 6'd57;
        6'd37: zigzag = 6'd50;
        6'd38: zigzag = 6'd43;
        6'd39: zigzag = 6'd36;
        6'd40: zigzag = 6'd29;
        6'd41: zigzag = 6'd22;
        6'd42: zigzag = 6'd15;
        6'd43: zigzag = 6'd23;
        6'd44: zigzag = 6'd30;
        6'd45: zigzag = 6'd37;
        6'd46: zigzag = 6'd44;
        6'd47: zigzag = 6'd51;
        6'd48: zigzag = 6'd58;
        6'd49: zigzag = 6'd59;
        6'd50: zigzag = 6'd52;
        6'd51: zigzag = 6'd45;
        6'd52: zigzag = 6'd38;
        6'd53: zigzag = 6'd31;
        6'd54: zigzag = 6'd39;
        6'd55: zigzag = 6'd46;
        6'd56: zigzag = 6'd53;
        6'd57: zigzag = 6'd60;
        6'd58: zigzag = 6'd61;
        6'd59: zigzag = 6'd54;
        6'd60: zigzag = 6'd47;
        6'd61: zigzag = 6'd55;
        6'd62: zigzag = 6'd62;
        6'd63: zigzag = 6'd63;
    endcase
endfunction

reg [15:0]  quant_mem [0:191];
reg [15:0]  coef_reg [0:255];   // bank * 64 + natural index
reg [63:0]  mask_reg [0:3];
reg [1:0]   comp_reg [0:3];
reg [3:0]   full_reg = 4'b0000;
reg [1:0]   wbank_reg = 2'd0, rbank_reg = 2'd0;
reg [2:0]   row_reg = 3'd0;
reg [255:0] out_data_reg = 256'd0;
reg         out_valid_reg = 1'b0;

wire [5:0] nat = zigzag(s_axis_tdata[21:16]);
wire       in_take = s_axis_tvalid && !full_reg[wbank_reg];
wire       out_free = !out_valid_reg || m_axis_tready;
wire       row_go = full_reg[rbank_reg] && out_free;
wire [1:0] rcomp = comp_reg[rbank_reg];

assign s_axis_tready = !full_reg[wbank_reg];
assign m_axis_tdata = out_data_reg;
assign m_axis_tvalid = out_valid_reg;

reg [255:0] row;
integer c;
always @* begin
    for (c = 0; c < 8; c = c + 1) begin
        row[32 * c +: 32] = {quant_mem[{rcomp, row_reg, 3'd0} + c],
                             mask_reg[rbank_reg][{row_reg, 3'd0} + c] ? coef_reg[{rbank_reg, row_reg, 3'd0} + c] : 16'd0};
    end
end

integer b;
always @(posedge clk) begin
    if (q_we) quant_mem[q_addr] <= q_wdata;
    if (in_take) begin
        comp_reg[wbank_reg] <= s_axis_tdata[25:24];
        if (s_axis_tdata[22]) begin
            coef_reg[{wbank_reg, nat}] <= s_axis_tdata[15:0];
            mask_reg[wbank_reg][nat] <= 1'b1;
        end
        if (s_axis_tdata[23]) begin
            full_reg[wbank_reg] <= 1'b1;
            wbank_reg <= wbank_reg + 2'd1;
        end
    end
    if (out_free) out_valid_reg <= row_go;
    if (row_go) begin
        out_data_reg <= row;
        row_reg <= row_reg + 3'd1;
        if (row_reg == 3'd7) begin
            full_reg[rbank_reg] <= 1'b0;
            mask_reg[rbank_reg] <= 64'd0;
            rbank_reg <= rbank_reg + 2'd1;
        end
    end
    if (rst || clear) begin
        full_reg <= 4'b0000;
        for (b = 0; b < 4; b = b + 1) mask_reg[b] <= 64'd0;
        wbank_reg <= 2'd0;
        rbank_reg <= 2'd0;
        row_reg <= 3'd0;
        out_valid_reg <= 1'b0;
    end
end

endmodule

`resetall
