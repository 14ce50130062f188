/* Unit tests for src/model: presets, config.json loading, layer math. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autohet/model.h"
#include "model/model_json.h"
#include "test_util.h"

/* ----------------------------------------------------------- helpers */

/* Loads a config from text; returns the loader's result. */
static int load_text(const char *text, ah_model_config *m, char *err, size_t errlen, char *path) {
    write_tmp(text, path);
    int rc = ah_model_load_json(path, m, err, errlen);
    unlink(path);
    return rc;
}

static void assert_within(double got, double want, double rel) {
    if (fabs(got - want) > rel * fabs(want))
        fail_msg("%.6g not within %.2f%% of %.6g", got, rel * 100, want);
}

static ah_model_config preset(const char *name) {
    ah_model_config m;
    assert_int_equal(ah_model_preset(name, &m), 0);
    return m;
}

/* h=4, a=2, f=16, V=10, P=6, 2 blocks. */
static ah_model_config tiny_gpt(void) {
    ah_model_config m = {.name = "tiny", .arch = AH_ARCH_GPT, .tied_embeddings = 1};
    m.hidden = 4, m.n_layers = 2, m.n_heads = m.n_kv_heads = 2, m.ffn_hidden = 16, m.vocab = 10;
    m.max_positions = 6;
    return m;
}

/* h=8, a=4, kv=2 (h_kv=4), f=12, V=10, 3 blocks, untied. */
static ah_model_config tiny_llama(void) {
    ah_model_config m = {.name = "tiny-llama", .arch = AH_ARCH_LLAMA};
    m.hidden = 8, m.n_layers = 3, m.n_heads = 4, m.n_kv_heads = 2, m.ffn_hidden = 12, m.vocab = 10;
    return m;
}

/* ----------------------------------------------------------- presets */

static void test_presets_all_valid(void **state) {
    (void)state;
    const char *const *names = ah_model_preset_names();
    int n = 0;
    for (; names[n] != NULL; n++) {
        ah_model_config m = preset(names[n]);
        assert_string_equal(m.name, names[n]);
        assert_true(m.hidden > 0 && m.n_layers > 0 && m.vocab > 0);
        assert_int_equal(m.hidden % m.n_heads, 0);
        assert_int_equal(m.n_heads % m.n_kv_heads, 0);
    }
    assert_int_equal(n, 16);
}

static void test_preset_lookup(void **state) {
    (void)state;
    ah_model_config m = preset("LLaMA2-70B");
    assert_int_equal(m.arch, AH_ARCH_LLAMA);
    assert_int_equal(m.n_kv_heads, 8);
    assert_int_equal(m.ffn_hidden, 28672);
    assert_int_equal(m.max_positions, 0);
    assert_false(m.tied_embeddings);
    m = preset("opt-350m");
    assert_int_equal(m.n_layers, 24);
    m = preset("gpt-neo-2.7b");
    assert_int_equal(m.n_layers, 32);
    assert_int_equal(m.n_heads, 20);
    assert_int_equal(ah_model_preset("gpt5", &m), -1);
    assert_int_equal(ah_model_preset(NULL, &m), -1);
}

static void test_param_counts_match_published(void **state) {
    (void)state;
    ah_model_config m = preset("gpt3-175b");
    assert_within(ah_model_total_params(&m), 175e9, 0.01);
    m = preset("llama2-7b");
    assert_within(ah_model_total_params(&m), 6.74e9, 0.01);
    m = preset("llama2-70b");
    assert_within(ah_model_total_params(&m), 69e9, 0.015);
    m = preset("bert-large");
    assert_within(ah_model_total_params(&m), 336e6, 0.03);
    m = preset("gpt2-124m");
    assert_within(ah_model_total_params(&m), 124e6, 0.02);
    m = preset("llama3-8b");
    assert_within(ah_model_total_params(&m), 8.03e9, 0.01);
}

/* ------------------------------------------------------- hand checks */

static void test_tiny_gpt_params_and_flops(void **state) {
    (void)state;
    ah_model_config m = tiny_gpt();
    /* block: 4*16+4*4 + 2*4*16 + 16 + 4 + 4*4 = 80 + 128 + 20 + 16 */
    assert_double_equal(ah_layer_params(&m, AH_LAYER_BLOCK), 244, 0);
    assert_double_equal(ah_layer_params(&m, AH_LAYER_EMBED), 10 * 4 + 6 * 4, 0);
    assert_double_equal(ah_layer_params(&m, AH_LAYER_HEAD), 2 * 4 + 10 * 4, 0);
    /* tied: the head's V*h copy is not unique */
    assert_double_equal(ah_model_total_params(&m), 64 + 2 * 244 + 48 - 40, 0);
    m.tied_embeddings = 0;
    assert_double_equal(ah_model_total_params(&m), 64 + 2 * 244 + 48, 0);

    /* b=2, s=3: 2*2*3*(4*16 + 2*4*16) + 4*2*9*4 = 2304 + 288 */
    assert_double_equal(ah_layer_fwd_flops(&m, AH_LAYER_BLOCK, 3, 2), 2592, 0);
    assert_double_equal(ah_layer_fwd_flops(&m, AH_LAYER_HEAD, 3, 2), 2 * 2 * 3 * 4 * 10, 0);
    assert_double_equal(ah_layer_fwd_flops(&m, AH_LAYER_EMBED, 3, 2), 0, 0);
    /* per sequence (b=1): 3 * (2 blocks * 1296 + head 240) */
    assert_double_equal(ah_model_flops_per_sequence(&m, 3), 3 * (2 * 1296 + 240), 0);
    assert_double_equal(ah_model_p2p_bytes(&m, 3, 2, AH_PRECISION_BF16), 2 * 2 * 3 * 4, 0);
}

