// fp32_mul.cpp: C model of the fp32_mul RTL blackbox.
#include "audio_rtl_units.h"

void fp32_mul(float a, float b, float& product) { product = a * b; }
