/* One layer's measured costs on this machine's backend (autohet profile,
 * autohet/engine.h: ah_engine_profile_layer): the forward, backward and AdamW
 * update of the layer's TP shard on a synthetic micro-batch, timed with one
 * warm-up, the median of the repetitions kept. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "autohet/engine.h"
#include "engine/backend.h"
#include "engine/data.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "util/errors.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ah_engine_profile_layer_bytes(const ah_model_config *cfg, int l, int seq, int tp, int mb) {
    ah_eng_layer L;
    ah__engine_layer_describe(cfg, l, tp, 0, &L);
    double n = (double)L.n, N = (double)mb * seq, C = cfg->hidden, f = sizeof(float);
    ah__engine_layer_info_free(&L);
    ah_layer_kind k = ah_model_layer_kind(cfg, l);
    /* the saved activations: the cost model's and a quarter more for the gradients the backward makes of
     * them; the head keeps its probabilities [N, padded vocab] whole and makes their gradient beside them */
    double act = k == AH_LAYER_HEAD
                     ? f * (2.0 * N * ah_model_padded_vocab(cfg) + 2.0 * N * C + 3.0 * N)
                     : 1.25 * ah_layer_act_bytes(cfg, k, seq, mb, tp, AH_RECOMPUTE_NONE, AH_PRECISION_FP32);
    /* the layer's input and output and their gradients on the backend, two on the host, the token ids */
    double io = f * (6.0 * N * C + 2.0 * N);
    /* parameters, gradients and AdamW's two moments; at the start their initial values on the host too */
    return 4.0 * f * n + (f * n > act + io ? f * n : act + io);
}

int ah_engine_profile_layer(const ah_model_config *cfg, int l, int seq, int tp, int mb, int reps,
                            ah_matmul_precision prec, ah_layer_timing *out, char *err, size_t errlen) {
    if (reps < 1 || reps > 64) {
        snprintf(err, errlen, "profile: %d repetitions, expected 1..64", reps);
        return -1;
    }
    ah_engine_model e;
    if (ah__engine_model_init_prec(&e, cfg, seq, mb, l, l + 1, tp, 0, 7, 1, prec, err, errlen) != 0)
        return -1;
    int N = mb * seq, C = cfg->hidden;
    /* an allocation that fails ends the process with one line (ah_out_of_memory), never abort() */
    int *tok = ah_xcalloc((size_t)N, sizeof(int)), *tgt = ah_xcalloc((size_t)N, sizeof(int));
    float *in = ah_xcalloc((size_t)N * C, sizeof(float)), *dout = ah_xcalloc((size_t)N * C, sizeof(float));
    double tf[64], tb[64], tu[64];
    for (int i = 0; i < N; i++) {
        tok[i] = (int)(ah_hash64((uint64_t)i) % (uint64_t)cfg->vocab);
        tgt[i] = (int)(ah_hash64((uint64_t)i + 99) % (uint64_t)cfg->vocab);
    }
    for (size_t i = 0; i < (size_t)N * C; i++) {
        in[i] = (float)((ah_hash64(i) % 2001) / 1000.0 - 1.0);
        dout[i] = (float)((ah_hash64(i + 7) % 2001) / 1e6);
    }
    ah_optim_config oc;
    ah_optim_config_default(&oc);
    ah_eng_acts acts;
    /* the layer's input and output gradient on the engine's backend */
    size_t NC = (size_t)N * C;
    ah_dptr din_d = ah__be_alloc(e.be, NC), dout_d = ah__be_alloc(e.be, NC), in_d = ah__be_alloc(e.be, NC),
            out_d = ah__be_alloc(e.be, NC);
    ah__be_to_device(e.be, in_d, in, NC);
    ah__be_to_device(e.be, dout_d, dout, NC);
    ah_layer_kind kind = ah_model_layer_kind(cfg, l);
    for (int r = -1; r < reps; r++) { /* r = -1 warms up */
        double loss = 0, t0 = omp_get_wtime();
        ah__engine_forward(&e, tok, in_d, tgt, out_d, &loss, &acts);
        ah__engine_sync(&e);
        double t1 = omp_get_wtime();
        out->act_bytes = (double)acts.n * sizeof(float);
        ah__engine_backward(&e, tok, tgt, kind == AH_LAYER_HEAD ? ah__dptr_null() : dout_d, din_d,
                           1.0f / (float)N, &acts);
        ah__engine_sync(&e);
        double t2 = omp_get_wtime();
        ah__engine_clip_and_step(&e, 1.0f, 1e-4f, 1, &oc);
        ah__engine_sync(&e);
        double t3 = omp_get_wtime();
        if (r >= 0) {
            tf[r] = t1 - t0;
            tb[r] = t2 - t1;
            tu[r] = t3 - t2;
        }
    }
    qsort(tf, (size_t)reps, sizeof(double), cmp_d);
    qsort(tb, (size_t)reps, sizeof(double), cmp_d);
    qsort(tu, (size_t)reps, sizeof(double), cmp_d);
    out->fwd_s = tf[reps / 2];
    out->bwd_s = tb[reps / 2];
    out->update_s = tu[reps / 2];
    free(tok);
    free(tgt);
    free(in);
    free(dout);
    ah_dptr bufs[] = {in_d, out_d, din_d, dout_d};
    for (int i = 0; i < 4; i++)
        ah__be_free(e.be, bufs[i]);
    ah__engine_model_free(&e);
    return 0;
}

