/* Test-only stand-in for the DPU C-simulation library: same ABI (hls/ABI_DPU.md), trivial numerics.
 * image_cu: files with an SOF2 (progressive) marker are UNSUPPORTED, files without SOI CORRUPT; OK runs
 * write a crop x crop x 3 image whose bytes repeat the input file, normalised like the real CU.
 * audio_mel_cu writes mel[b][t] = b + 0.25 t + |sample 0| and the per-bin sums; audio_norm_cu
 * normalises with those sums. Every run sleeps FAKE_RUN_US so runs overlap measurably, and the
 * library counts concurrent runs so tests can see parallelism without timing anything. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define FAKE_RUN_US 20000

static int running_image, max_image, running_mel, running_norm, overlap_mel_norm;

static int progressive(const uint8_t *jpeg, uint32_t len) {
    for (uint32_t i = 0; i + 1 < len; i++)
        if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC2) return 1;
    return 0;
}

static void status_words(uint32_t *status, uint32_t code, uint32_t a, uint32_t b, uint32_t c,
                         uint32_t written) {
    memset(status, 0, 8 * sizeof(uint32_t));
    status[0] = code; status[1] = a; status[2] = b; status[3] = c; status[7] = written;
}

int fake_max_image_concurrency(void) { return max_image; }
int fake_mel_norm_overlapped(void) { return overlap_mel_norm; }

void image_cu(const uint8_t *jpeg, uint32_t jpeg_len, uint8_t *scratch, uint32_t scratch_bytes,
              uint8_t *out, uint32_t out_bytes, uint32_t *status, uint32_t stage,
              uint32_t resize_short, uint32_t crop, uint32_t out_fp16, uint32_t max_dim) {
    (void)scratch; (void)scratch_bytes; (void)resize_short; (void)max_dim; (void)out_fp16;
    int now = __atomic_add_fetch(&running_image, 1, __ATOMIC_SEQ_CST);
    int seen = __atomic_load_n(&max_image, __ATOMIC_SEQ_CST);
    while (now > seen && !__atomic_compare_exchange_n(&max_image, &seen, now, 0, __ATOMIC_SEQ_CST,
                                                      __ATOMIC_SEQ_CST)) {}
    usleep(FAKE_RUN_US);
    uint32_t n = 3 * crop * crop;
    if (progressive(jpeg, jpeg_len)) {
        status_words(status, 1, 0, 0, 0, 0);
    } else if (jpeg_len < 2 || jpeg[0] != 0xFF || jpeg[1] != 0xD8 || stage < 2) {
        status_words(status, 2, 0, 0, 0, 0);
    } else if (stage == 2) {
        if (out_bytes < n) { status_words(status, 4, 0, 0, 0, 0); goto done; }
        for (uint32_t i = 0; i < n; i++) out[i] = jpeg[i % jpeg_len];
        status_words(status, 0, 3, crop, crop, n);
    } else {
        static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
        float *f = (float *)out;
        if (out_bytes < 4 * n) { status_words(status, 4, 0, 0, 0, 0); goto done; }
        for (uint32_t c = 0; c < 3; c++)
            for (uint32_t p = 0; p < crop * crop; p++)
                f[c * crop * crop + p] = ((float)jpeg[(3 * p + c) % jpeg_len] / 255.0f - mean[c]) / std[c];
        status_words(status, 0, 3, crop, crop, 4 * n);
    }
done:
    __atomic_sub_fetch(&running_image, 1, __ATOMIC_SEQ_CST);
}

void audio_mel_cu(const uint8_t *pcm, uint32_t n_samples, uint32_t sample_format,
                  uint32_t sample_rate, uint32_t max_samples, float *mel, uint32_t mel_capacity,
                  uint32_t *status) {
    __atomic_add_fetch(&running_mel, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&running_norm, __ATOMIC_SEQ_CST)) overlap_mel_norm = 1;
    usleep(FAKE_RUN_US);
    if (__atomic_load_n(&running_norm, __ATOMIC_SEQ_CST)) overlap_mel_norm = 1;
    uint32_t n16 = (uint32_t)((uint64_t)n_samples * 16000 / (sample_rate ? sample_rate : 1));
    uint32_t frames = 1 + n16 / 160;
    float first = 0;
    if (sample_rate < 8000 || sample_rate > 48000) { status_words(status, 8, 0, 0, 0, 0); goto done; }
    if (n_samples == 0) { status_words(status, 5, 0, 0, 0, 0); goto done; }
    if (n_samples > max_samples) { status_words(status, 6, 0, 0, 0, 0); goto done; }
    if (80 * frames > mel_capacity) { status_words(status, 4, 0, 0, 0, 0); goto done; }
    if (sample_format == 0) { int16_t s; memcpy(&s, pcm, 2); first = fabsf((float)s / 32768.0f); }
    else { memcpy(&first, pcm, 4); first = fabsf(first); }
    for (uint32_t b = 0; b < 80; b++)
        for (uint32_t t = 0; t < frames; t++)
            mel[b * frames + t] = (float)b + 0.25f * (float)t + first;
    status_words(status, 0, 80, frames, n16, 4 * 80 * frames);
    status[1] = 80; status[2] = frames; status[3] = n16;
done:
    __atomic_sub_fetch(&running_mel, 1, __ATOMIC_SEQ_CST);
}

void audio_norm_cu(const float *mel, uint32_t n_frames, float *out, uint32_t *status) {
    __atomic_add_fetch(&running_norm, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&running_mel, __ATOMIC_SEQ_CST)) overlap_mel_norm = 1;
    usleep(FAKE_RUN_US);
    if (n_frames < 2) { status_words(status, 5, 0, 0, 0, 0); goto done; }
    for (uint32_t b = 0; b < 80; b++) {
        double sum = 0, sq = 0;
        for (uint32_t t = 0; t < n_frames; t++) {
            double v = mel[b * n_frames + t];
            sum += v; sq += v * v;
        }
        double mean = sum / n_frames;
        double var = (sq - n_frames * mean * mean) / (n_frames - 1);
        float sd = (float)sqrt(var > 0 ? var : 0);
        for (uint32_t t = 0; t < n_frames; t++)
            out[b * n_frames + t] = (mel[b * n_frames + t] - (float)mean) / (sd + 1e-5f);
    }
    status_words(status, 0, 80, n_frames, 0, 4 * 80 * n_frames);
done:
    __atomic_sub_fetch(&running_norm, 1, __ATOMIC_SEQ_CST);
}