static void test_tiny_llama_params_and_flops(void **state) {
    (void)state;
    ah_model_config m = tiny_llama();
    /* 2*64 + 2*8*4 + 3*8*12 + 2*8 */
    assert_double_equal(ah_layer_params(&m, AH_LAYER_BLOCK), 496, 0);
    assert_double_equal(ah_layer_params(&m, AH_LAYER_EMBED), 80, 0);
    assert_double_equal(ah_layer_params(&m, AH_LAYER_HEAD), 8 + 80, 0);
    assert_double_equal(ah_model_total_params(&m), 80 + 3 * 496 + 88, 0);
    /* b=1, s=2: 2*2*(128 + 64 + 288) + 4*4*8 */
    assert_double_equal(ah_layer_fwd_flops(&m, AH_LAYER_BLOCK, 2, 1), 2048, 0);
}

static void test_tiny_bert_params(void **state) {
    (void)state;
    ah_model_config m = tiny_gpt();
    m.arch = AH_ARCH_BERT;
    /* embedding adds 2h token types + 2h LayerNorm */
    assert_double_equal(ah_layer_params(&m, AH_LAYER_EMBED), 40 + 24 + 16, 0);
    /* MLM head: h^2+h + 2h + V*h + V */
    assert_double_equal(ah_layer_params(&m, AH_LAYER_HEAD), 20 + 8 + 40 + 10, 0);
    assert_double_equal(ah_layer_params(&m, AH_LAYER_BLOCK), 244, 0);
    assert_double_equal(ah_model_total_params(&m), 80 + 2 * 244 + 78 - 40, 0);
}

static void test_fwd_bytes_hand(void **state) {
    (void)state;
    ah_model_config m = tiny_gpt();
    /* b=2, s=3, t=2: weights 244/2*2 + acts 16*24*2/2 + scores 2*2*2*9*2/2 */
    assert_double_equal(ah_layer_fwd_bytes(&m, AH_LAYER_BLOCK, 3, 2, 2), 244 + 384 + 72, 0);
    assert_double_equal(ah_layer_fwd_bytes(&m, AH_LAYER_EMBED, 3, 2, 2), 96, 0);
    /* 40*2/2 + 60*4/2*2 */
    assert_double_equal(ah_layer_fwd_bytes(&m, AH_LAYER_HEAD, 3, 2, 2), 40 + 240, 0);
    /* tp 0 is treated as 1 rather than dividing by zero */
    assert_double_equal(ah_layer_fwd_bytes(&m, AH_LAYER_HEAD, 3, 2, 0), 80 + 480, 0);
}

static void test_activation_bytes_hand(void **state) {
    (void)state;
    /* h=4096, a=32, s=2048, b=1, t=8: sbh = 8388608 and 5as/(ht) = 10 */
    ah_model_config m = preset("gpt3-6.7b");
    const double sbh = 8388608.0;
    assert_double_equal(ah_layer_act_bytes(&m, AH_LAYER_BLOCK, 2048, 1, 8, AH_RECOMPUTE_NONE, AH_PRECISION_BF16),
                        sbh * (10 + 3 + 10), 0);
    assert_double_equal(ah_layer_act_bytes(&m, AH_LAYER_BLOCK, 2048, 1, 8, AH_RECOMPUTE_SELECTIVE, AH_PRECISION_BF16), sbh * 13,
                        0);
    assert_double_equal(ah_layer_act_bytes(&m, AH_LAYER_BLOCK, 2048, 1, 8, AH_RECOMPUTE_FULL, AH_PRECISION_BF16), 2 * sbh, 0);
    assert_double_equal(ah_layer_act_bytes(&m, AH_LAYER_EMBED, 2048, 1, 8, AH_RECOMPUTE_NONE, AH_PRECISION_BF16), 2 * sbh, 0);
    /* 2sbh + 4*s*b*V/t = 16777216 + 4*2048*50257/8 */
    assert_double_equal(ah_layer_act_bytes(&m, AH_LAYER_HEAD, 2048, 1, 8, AH_RECOMPUTE_NONE, AH_PRECISION_BF16),
                        16777216.0 + 51463168.0, 0);
    /* Korthikanti's 34 + 5as/h at t=1 */
    assert_double_equal(ah_layer_act_bytes(&m, AH_LAYER_BLOCK, 2048, 1, 1, AH_RECOMPUTE_NONE, AH_PRECISION_BF16),
                        sbh * (34 + 80), 0);

    /* LLaMA-2-7B: MLP share (5 + 19*11008/(4*4096))/8 = 2.220703125 */
    m = preset("llama2-7b");
    assert_double_equal(ah_layer_act_bytes(&m, AH_LAYER_BLOCK, 2048, 1, 8, AH_RECOMPUTE_SELECTIVE, AH_PRECISION_BF16),
                        102514688.0, 0);
}

static void test_flops_per_sequence_vs_6N(void **state) {
    (void)state;
    /* Dense transformers: about 6 * params per token plus attention. */
    ah_model_config m = preset("gpt3-175b");
    double per_token = ah_model_flops_per_sequence(&m, 2048) / 2048;
    assert_within(per_token, 6 * ah_model_total_params(&m), 0.08);
    assert_true(per_token > 6 * 174e9);
}

