// fp32_add.cpp: C model of the fp32_add RTL blackbox.
#include "audio_rtl_units.h"

void fp32_add(float a, float b, float& sum) { sum = a + b; }
