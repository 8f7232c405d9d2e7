// mel_mac.cpp: C model of the mel_mac RTL blackbox: a multiplier, then an adder.
#include "audio_rtl_units.h"

void mel_mac(float acc, float w, float p, float& out) { out = acc + w * p; }