static void test_layer_numbering(void **state) {
    (void)state;
    ah_model_config m = tiny_llama();
    assert_int_equal(ah_model_num_layers(&m), 5);
    assert_int_equal(ah_model_layer_kind(&m, 0), AH_LAYER_EMBED);
    assert_int_equal(ah_model_layer_kind(&m, 1), AH_LAYER_BLOCK);
    assert_int_equal(ah_model_layer_kind(&m, 3), AH_LAYER_BLOCK);
    assert_int_equal(ah_model_layer_kind(&m, 4), AH_LAYER_HEAD);
}

static void test_names(void **state) {
    (void)state;
    ah_recompute r = AH_RECOMPUTE_FULL;
    assert_int_equal(ah_recompute_parse("none", &r), 0);
    assert_int_equal(r, AH_RECOMPUTE_NONE);
    assert_int_equal(ah_recompute_parse("Selective", &r), 0);
    assert_int_equal(r, AH_RECOMPUTE_SELECTIVE);
    assert_int_equal(ah_recompute_parse("full", &r), 0);
    assert_int_equal(r, AH_RECOMPUTE_FULL);
    assert_int_equal(ah_recompute_parse("partial", &r), -1);
    assert_int_equal(ah_recompute_parse(NULL, &r), -1);
    assert_string_equal(ah_recompute_name(AH_RECOMPUTE_SELECTIVE), "selective");
    assert_string_equal(ah_recompute_name(AH_RECOMPUTE_NONE), "none");
    assert_string_equal(ah_recompute_name(AH_RECOMPUTE_FULL), "full");
    assert_string_equal(ah_arch_name(AH_ARCH_GPT), "gpt");
    assert_string_equal(ah_arch_name(AH_ARCH_LLAMA), "llama");
    assert_string_equal(ah_arch_name(AH_ARCH_BERT), "bert");
}

/* ------------------------------------------------------ JSON loading */

static void test_json_gpt2(void **state) {
    (void)state;
    /* The HF gpt2 config (abridged); n_inner null means 4h. */
    const char *cfg = "{\"activation_function\": \"gelu_new\", \"architectures\": "
                      "[\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"n_ctx\": 1024,\n"
                      "\"n_embd\": 768, \"n_head\": 12, \"n_inner\": null, \"n_layer\": 12,\n"
                      "\"n_positions\": 1024, \"vocab_size\": 50257}";
    ah_model_config m, ref = preset("gpt2-124m");
    char err[256], path[64];
    assert_int_equal(load_text(cfg, &m, err, sizeof err, path), 0);
    assert_int_equal(m.arch, AH_ARCH_GPT);
    assert_int_equal(m.hidden, 768);
    assert_int_equal(m.n_layers, 12);
    assert_int_equal(m.n_heads, 12);
    assert_int_equal(m.n_kv_heads, 12);
    assert_int_equal(m.ffn_hidden, 3072);
    assert_int_equal(m.max_positions, 1024);
    assert_int_equal(m.vocab, 50257);
    assert_true(m.tied_embeddings);
    /* name falls back to the file name without ".json" */
    char want[64];
    snprintf(want, sizeof want, "%.*s", (int)strlen(path + 5) - 5, path + 5);
    assert_string_equal(m.name, want);
    assert_double_equal(ah_model_total_params(&m), ah_model_total_params(&ref), 0);
}

static void test_json_llama_example(void **state) {
    (void)state;
    ah_model_config m;
    char err[256];
    assert_int_equal(ah_model_load_json(EXAMPLES "/llama-config.json", &m, err, sizeof err), 0);
    assert_string_equal(m.name, "meta-llama/Llama-2-7b-hf");
    assert_int_equal(m.arch, AH_ARCH_LLAMA);
    assert_int_equal(m.n_kv_heads, 32);
    assert_int_equal(m.ffn_hidden, 11008);
    assert_int_equal(m.max_positions, 0);
    assert_false(m.tied_embeddings);
    assert_within(ah_model_total_params(&m), 6.74e9, 0.01);
}

static void test_json_mistral_gqa(void **state) {
    (void)state;
    const char *cfg = "{\"model_type\": \"mistral\", \"hidden_size\": 4096, "
                      "\"intermediate_size\": 14336, \"num_attention_heads\": 32, "
                      "\"num_hidden_layers\": 32, \"num_key_value_heads\": 8, "
                      "\"vocab_size\": 32000, \"name_or_path\": \"mistral-7b\"}";
    ah_model_config m;
    char err[256], path[64];
    assert_int_equal(load_text(cfg, &m, err, sizeof err, path), 0);
    assert_string_equal(m.name, "mistral-7b");
    assert_int_equal(m.arch, AH_ARCH_LLAMA);
    assert_int_equal(m.n_kv_heads, 8);
    assert_false(m.tied_embeddings);
    assert_within(ah_model_total_params(&m), 7.24e9, 0.01);
}

static void test_json_bert(void **state) {
    (void)state;
    const char *cfg = "{\"architectures\": [\"BertForMaskedLM\"], \"hidden_size\": 1024,"
                      "\"intermediate_size\": 4096, \"max_position_embeddings\": 512,"
                      "\"model_type\": \"bert\", \"num_attention_heads\": 16,"
                      "\"num_hidden_layers\": 24, \"type_vocab_size\": 2, \"vocab_size\": 30522}";
    ah_model_config m, ref = preset("bert-large");
    char err[256], path[64];
    assert_int_equal(load_text(cfg, &m, err, sizeof err, path), 0);
    assert_int_equal(m.arch, AH_ARCH_BERT);
    assert_int_equal(m.max_positions, 512);
    assert_true(m.tied_embeddings);
    assert_double_equal(ah_model_total_params(&m), ah_model_total_params(&ref), 0);
}

