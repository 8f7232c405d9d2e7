// audio_rtl_units.h: C signatures of the audio CUs' RTL blackboxes (hls/rtl/<name>.v, descriptors
// hls/rtl/<name>.json). Each C model (hls/audio/<name>.cpp) is what C simulation runs; it computes
// in the order the RTL does, one float32 rounding per operation (built with -ffp-contract=off).
#pragma once

// sum = a + b.
void fp32_add(float a, float b, float& sum);

// product = a * b.
void fp32_mul(float a, float b, float& product);

// One radix-2 decimation-in-time butterfly: t = b * w (complex), x = a + t, y = a - t.
void fft_butterfly(float ar, float ai, float br, float bi, float wr, float wi, float& xr, float& xi,
                   float& yr, float& yi);

// One step of a mel band's accumulation: out = acc + w * p (two roundings, no fused multiply-add).
void mel_mac(float acc, float w, float p, float& out);

// y = ln(x), computed in 62-bit fixed point and rounded once: NaN in gives it back quieted,
// x < 0 the default NaN, +-0 gives -inf, +inf itself.
void fp32_log(float x, float& y);
