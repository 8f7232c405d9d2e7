// fft_butterfly.cpp: C model of the fft_butterfly RTL blackbox: its four multipliers, then the
// complex product's two adders, then the four output adders.
#include "audio_rtl_units.h"

void fft_butterfly(float ar, float ai, float br, float bi, float wr, float wi, float& xr, float& xi,
                   float& yr, float& yi) {
  const float tr = br * wr - bi * wi;
  const float ti = br * wi + bi * wr;
  xr = ar + tr;
  xi = ai + ti;
  yr = ar - tr;
  yi = ai - ti;
}