static void test_json_opt_and_neo(void **state) {
    (void)state;
    const char *opt = "{\"model_type\": \"opt\", \"hidden_size\": 1024, \"ffn_dim\": 4096,"
                      "\"num_attention_heads\": 16, \"num_hidden_layers\": 24,"
                      "\"max_position_embeddings\": 2048, \"vocab_size\": 50272}";
    const char *neo = "{\"model_type\": \"gpt_neo\", \"hidden_size\": 2560, "
                      "\"intermediate_size\": null, \"num_heads\": 20, \"num_layers\": 32,"
                      "\"max_position_embeddings\": 2048, \"vocab_size\": 50257,"
                      "\"attention_types\": [[[\"global\", \"local\"], 16]]}";
    ah_model_config m;
    char err[256], path[64];
    assert_int_equal(load_text(opt, &m, err, sizeof err, path), 0);
    assert_int_equal(m.arch, AH_ARCH_GPT);
    assert_int_equal(m.embed_dim, 0); /* no word_embed_proj_dim: as wide as hidden */
    assert_false(m.post_norm);        /* do_layer_norm_before defaults to true */
    assert_int_equal(m.ffn_hidden, 4096);
    assert_int_equal(m.n_layers, 24);
    assert_int_equal(load_text(neo, &m, err, sizeof err, path), 0);
    assert_int_equal(m.n_heads, 20);
    assert_int_equal(m.n_layers, 32);
    assert_int_equal(m.ffn_hidden, 4 * 2560);
}

/* The HF configs of facebook/opt-350m, Qwen/Qwen2-0.5B and EleutherAI/gpt-neo-125M
 * (as published, less keys that play no part) give the parameter counts of the
 * HF models: OPT's 512-wide embeddings with project_in/out, 2 extra position
 * rows and no final norm (post-LN); Qwen2's q/k/v biases; GPT-Neo without
 * q/k/v biases; the presets of the same models agree. */
static void test_family_param_counts_exact(void **state) {
    (void)state;
    const char *opt =
        "{\"activation_function\": \"relu\", \"do_layer_norm_before\": false, \"ffn_dim\": 4096,"
        "\"hidden_size\": 1024, \"max_position_embeddings\": 2048, \"model_type\": \"opt\","
        "\"num_attention_heads\": 16, \"num_hidden_layers\": 24, \"vocab_size\": 50272,"
        "\"word_embed_proj_dim\": 512, \"_name_or_path\": \"facebook/opt-350m\"}";
    const char *qwen =
        "{\"hidden_act\": \"silu\", \"hidden_size\": 896, \"intermediate_size\": 4864,"
        "\"max_position_embeddings\": 131072, \"max_window_layers\": 24, \"model_type\": \"qwen2\","
        "\"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"
        "\"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 131072,"
        "\"tie_word_embeddings\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    const char *neo =
        "{\"activation_function\": \"gelu_new\", \"attention_layers\": [\"global\", \"local\","
        "\"global\", \"local\", \"global\", \"local\", \"global\", \"local\", \"global\", \"local\","
        "\"global\", \"local\"], \"attention_types\": [[[\"global\", \"local\"], 6]],"
        "\"hidden_size\": 768, \"intermediate_size\": null, \"max_position_embeddings\": 2048,"
        "\"model_type\": \"gpt_neo\", \"num_heads\": 12, \"num_layers\": 12, \"vocab_size\": 50257,"
        "\"window_size\": 256}";
    ah_model_config m;
    char err[256], path[64];
    assert_int_equal(load_text(opt, &m, err, sizeof err, path), 0);
    assert_int_equal(m.embed_dim, 512);
    assert_int_equal(m.pos_offset, 2);
    assert_true(m.post_norm);
    assert_int_equal(m.act, AH_ACT_RELU);
    assert_double_equal(ah_model_total_params(&m), 331196416.0, 0);
    /* embedding 50272*512 + 2050*1024 + project_in 512*1024; head project_out + the [V, 512] matrix */
    assert_double_equal(ah_layer_params(&m, AH_LAYER_EMBED), 50272.0 * 512 + 2050.0 * 1024 + 512.0 * 1024, 0);
    assert_double_equal(ah_layer_params(&m, AH_LAYER_HEAD), 1024.0 * 512 + 50272.0 * 512, 0);
    assert_double_equal(ah_model_tied_params(&m), 50272.0 * 512, 0);
    ah_model_config p = preset("opt-350m");
    assert_double_equal(ah_model_total_params(&p), 331196416.0, 0);
    assert_int_equal(p.embed_dim, 512);
    assert_true(p.post_norm && p.act == AH_ACT_RELU && p.pos_offset == 2);

    assert_int_equal(load_text(qwen, &m, err, sizeof err, path), 0);
    assert_true(m.qkv_bias);
    assert_double_equal(m.norm_eps, 1e-6, 0);
    assert_double_equal(m.rope_theta, 1e6, 0);
    assert_double_equal(ah_model_total_params(&m), 494032768.0, 0);

    assert_int_equal(load_text(neo, &m, err, sizeof err, path), 0);
    assert_true(m.no_qkv_bias && m.unscaled_attention);
    assert_int_equal(m.attn_window, 256);
    for (int b = 0; b < 12; b++)
        assert_int_equal(ah_model_block_is_local(&m, b), b % 2);
    assert_double_equal(ah_model_total_params(&m), 125198592.0, 0);
    p = preset("gpt-neo-2.7b");
    assert_double_equal(ah_model_total_params(&p), 2651307520.0, 0);
    assert_true(p.no_qkv_bias && p.unscaled_attention && p.attn_window == 256);
    for (int b = 0; b < 32; b++)
        assert_int_equal(ah_model_block_is_local(&p, b), b % 2);
}

