/* train --init-from: a Hugging Face model directory into the executor's
 * layers (ah_executor_init_from_hf, engine/executor.h; docs/weights.md). */
#include <stdio.h>
#include <string.h>

#include "engine/executor_internal.h"
#include "engine/hf_weights.h"
#include "engine/reshard.h"
#include "util/mpi_agree.h"

/* the HF config and the run's model describe the same network; 0 or -1 with err */
static int same_model(const ah_hf_dir *h, const ah_model_config *run, char *err, size_t errlen) {
    const ah_model_config *c = &h->cfg;
    if (c->vocab != run->vocab) {
        snprintf(err, errlen,
                 "--init-from %.200s: the weights' vocabulary is %d (config.json), the run's is %d%s", h->dir,
                 c->vocab, run->vocab, run->vocab == 256 ? " (text data is byte-level: train on token files)" : "");
        return -1;
    }
    if (c->arch == run->arch && c->hidden == run->hidden && c->n_layers == run->n_layers &&
        c->n_heads == run->n_heads && c->n_kv_heads == run->n_kv_heads && c->ffn_hidden == run->ffn_hidden &&
        c->max_positions == run->max_positions && c->tied_embeddings == run->tied_embeddings &&
        c->qkv_bias == run->qkv_bias && c->act == run->act)
        return 0;
    snprintf(err, errlen,
             "--init-from %.200s: config.json is a %s of %d blocks, hidden %d, %d/%d heads, MLP %d; the run's "
             "model %s is a %s of %d blocks, hidden %d, %d/%d heads, MLP %d (or ties/positions/biases differ)",
             h->dir, ah_arch_name(c->arch), c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->ffn_hidden,
             run->name, ah_arch_name(run->arch), run->n_layers, run->hidden, run->n_heads, run->n_kv_heads,
             run->ffn_hidden);
    return -1;
}

/* this rank's shard of held layer l, cut from the HF tensors by the one owner
 * of TP slicing (ah__reshard_from_shards, from a TP=1 "checkpoint") */
static int load_layer(ah_executor *x, const ah_hf_dir *h, int l, char *err, size_t errlen) {
    ah_engine_model *e = ah__exec_model_of(x, l);
    ah_ckpt_loaded *full = NULL, *mine = NULL;
    int nf = 0, nm = 0;
    if (ah__hf_read_layer(h, &x->cfg, l, &full, &nf, err, errlen) != 0)
        return -1;
    int rc = ah__reshard_from_shards(e, l, 1, &full, &nf, &mine, &nm, err, errlen);
    const ah_eng_layer *L = &e->layers[l - e->first];
    for (int q = 0; q < L->n_tensors && rc == 0; q++) {
        char name[128];
        snprintf(name, sizeof name, "param.%s", L->t[q].name);
        for (int i = 0; i < nm; i++)
            if (!strcmp(mine[i].name, name) && mine[i].n == L->t[q].size && L->t[q].size > 0)
                ah__engine_tensor_from_host(e, l, AH_STATE_PARAM, q, mine[i].data);
    }
    ah_ckpt_free(full, nf);
    ah_ckpt_free(mine, nm);
    return rc;
}

int ah_executor_init_from_hf(ah_executor *x, const char *dir, char *err, size_t errlen) {
    ah_hf_dir h;
    char why[1024];
    int rc = ah_hf_open(dir, &h, why, sizeof why);
    if (rc == 0) {
        rc = same_model(&h, &x->cfg, why, sizeof why);
        for (int i = 0; i < ah__exec_n_held(x) && rc == 0; i++)
            rc = load_layer(x, &h, ah__exec_held_layer(x, i), why, sizeof why);
        ah_hf_close(&h);
    }
    if (rc != 0)
        snprintf(err, errlen, "--init-from: %s", why);
    return ah_mpi_agree_on_failure(x->comm, rc, err, errlen);
}
