`resetall
`timescale 1ns / 1ps
`default_nettype none

// JPEG entropy-coded segment reader: scan bytes in 8-byte beats, de-stuffed bytes out up to 4 a cycle, markers as beats.
//
// Input beats carry up to 8 bytes of the file in order (byte 0 first, in bits 7..0), the byte
// count (bits 71..64) and a last flag on the final beat (bits 79..72): C's
// `struct { uint8_t byte[8]; uint8_t count; uint8_t last; }` as Vitis HLS aggregates it.
// Output beats are one of three kinds: data (1..4 bytes
// with 0xFF00 pairs already reduced to 0xFF, first byte in bits 31..24), marker (an 0xFF followed
// by a non-zero byte: the marker code in bits 7..0; 0xFF fill bytes before it are dropped), or
// end (the input is exhausted; a lone 0xFF as the very last byte also ends it). After a marker
// the reader goes on with the bytes behind it (the bytes of the next restart interval); after
// the end beat it emits nothing until `clear`. Up to 32 bits a cycle leave when the output is
// not stalled; a beat enters when at most 8 bytes are buffered.
module jpeg_bit_reader (
    /*
     * Clock, synchronous active-high reset, and a synchronous clear between images
     */
    input  wire        clk,
    input  wire        rst,
    input  wire        clear,

    /*
     * Scan bytes in: [63:0] bytes (byte k in [8k+7:8k]), [71:64] byte count 1..8, [72] last beat
     */
    input  wire [79:0] s_axis_tdata,
    input  wire        s_axis_tvalid,
    output wire        s_axis_tready,

    /*
     * De-stuffed beats out: [31:0] data bytes (first in [31:24]) or the marker code in [7:0],
     * [34:32] data byte count (0 for marker and end beats), [35] marker, [36] end
     */
    output wire [36:0] m_axis_tdata,
    output wire        m_axis_tvalid,
    input  wire        m_axis_tready
);

// Byte buffer: buf_reg[0] is the oldest byte; count_reg bytes are valid.
reg [7:0] buf_reg [0:15];
reg [7:0] buf_next [0:15];
reg [4:0] count_reg = 5'd0, count_next;
reg       last_reg = 1'b0, last_next;     // the last input beat is in the buffer
reg       ended_reg = 1'b0, ended_next;   // the end beat has been emitted

reg [36:0] out_data_reg = 37'd0, out_data_next;
reg        out_valid_reg = 1'b0, out_valid_next;

assign s_axis_tready = !clear && !last_reg && count_reg <= 5'd8;
assign m_axis_tdata = out_data_reg;
assign m_axis_tvalid = out_valid_reg;

// Scan of the buffer head for up to four output bytes: a byte that is not 0xFF is data, 0xFF 0x00
// is a data 0xFF, 0xFF and anything else stops the beat (a marker, or a pair not yet complete).
reg [4:0]  take;      // input bytes the data beat consumes
reg [2:0]  n_out;     // data bytes in it
reg [31:0] data;
reg        stop;
integer    i;
always @* begin
    take = 5'd0;
    n_out = 3'd0;
    data = 32'd0;
    stop = 1'b0;
    for (i = 0; i < 4; i = i + 1) begin
        if (!stop) begin
            if (take >= count_reg) begin
                stop = 1'b1;
            end else if (buf_reg[take] != 8'hFF) begin
                data = data | ({24'd0, buf_reg[take]} << (8 * (3 - n_out)));
                n_out = n_out + 3'd1;
                take = take + 5'd1;
            end else if (take + 5'd1 < count_reg && buf_reg[take + 5'd1] == 8'h00) begin
                data = data | (32'hFF << (8 * (3 - n_out)));
                n_out = n_out + 3'd1;
                take = take + 5'd2;
            end else begin
                stop = 1'b1;
            end
        end
    end
end

wire out_free = !out_valid_reg || m_axis_tready;
wire head_ff = count_reg != 5'd0 && buf_reg[0] == 8'hFF;
wire head_pair = count_reg >= 5'd2;

reg [4:0] drop;  // bytes leaving the buffer this cycle
integer   j;
always @* begin
    out_data_next = out_data_reg;
    out_valid_next = out_valid_reg && !m_axis_tready;
    last_next = last_reg;
    ended_next = ended_reg;
    drop = 5'd0;
    if (out_free && !ended_reg) begin
        if (n_out != 3'd0) begin
            out_data_next = {2'b00, n_out, data};
            out_valid_next = 1'b1;
            drop = take;
        end else if (head_ff && head_pair && buf_reg[1] == 8'hFF) begin
            drop = 5'd1;  // fill byte before a marker
        end else if (head_ff && head_pair) begin
            out_data_next = {2'b01, 3'd0, 24'd0, buf_reg[1]};
            out_valid_next = 1'b1;
            drop = 5'd2;
        end else if (last_reg && (count_reg == 5'd0 || (count_reg == 5'd1 && head_ff))) begin
            out_data_next = {2'b10, 35'd0};
            out_valid_next = 1'b1;
            ended_next = 1'b1;
            drop = count_reg;
        end
    end
    count_next = count_reg - drop;
    for (j = 0; j < 16; j = j + 1) begin
        buf_next[j] = j + drop < 16 ? buf_reg[j + drop] : 8'd0;
    end
    if (s_axis_tvalid && s_axis_tready) begin
        for (j = 0; j < 8; j = j + 1) begin
            if (j < s_axis_tdata[67:64]) buf_next[count_next + j] = s_axis_tdata[8 * j +: 8];
        end
        count_next = count_next + s_axis_tdata[67:64];
        last_next = s_axis_tdata[72];
    end
end

integer k;
always @(posedge clk) begin
    for (k = 0; k < 16; k = k + 1) buf_reg[k] <= buf_next[k];
    count_reg <= count_next;
    last_reg <= last_next;
    ended_reg <= ended_next;
    out_data_reg <= out_data_next;
    out_valid_reg <= out_valid_next;
    if (rst || clear) begin
        count_reg <= 5'd0;
        last_reg <= 1'b0;
        ended_reg <= 1'b0;
        out_valid_reg <= 1'b0;
    end
end

endmodule

`resetall