/* GPT-Neo's attention_types alone (HF expands it to attention_layers), its
 * default, and the errors: a list that does not match the layers, an unknown
 * kind; OPT without biases is refused by name. */
static void test_neo_attention_types_and_errors(void **state) {
    (void)state;
    ah_model_config m;
    char err[256], path[64];
    const char *base = "{\"model_type\": \"gpt_neo\", \"hidden_size\": 64, \"num_heads\": 4,"
                       "\"max_position_embeddings\": 128, \"vocab_size\": 100, ";
    char buf[512];
    snprintf(buf, sizeof buf,
             "%s\"num_layers\": 6, \"attention_types\": [[[\"local\"], 2], [[\"global\", \"local\"], 2]]}",
             base);
    assert_int_equal(load_text(buf, &m, err, sizeof err, path), 0);
    int want[6] = {1, 1, 0, 1, 0, 1};
    for (int b = 0; b < 6; b++)
        assert_int_equal(ah_model_block_is_local(&m, b), want[b]);
    assert_int_equal(m.attn_window, 256);
    snprintf(buf, sizeof buf, "%s\"num_layers\": 24, \"window_size\": 32}", base); /* HF default types */
    assert_int_equal(load_text(buf, &m, err, sizeof err, path), 0);
    assert_int_equal(m.attn_window, 32);
    assert_true(ah_model_block_is_local(&m, 23) && !ah_model_block_is_local(&m, 22));
    snprintf(buf, sizeof buf, "%s\"num_layers\": 4, \"attention_types\": [[[\"global\"], 4]]}", base);
    assert_int_equal(load_text(buf, &m, err, sizeof err, path), 0);
    assert_int_equal(m.attn_window, 0); /* no local layer */
    snprintf(buf, sizeof buf, "%s\"num_layers\": 4}", base);
    assert_int_equal(load_text(buf, &m, err, sizeof err, path), -1);
    assert_non_null(strstr(err, "attention_types: describes 24 layers, the model has 4"));
    snprintf(buf, sizeof buf, "%s\"num_layers\": 2, \"attention_layers\": [\"global\", \"sparse\"]}", base);
    assert_int_equal(load_text(buf, &m, err, sizeof err, path), -1);
    assert_non_null(strstr(err, "attention_layers: expected \"global\" or \"local\" entries"));
    snprintf(buf, sizeof buf, "%s\"num_layers\": 2, \"attention_layers\": [\"global\"]}", base);
    assert_int_equal(load_text(buf, &m, err, sizeof err, path), -1);
    assert_non_null(strstr(err, "attention_layers: 1 entries for 2 layers"));
    assert_int_equal(
        load_text("{\"model_type\": \"opt\", \"hidden_size\": 64, \"num_attention_heads\": 4,"
                  "\"num_hidden_layers\": 2, \"max_position_embeddings\": 64, \"vocab_size\": 100,"
                  "\"enable_bias\": false}",
                  &m, err, sizeof err, path),
        -1);
    assert_non_null(strstr(err, "enable_bias"));
}

/* The family details survive a JSON object (a plan's model): written only
 * when set, read back equal; plain models get no extra keys; bad values are
 * one line naming the key. */
static void test_family_json_round_trip(void **state) {
    (void)state;
    const char *names[] = {"opt-350m", "gpt-neo-2.7b", "gpt2-124m"};
    for (int i = 0; i < 3; i++) {
        ah_model_config m = preset(names[i]), back;
        m.rope_theta = i == 2 ? 0 : 5e5;
        m.norm_eps = i == 2 ? 0 : 1e-6;
        cJSON *o = cJSON_CreateObject();
        assert_int_equal(ah_model_family_to_json(o, &m), 0);
        if (i == 2)
            assert_int_equal(cJSON_GetArraySize(o), 0);
        memset(&back, 0, sizeof back);
        back.n_layers = m.n_layers;
        ah_err_ctx cx = {"plan.json", NULL, 0};
        assert_int_equal(ah_model_family_from_json(&cx, o, "model", &back), 0);
        assert_int_equal(back.embed_dim, m.embed_dim);
        assert_int_equal(back.pos_offset, m.pos_offset);
        assert_int_equal(back.post_norm, m.post_norm);
        assert_int_equal(back.act, m.act);
        assert_int_equal(back.no_qkv_bias, m.no_qkv_bias);
        assert_int_equal(back.unscaled_attention, m.unscaled_attention);
        assert_int_equal(back.attn_window, m.attn_window);
        assert_memory_equal(back.local_layers, m.local_layers, sizeof m.local_layers);
        assert_double_equal(back.rope_theta, m.rope_theta, 0);
        assert_double_equal(back.norm_eps, m.norm_eps, 0);
        cJSON_Delete(o);
    }
    char err[256];
    ah_err_ctx cx = {"plan.json", err, sizeof err};
    ah_model_config m = preset("gpt-neo-2.7b");
    cJSON *o = cJSON_Parse("{\"activation\": \"swish\"}");
    assert_int_equal(ah_model_family_from_json(&cx, o, "model", &m), -1);
    assert_non_null(strstr(err, "model.activation: unknown activation \"swish\""));
    cJSON_Delete(o);
    o = cJSON_Parse("{\"local_layers\": [1, 32]}");
    assert_int_equal(ah_model_family_from_json(&cx, o, "model", &m), -1);
    assert_non_null(strstr(err, "model.local_layers"));
    cJSON_Delete(o);
}

