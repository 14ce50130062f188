/* The engine's attention before the flash-style kernel, kept as a reference
 * (attention_reference.c): softmax probabilities att[B, Hq, T, T] saved for the backward. */
#ifndef AUTOHET_TESTS_ATTENTION_REFERENCE_H
#define AUTOHET_TESTS_ATTENTION_REFERENCE_H

void ah_attention_fwd_reference(float *out, float *att, const float *q, const float *k, const float *v, int B,
                                int T, int Hq, int Hkv, int D);
void ah_attention_fwd_window_reference(float *out, float *att, const float *q, const float *k, const float *v,
                                       int B, int T, int Hq, int Hkv, int D, int window);
void ah_attention_bwd_reference(float *dq, float *dk, float *dv, const float *dout, const float *att,
                                const float *q, const float *k, const float *v, int B, int T, int Hq, int Hkv,
                                int D);

#endif
