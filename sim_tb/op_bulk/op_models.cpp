// op_models.cpp: batch entry points to the audio blackboxes' C models, for the operator
// testbenches (ctypes). Operands and results are float32 columns.
#include "audio_rtl_units.h"

extern "C" {

void fp32_add_batch(const float* a, const float* b, float* sum, long n) {
  for (long i = 0; i < n; ++i) fp32_add(a[i], b[i], sum[i]);
}

void fp32_mul_batch(const float* a, const float* b, float* product, long n) {
  for (long i = 0; i < n; ++i) fp32_mul(a[i], b[i], product[i]);
}

void mel_mac_batch(const float* acc, const float* w, const float* p, float* out, long n) {
  for (long i = 0; i < n; ++i) mel_mac(acc[i], w[i], p[i], out[i]);
}

void fft_butterfly_batch(const float* ar, const float* ai, const float* br, const float* bi, const float* wr,
                         const float* wi, float* xr, float* xi, float* yr, float* yi, long n) {
  for (long i = 0; i < n; ++i) fft_butterfly(ar[i], ai[i], br[i], bi[i], wr[i], wi[i], xr[i], xi[i], yr[i], yi[i]);
}

void fp32_log_batch(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) fp32_log(x[i], y[i]);
}

}  // extern "C"