static void test_json_arch_from_keys(void **state) {
    (void)state;
    ah_model_config m;
    char err[256], path[64];
    assert_int_equal(load_text("{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, "
                               "\"n_positions\": 128, \"vocab_size\": 100}",
                               &m, err, sizeof err, path),
                     0);
    assert_int_equal(m.arch, AH_ARCH_GPT);
    assert_int_equal(load_text("{\"hidden_size\": 64, \"num_attention_heads\": 4, "
                               "\"num_hidden_layers\": 2, \"intermediate_size\": 172, "
                               "\"rms_norm_eps\": 1e-6, \"vocab_size\": 100}",
                               &m, err, sizeof err, path),
                     0);
    assert_int_equal(m.arch, AH_ARCH_LLAMA);
    assert_int_equal(m.n_kv_heads, 4);
    assert_int_equal(load_text("{\"hidden_size\": 64, \"num_attention_heads\": 4, "
                               "\"num_hidden_layers\": 2, \"type_vocab_size\": 2, "
                               "\"max_position_embeddings\": 128, \"vocab_size\": 100}",
                               &m, err, sizeof err, path),
                     0);
    assert_int_equal(m.arch, AH_ARCH_BERT);
    assert_int_equal(m.ffn_hidden, 256);
}

static void test_json_name_from_directory(void **state) {
    (void)state;
    char dir[64] = "/tmp/ahm_dir_XXXXXX", path[96];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 128, "
          "\"vocab_size\": 100}",
          f);
    fclose(f);
    ah_model_config m;
    char err[256];
    int rc = ah_model_load_json(path, &m, err, sizeof err);
    unlink(path);
    rmdir(dir);
    assert_int_equal(rc, 0);
    assert_string_equal(m.name, dir + 5);
}

/* Each bad config must fail with "<path>: ..." naming the field. */
static void test_json_errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{\n\"n_embd\": 768,\n\"n_head\": 12,,\n}", "malformed JSON near line 3"},
        {"", "malformed JSON near line 1"},
        {"{\"n_embd\": 64} trailing", "malformed JSON"},
        {"[1, 2]", "must be an object"},
        {"{\"model_type\": \"llama\", \"num_attention_heads\": 4}", "hidden_size: missing"},
        {"{\"vocab_size\": 10}", "hidden_size: missing (or 'n_embd'"},
        {"{\"n_embd\": 64, \"n_head\": \"4\", \"n_layer\": 2, \"n_positions\": 8, "
         "\"vocab_size\": 10}",
         "n_head: expected an integer, got a string"},
        {"{\"n_embd\": 64, \"n_head\": 0, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10}",
         "n_head: 0 out of range [1, 4096]"},
        {"{\"n_embd\": 64, \"n_head\": 2.5, \"n_layer\": 2, \"n_positions\": 8, "
         "\"vocab_size\": 10}",
         "n_head: expected an integer, got a number"},
        {"{\"n_embd\": 1e300, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 8, "
         "\"vocab_size\": 10}",
         "n_embd: 1e+300 out of range [1, 65536]"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": -2, \"n_positions\": 8, "
         "\"vocab_size\": 10}",
         "n_layer: -2 out of range [1, 1024]"},
        /* bounds a few times the largest real models': beyond them the planner would search for minutes */
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, \"num_hidden_layers\": 100000, "
         "\"intermediate_size\": 128, \"vocab_size\": 10}",
         "num_hidden_layers: 100000 out of range [1, 1024]"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 1025, \"n_positions\": 8, \"vocab_size\": 10}",
         "n_layer: 1025 out of range [1, 1024]"},
        {"{\"n_embd\": 131072, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10}",
         "n_embd: 131072 out of range [1, 65536]"},
        {"{\"n_embd\": 65536, \"n_head\": 8192, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10}",
         "n_head: 8192 out of range [1, 4096]"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10000000}",
         "vocab_size: 10000000 out of range [1, 4194304]"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10, "
         "\"n_inner\": 1000000}",
         "n_inner: 1000000 out of range [1, 262144]"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 2000000, \"vocab_size\": 10}",
         "n_positions: 2000000 out of range [1, 1048576]"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 5000, "
         "\"num_hidden_layers\": 2, \"intermediate_size\": 128, \"vocab_size\": 10}",
         "num_key_value_heads: 5000 out of range [1, 4096]"},
        /* GPT-Neo's repeat count is counted, not walked (it took minutes) */
        {"{\"model_type\": \"gpt_neo\", \"hidden_size\": 64, \"num_heads\": 4, \"num_layers\": 2, "
         "\"max_position_embeddings\": 8, \"vocab_size\": 10, "
         "\"attention_types\": [[["
         "\"global\", \"local\", \"global\", \"local\", \"global\", \"local\", \"global\", \"local\", "
         "\"global\", \"local\", \"global\", \"local\", \"global\", \"local\", \"global\", \"local\", "
         "\"global\", \"local\", \"global\", \"local\", \"global\", \"local\", \"global\", \"local\", "
         "\"global\", \"local\", \"global\", \"local\", \"global\", \"local\", \"global\", \"local\", "
         "\"global\", \"local\", \"global\", \"local\", \"global\", \"local\", \"global\", \"local\"], 60000000]]}",
         "attention_types: describes 2400000000 layers, the model has 2"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 8}", "vocab_size: missing"},
        /* null is "the default": a required field given as null is missing */
        {"{\"n_embd\": 64, \"n_head\": null, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10}",
         "n_head: missing"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"vocab_size\": 10}",
         "n_positions: missing"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10, "
         "\"n_inner\": true}",
         "n_inner: expected an integer, got a boolean"},
        {"{\"n_embd\": 66, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10}",
         "n_embd: 66 must be divisible by 'n_head' (4)"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 8, "
         "\"num_key_value_heads\": 3, \"num_hidden_layers\": 2, \"intermediate_size\": 100, "
         "\"vocab_size\": 10}",
         "num_attention_heads: 8 must be divisible by 'num_key_value_heads' (3)"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 8, "
         "\"num_hidden_layers\": 2, \"vocab_size\": 10}",
         "intermediate_size: missing"},
        {"{\"model_type\": \"t5\", \"d_model\": 512}", "model_type: unsupported value 't5'"},
        {"{\"model_type\": 7}", "model_type: expected a string, got a number"},
        {"{\"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 10, "
         "\"tie_word_embeddings\": \"yes\"}",
         "tie_word_embeddings: expected true or false, got a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ah_model_config m;
        char err[512], path[64];
        if (load_text(cases[i].text, &m, err, sizeof err, path) != -1)
            fail_msg("case %zu loaded", i);
        assert_contains(err, path);
        assert_contains(err, cases[i].want);
        assert_null(strchr(err, '\n'));
    }
}

