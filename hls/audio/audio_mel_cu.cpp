// audio_mel_cu.cpp: PCM -> (80, T) log-mel spectrogram, the first of the two audio CUs.
// Reference (ARCHITECTURE.md 4.2): librosa.resample (soxr HQ) to 16 kHz, preemphasis 0.97,
// melspectrogram(n_fft=512, hop=160, win=400 Hann, centre with zero padding, power 2, 80 Slaney
// mel bands 0..8000 Hz, norm='slaney'), log(S + 2^-24).
#include <cstdint>

#include "hls_compat.h"
#include "audio_config.h"
#include "fft.h"
#include "framer.h"
#include "log_mel.h"
#include "mel_filterbank.h"
#include "pcm_reader.h"
#include "preemphasis.h"
#include "resampler.h"

namespace atoll_audio {

// The first DATAFLOW process: PCM to 16 kHz samples. At 16 kHz librosa does not resample, so the
// samples pass through untouched.
static void source_stage(const ResamplePlan& plan, bool resample, hls::stream<float>& in,
                         hls::stream<float>& out) {
  if (resample) {
    resample_stage(plan, in, out);
  } else {
  pass_through_loop:
    for (uint32_t i = 0; i < plan.n_in; ++i) {
#pragma HLS LOOP_TRIPCOUNT min = 1 max = MAX_IN_SAMPLES
#pragma HLS PIPELINE II = 1
      out.write(in.read());
    }
  }
}

static void mel_pipeline(const Beat* pcm, uint32_t format, const ResamplePlan& plan, bool resample,
                         uint32_t frames, Beat* mel) {
#pragma HLS DATAFLOW
  hls::stream<float> samples("samples");
  hls::stream<float> samples16("samples16");
  hls::stream<float> emphasised("emphasised");
  hls::stream<float> windowed("windowed");
  hls::stream<float> power("power");
  hls::stream<float> bands("bands");
#pragma HLS STREAM variable = samples depth = 64
#pragma HLS STREAM variable = samples16 depth = 1024
#pragma HLS STREAM variable = windowed depth = 2 * WIN
#pragma HLS STREAM variable = power depth = 2 * N_BINS

  pcm_reader_stage(pcm, plan.n_in, format, samples);
  source_stage(plan, resample, samples, samples16);
  preemphasis_stage(plan.n_out, samples16, emphasised);
  framer_stage(plan.n_out, frames, emphasised, windowed);
  fft_stage(frames, windowed, power);
  mel_filterbank_stage(frames, power, bands);
  log_mel_stage(frames, bands, mel);
}

}  // namespace atoll_audio

using namespace atoll_audio;

/*
 * audio_mel_cu: one request's PCM to its log-mel spectrogram.
 *   pcm           (m_axi in)  mono samples, int16 LE or float32 LE, read in whole 512-bit beats
 *   n_samples     (s_axilite) number of samples in pcm; 0 -> EMPTY
 *   sample_format (s_axilite) 0 int16 (scaled by 1/32768), 1 float32; else BAD_ARGS
 *   sample_rate   (s_axilite) Hz, 8000..48000 else BAD_RATE; resampled to 16 kHz when different
 *   max_samples   (s_axilite) TOO_LONG above it (0: 30 s at sample_rate); never more than 30 s
 *                             at 48 kHz in, nor 30 s at 16 kHz after resampling (static buffers)
 *   mel           (m_axi out) log-mel, row-major (80, T), T = 1 + n16 / 160, in whole beats
 *   mel_capacity  (s_axilite) capacity of mel in floats; below 80 * T rounded up to whole beats
 *                             (16 floats) -> BAD_ARGS
 *   status        (m_axi out) 8 words: code, n_mels (80), T, n16 (samples at 16 kHz), 0, 0, 0, 0
 * Checks run in the order rate, empty, length, arguments, finiteness; nothing but status is
 * written unless the code is OK.
 */
extern "C" void audio_mel_cu(const Beat* pcm, uint32_t n_samples, uint32_t sample_format,
                             uint32_t sample_rate, uint32_t max_samples, Beat* mel, uint32_t mel_capacity,
                             uint32_t* status) {
#pragma HLS INTERFACE m_axi port = pcm bundle = gmem0 offset = slave
#pragma HLS INTERFACE m_axi port = mel bundle = gmem1 offset = slave
#pragma HLS INTERFACE m_axi port = status bundle = gmem3 offset = slave
#pragma HLS INTERFACE s_axilite port = n_samples
#pragma HLS INTERFACE s_axilite port = sample_format
#pragma HLS INTERFACE s_axilite port = sample_rate
#pragma HLS INTERFACE s_axilite port = max_samples
#pragma HLS INTERFACE s_axilite port = mel_capacity
#pragma HLS INTERFACE s_axilite port = return
  uint32_t words[STATUS_WORDS] = {STATUS_OK, (uint32_t)N_MELS, 0, 0, 0, 0, 0, 0};
  uint32_t limit = max_samples ? max_samples : MAX_SECONDS * sample_rate;
  bool rate_ok = sample_rate >= MIN_RATE && sample_rate <= MAX_RATE;
  uint32_t n16 = rate_ok ? resampled_length(n_samples, sample_rate) : 0;
  uint32_t frames = 1 + n16 / HOP;
  if (rate_ok && n_samples > 0 && n16 <= MAX_OUT_SAMPLES) {
    words[2] = frames;
    words[3] = n16;
  }

  if (!rate_ok) {
    words[0] = STATUS_BAD_RATE;
  } else if (n_samples == 0) {
    words[0] = STATUS_EMPTY;
  } else if (n_samples > limit || n_samples > MAX_IN_SAMPLES || n16 > MAX_OUT_SAMPLES) {
    words[0] = STATUS_TOO_LONG;
  } else if ((sample_format != FORMAT_INT16 && sample_format != FORMAT_FLOAT32) ||
             (uint64_t)mel_beats(frames) * FLOATS_PER_BEAT > mel_capacity) {
    words[0] = STATUS_BAD_ARGS;
  } else if (!pcm_all_finite(pcm, n_samples, sample_format)) {
    words[0] = STATUS_NON_FINITE;
  } else {
    ResamplePlan plan = make_resample_plan(n_samples, sample_rate);
    mel_pipeline(pcm, sample_format, plan, sample_rate != OUT_RATE, frames, mel);
  }

status_write_loop:
  for (int i = 0; i < STATUS_WORDS; ++i) status[i] = words[i];
}