static void test_json_unreadable(void **state) {
    (void)state;
    ah_model_config m;
    char err[256];
    assert_int_equal(ah_model_load_json("/nonexistent/cfg.json", &m, err, sizeof err), -1);
    assert_contains(err, "/nonexistent/cfg.json: cannot open file");
    assert_int_equal(ah_model_load_json("/tmp", &m, err, sizeof err), -1);
    assert_contains(err, "/tmp: ");
    assert_int_equal(ah_model_load_json(NULL, &m, err, sizeof err), -1);
    /* a tiny buffer truncates but stays terminated */
    char small[8];
    assert_int_equal(ah_model_load_json("/nonexistent/cfg.json", &m, small, sizeof small), -1);
    assert_int_equal(strlen(small), 7);
    assert_int_equal(ah_model_load_json("/nonexistent/cfg.json", &m, NULL, 0), -1);
}

/* Every prefix of a valid config and every single-byte corruption must load
 * or fail cleanly (run under ASan/valgrind to make this meaningful). */
static void test_json_never_crashes(void **state) {
    (void)state;
    const char *cfg = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": "
                      "172, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
                      "\"num_hidden_layers\": 2, \"vocab_size\": 100, "
                      "\"tie_word_embeddings\": false, \"_name_or_path\": \"x\"}";
    size_t n = strlen(cfg);
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    static const char junk[] = {'"', '{', '}', '[', ':', ',', '0', '-', 'e', '\\', '\x80', 'n'};
    for (size_t cut = 0; cut <= n; cut++) {
        for (size_t j = 0; j <= sizeof junk; j++) {
            memcpy(buf, cfg, n + 1);
            if (j < sizeof junk && cut < n)
                buf[cut] = junk[j];
            else
                buf[cut] = '\0';
            ah_model_config m;
            char err[256], path[64];
            int rc = load_text(buf, &m, err, sizeof err, path);
            if (rc != 0)
                assert_contains(err, path);
            else
                assert_true(m.hidden % m.n_heads == 0 && m.n_heads % m.n_kv_heads == 0);
        }
    }
    free(buf);
}

/* ------------------------------------------------------------ resolve */

static void test_resolve(void **state) {
    (void)state;
    ah_model_config m;
    char err[1024];
    assert_int_equal(ah_model_resolve("GPT3-13B", &m, err, sizeof err), 0);
    assert_int_equal(m.hidden, 5120);
    assert_int_equal(ah_model_resolve(EXAMPLES "/llama-config.json", &m, err, sizeof err), 0);
    assert_int_equal(m.arch, AH_ARCH_LLAMA);

    assert_int_equal(ah_model_resolve("gpt-7", &m, err, sizeof err), -1);
    assert_contains(err, "unknown model 'gpt-7' (not a preset; presets: gpt2-124m, ");
    assert_contains(err, "small-gpt; or give a path to config.json)");
    /* something meant as a file reports the file problem */
    assert_int_equal(ah_model_resolve("/nonexistent/x.json", &m, err, sizeof err), -1);
    assert_contains(err, "/nonexistent/x.json: cannot open file");
    assert_int_equal(ah_model_resolve(NULL, &m, err, sizeof err), -1);
    assert_contains(err, "unknown model ''");
    char small[16];
    assert_int_equal(ah_model_resolve("nope", &m, small, sizeof small), -1);
    assert_int_equal(strlen(small), 15);
}

/* A sequence longer than the learned position table cannot be trained (the
 * engine refuses it); RoPE models have no table and no such limit. */
static void test_seq_vs_positions(void **state) {
    (void)state;
    char err[512], path[64];
    ah_model_config m;
    assert_int_equal(load_text("{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_head\": 4, \"n_layer\": 2, "
                               "\"n_positions\": 1024, \"vocab_size\": 10}",
                               &m, err, sizeof err, path),
                     0);
    assert_int_equal(ah_model_check_seq(&m, 1024, "--seq", err, sizeof err), 0);
    assert_int_equal(ah_model_check_seq(&m, 8192, "--seq", err, sizeof err), -1);
    assert_contains(err, "--seq 8192 exceeds the 1024 learned positions of model ");
    m = preset("gpt3-1.3b");
    assert_int_equal(ah_model_check_seq(&m, 2048, "--seq", err, sizeof err), 0);
    assert_int_equal(ah_model_check_seq(&m, 2049, "", err, sizeof err), -1);
    assert_contains(err, "2049 exceeds the 2048 learned positions of model gpt3-1.3b");
    m = preset("opt-350m"); /* 2 extra rows before position 0: still 2048 positions */
    assert_int_equal(ah_model_check_seq(&m, 2049, "--seq", err, sizeof err), -1);
    m = preset("llama2-7b");
    assert_int_equal(m.max_positions, 0);
    assert_int_equal(ah_model_check_seq(&m, 1 << 20, "--seq", err, sizeof err), 0);
    assert_int_equal(ah_model_resolve(EXAMPLES "/llama-config.json", &m, err, sizeof err), 0);
    assert_int_equal(ah_model_check_seq(&m, 65536, "--seq", err, sizeof err), 0);
}

/* GPT-2 124M with its real vocabulary: HF's GPT2LMHeadModel count (tied
 * embeddings), and the head GEMM's vocabulary padded to 50304 as in llm.c;
 * the padding is no parameter. */
static void test_gpt2_vocab_and_padding(void **state) {
    (void)state;
    ah_model_config m;
    assert_int_equal(ah_model_preset("gpt2-124m", &m), 0);
    assert_int_equal(m.vocab, 50257);
    assert_double_equal(ah_model_total_params(&m), 124439808.0, 0);
    assert_int_equal(ah_model_padded_vocab(&m), 50304);
    m.vocab = 256;
    assert_int_equal(ah_model_padded_vocab(&m), 256);
    m.vocab = 1000;
    assert_int_equal(ah_model_padded_vocab(&m), 1024);
    m.vocab = 1;
    assert_int_equal(ah_model_padded_vocab(&m), 64);
}

/* Mixture-of-experts configs are refused by name; Mistral's sliding window
 * loads as every layer local with that window; Qwen2 with
 * use_sliding_window true is refused; a window with use_sliding_window false
 * or as wide as the context is full attention. */
static void test_moe_and_sliding_window_refused(void **state) {
    (void)state;
    char err[512], path[64];
    ah_model_config m;
    const char *mixtral =
        "{\"model_type\": \"mixtral\", \"hidden_size\": 4096, \"intermediate_size\": 14336, "
        "\"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, "
        "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"sliding_window\": null, \"vocab_size\": 32000}";
    assert_int_equal(load_text(mixtral, &m, err, sizeof err, path), -1);
    assert_contains(err, "num_local_experts: mixture-of-experts models are not supported");
    const char *mistral01 =
        "{\"model_type\": \"mistral\", \"hidden_size\": 4096, \"intermediate_size\": 14336, "
        "\"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, "
        "\"max_position_embeddings\": 32768, \"sliding_window\": 4096, \"vocab_size\": 32000}";
    assert_int_equal(load_text(mistral01, &m, err, sizeof err, path), 0);
    assert_int_equal(m.attn_window, 4096);
    assert_true(ah_model_block_is_local(&m, 0) && ah_model_block_is_local(&m, 31) && !ah_model_block_is_local(&m, 32));
    const char *qwen_window =
        "{\"model_type\": \"qwen2\", \"hidden_size\": 896, \"intermediate_size\": 4864, "
        "\"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2, "
        "\"max_position_embeddings\": 32768, \"sliding_window\": 4096, \"use_sliding_window\": true, "
        "\"vocab_size\": 151936}";
    assert_int_equal(load_text(qwen_window, &m, err, sizeof err, path), -1);
    assert_contains(err, "sliding_window: sliding-window attention is computed for Mistral-style models");
    const char *qwen2 =
        "{\"model_type\": \"qwen2\", \"hidden_size\": 896, \"intermediate_size\": 4864, "
        "\"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2, "
        "\"max_position_embeddings\": 32768, \"sliding_window\": 32768, \"use_sliding_window\": false, "
        "\"vocab_size\": 151936}";
    assert_int_equal(load_text(qwen2, &m, err, sizeof err, path), 0);
    assert_int_equal(m.vocab, 151936);
    const char *wide =
        "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, "
        "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"max_position_embeddings\": 4096, "
        "\"sliding_window\": 4096, \"vocab_size\": 100}";
    assert_int_equal(load_text(wide, &m, err, sizeof err, path), 0);
    assert_int_equal(m.attn_window, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_and_sliding_window_refused),
        cmocka_unit_test(test_gpt2_vocab_and_padding),
        cmocka_unit_test(test_seq_vs_positions),
        cmocka_unit_test(test_presets_all_valid),
        cmocka_unit_test(test_preset_lookup),
        cmocka_unit_test(test_param_counts_match_published),
        cmocka_unit_test(test_tiny_gpt_params_and_flops),
        cmocka_unit_test(test_tiny_llama_params_and_flops),
        cmocka_unit_test(test_tiny_bert_params),
        cmocka_unit_test(test_fwd_bytes_hand),
        cmocka_unit_test(test_activation_bytes_hand),
        cmocka_unit_test(test_flops_per_sequence_vs_6N),
        cmocka_unit_test(test_layer_numbering),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_json_gpt2),
        cmocka_unit_test(test_json_llama_example),
        cmocka_unit_test(test_json_mistral_gqa),
        cmocka_unit_test(test_json_bert),
        cmocka_unit_test(test_json_opt_and_neo),
        cmocka_unit_test(test_family_param_counts_exact),
        cmocka_unit_test(test_neo_attention_types_and_errors),
        cmocka_unit_test(test_family_json_round_trip),
        cmocka_unit_test(test_json_arch_from_keys),
        cmocka_unit_test(test_json_name_from_directory),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_json_unreadable),
        cmocka_unit_test(test_json_never_crashes),
        cmocka_unit_test(test_resolve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
