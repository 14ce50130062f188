/* Schedule programs: compute orders worked out by hand, the rank <-> slot
 * map, chunks, buckets, and that every program set runs to completion with
 * blocking receives and non-blocking sends (no schedule can deadlock). */
#include "test_util.h"

#include "autohet/schedule.h"

/* ---- plans -------------------------------------------------------------- */

static void make_plan(ah_plan *p, int blocks, int R, const int *stages, const int *mbs, const int *const *first) {
    memset(p, 0, sizeof *p);
    p->version = 1;
    p->model.arch = AH_ARCH_GPT;
    p->model.hidden = 64;
    p->model.n_layers = blocks;
    p->model.n_heads = 4;
    p->model.n_kv_heads = 4;
    p->model.ffn_hidden = 256;
    p->model.vocab = 128;
    p->model.max_positions = 64;
    p->micro_batch = 1;
    p->n_replicas = R;
    p->replicas = calloc((size_t)R, sizeof(ah_replica));
    int L = ah_model_num_layers(&p->model);
    for (int k = 0; k < R; k++) {
        ah_replica *r = &p->replicas[k];
        r->n_stages = stages[k];
        r->micro_batches = mbs[k];
        p->global_batch += mbs[k];
        r->stages = calloc((size_t)stages[k], sizeof(ah_stage));
        for (int j = 0; j < stages[k]; j++) {
            r->stages[j].layer_first = first[k][j];
            r->stages[j].layer_last = j + 1 < stages[k] ? first[k][j + 1] : L;
            r->stages[j].tp = 2;
        }
    }
}

static void free_plan(ah_plan *p) {
    for (int k = 0; k < p->n_replicas; k++)
        free(p->replicas[k].stages);
    free(p->replicas);
}

/* ---- orders ------------------------------------------------------------- */

static void expect_order(ah_schedule s, int S, int V, int j, int m, const char *want) {
    ah_compute_op ops[256];
    ah_schedule_order(s, S, V, j, m, ops);
    char got[2048] = "";
    for (int i = 0; i < 2 * m * V; i++) {
        char one[32];
        if (V > 1)
            snprintf(one, sizeof one, "%s%c%d.%d", i ? " " : "", ops[i].backward ? 'B' : 'F', ops[i].chunk,
                     ops[i].micro_batch);
        else
            snprintf(one, sizeof one, "%s%c%d", i ? " " : "", ops[i].backward ? 'B' : 'F', ops[i].micro_batch);
        strcat(got, one);
    }
    if (strcmp(got, want))
        fail_msg("%s S=%d V=%d stage %d m=%d:\n got  %s\n want %s", ah_schedule_name(s), S, V, j, m, got, want);
}

static void test_orders(void **state) {
    (void)state;
    /* 1F1B: S - j - 1 warm-up forwards */
    expect_order(AH_SCHED_1F1B, 3, 1, 0, 4, "F0 F1 F2 B0 F3 B1 B2 B3");
    expect_order(AH_SCHED_1F1B, 3, 1, 2, 4, "F0 B0 F1 B1 F2 B2 F3 B3");
    expect_order(AH_SCHED_1F1B, 4, 1, 0, 2, "F0 F1 B0 B1"); /* fewer micro-batches than warm-up */
    expect_order(AH_SCHED_GPIPE, 3, 1, 1, 3, "F0 F1 F2 B2 B1 B0");
    /* interleaved, S = 2, V = 2, m = 4 (worked out from Megatron-LM's
     * schedule): stage 0 warms up with (2-0-1)*2 + (2-1)*2 = 4 forwards,
     * stage 1 with 2; groups of S micro-batches go chunk 0 then chunk 1, the
     * backwards through the chunks in reverse */
    expect_order(AH_SCHED_INTERLEAVED, 2, 2, 0, 4,
                 "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3");
    expect_order(AH_SCHED_INTERLEAVED, 2, 2, 1, 4,
                 "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3");
    /* m == S: every forward first */
    expect_order(AH_SCHED_INTERLEAVED, 2, 2, 1, 2, "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1");
    /* names */
    ah_schedule s;
    for (int k = 0; k < AH_SCHED_KINDS; k++) {
        assert_int_equal(ah_schedule_parse(ah_schedule_name((ah_schedule)k), &s), 0);
        assert_int_equal(s, k);
    }
    assert_int_equal(ah_schedule_parse("Interleaved", &s), 0);
    assert_int_equal(s, AH_SCHED_INTERLEAVED);
    assert_int_equal(ah_schedule_parse("zb-h1", &s), -1);
}

/* ---- slots -------------------------------------------------------------- */

static void test_slots(void **state) {
    (void)state;
    ah_plan p;
    int st[2] = {1, 3}, mb[2] = {3, 1}, f0[1] = {0}, f1[3] = {0, 1, 4};
    const int *first[2] = {f0, f1};
    make_plan(&p, 4, 2, st, mb, first);
    assert_int_equal(ah_plan_slots(&p), 8); /* (1 + 3) stages x tp 2 */
    for (int r = 0; r < 8; r++) {
        ah_slot s;
        assert_int_equal(ah_rank_slot(&p, r, &s), 0);
        assert_int_equal(ah_slot_rank(&p, s.replica, s.stage, s.tp_rank), r);
    }
    ah_slot s;
    assert_int_equal(ah_rank_slot(&p, 5, &s), 0);
    assert_int_equal(s.replica, 1);
    assert_int_equal(s.stage, 1);
    assert_int_equal(s.tp_rank, 1);
    assert_int_equal(ah_rank_slot(&p, 8, &s), -1);
    free_plan(&p);
}

/* ---- chunks and buckets ------------------------------------------------- */

static void test_chunks_and_buckets(void **state) {
    (void)state;
    /* 10 layers (emb, 8 blocks, head); replica 0: stages [0,3) [3,5) [5,7) [7,10);
     * replica 1: [0,5) [5,10) */
    ah_plan p;
    int st[2] = {4, 2}, mb[2] = {4, 2}, f0[4] = {0, 3, 5, 7}, f1[2] = {0, 5};
    const int *first[2] = {f0, f1};
    make_plan(&p, 8, 2, st, mb, first);
    double grad[10];
    for (int l = 0; l < 10; l++)
        grad[l] = 100.0 * (l + 1);
    ah_schedule_options o = {.schedule = AH_SCHED_INTERLEAVED, .virtual_stages = 2, .act_bytes = 7,
                             .grad_bytes = grad};
    ah_schedule_plan sp;
    char err[256];
    assert_int_equal(ah_schedule_build(&p, &o, &sp, err, sizeof err), 0);
    assert_int_equal(sp.V, 2);
    assert_int_equal(sp.n_programs, 6);
    /* replica 0, model order: (v0: s0 s1 s2 s3) (v1: s0 s1 s2 s3); stage 0 has
     * 3 layers: the longer chunk holds the embedding; stage 3's holds the head */
    int want0[8][3] = {{0, 2, 0}, {2, 3, 1}, {3, 4, 2}, {4, 5, 3}, {5, 6, 0}, {6, 7, 1}, {7, 8, 2}, {8, 10, 3}};
    assert_int_equal(sp.n_chunks[0], 8);
    for (int c = 0; c < 8; c++) {
        assert_int_equal(sp.chunks[0][c].first, want0[c][0]);
        assert_int_equal(sp.chunks[0][c].last, want0[c][1]);
        assert_int_equal(sp.chunks[0][c].stage, want0[c][2]);
        assert_int_equal(sp.chunks[0][c].virt, c / 4);
    }
    /* every stage keeps its layer count */
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < st[k]; j++) {
            int n = 0;
            for (int c = 0; c < sp.n_chunks[k]; c++)
                if (sp.chunks[k][c].stage == j)
                    n += sp.chunks[k][c].last - sp.chunks[k][c].first;
            assert_int_equal(n, p.replicas[k].stages[j].layer_last - p.replicas[k].stages[j].layer_first);
        }
    /* replica 1: [0,3) s0, [3,5) s1, [5,7) s0, [7,10) s1 */
    assert_int_equal(ah_schedule_chunk_of(&sp, 1, 6)->stage, 0);
    assert_int_equal(ah_schedule_chunk_of(&sp, 1, 8)->stage, 1);
    /* buckets: holder changes in either replica cut a bucket */
    int wantb[][4] = {{0, 2, 0, 0}, {2, 3, 1, 0}, {3, 4, 2, 1}, {4, 5, 3, 1},
                      {5, 6, 0, 0}, {6, 7, 1, 0}, {7, 8, 2, 1}, {8, 10, 3, 1}};
    assert_int_equal(sp.n_buckets, 8);
    for (int q = 0; q < 8; q++) {
        assert_int_equal(sp.buckets[q].first, wantb[q][0]);
        assert_int_equal(sp.buckets[q].last, wantb[q][1]);
        assert_int_equal(sp.buckets[q].holder[0], wantb[q][2]);
        assert_int_equal(sp.buckets[q].holder[1], wantb[q][3]);
        double bytes = 0;
        for (int l = wantb[q][0]; l < wantb[q][1]; l++)
            bytes += grad[l];
        assert_double_equal(sp.buckets[q].bytes, bytes, 0);
    }
    /* program tails: buckets top down, then step sync and optimizer */
    const ah_program *pg = ah_schedule_program_of(&sp, 1, 1);
    int nb = 0, last_bucket = 99;
    for (int i = 0; i < pg->n_ops; i++)
        if (pg->ops[i].kind == AH_OP_DP_ALLREDUCE) {
            assert_true(pg->ops[i].bucket < last_bucket);
            last_bucket = pg->ops[i].bucket;
            assert_int_equal(sp.buckets[pg->ops[i].bucket].holder[1], 1);
            nb++;
        }
    assert_int_equal(nb, 4);
    assert_int_equal(pg->ops[pg->n_ops - 1].kind, AH_OP_OPTIMIZER);
    assert_int_equal(pg->ops[pg->n_ops - 2].kind, AH_OP_STEP_SYNC);
    ah_schedule_plan_free(&sp);
    free_plan(&p);
}

static void test_check(void **state) {
    (void)state;
    ah_plan p;
    char err[256];
    int st1[1] = {1}, mb1[1] = {4}, f1[1] = {0};
    const int *first1[1] = {f1};
    make_plan(&p, 4, 1, st1, mb1, first1);
    assert_int_equal(ah_schedule_check(&p, AH_SCHED_GPIPE, 1, err, sizeof err), 0);
    assert_int_equal(ah_schedule_check(&p, AH_SCHED_INTERLEAVED, 2, err, sizeof err), -1);
    assert_contains(err, "one stage");
    free_plan(&p);
    int st2[1] = {2}, mb2[1] = {3}, f2[2] = {0, 3};
    const int *first2[1] = {f2};
    make_plan(&p, 4, 1, st2, mb2, first2);
    assert_int_equal(ah_schedule_check(&p, AH_SCHED_INTERLEAVED, 2, err, sizeof err), -1);
    assert_contains(err, "not a multiple of its 2 stages");
    p.replicas[0].micro_batches = 4;
    assert_int_equal(ah_schedule_check(&p, AH_SCHED_INTERLEAVED, 3, err, sizeof err), 0);
    /* each stage holds 3 of the 6 layers */
    assert_int_equal(ah_schedule_check(&p, AH_SCHED_INTERLEAVED, 4, err, sizeof err), -1);
    assert_contains(err, "stage 0 holds 3 layers, fewer than the 4 virtual stages");
    free_plan(&p);
}

/* ---- every program set completes ---------------------------------------- */

/* Runs the programs (eval: the evaluation programs) of a replica as the engine
 * does: a receive blocks until its matching send has been posted, a send never
 * blocks. Returns the number of rounds, -1 on a deadlock. Checks that sends
 * and receives pair up. */
static int run_programs(const ah_schedule_plan *sp, int k, int eval) {
    int S = sp->first_stage[k + 1] - sp->first_stage[k];
    int *pc = calloc((size_t)S, sizeof(int));
    int posted[1 << 14] = {0}; /* tag -> sends posted (tags are small here) */
    int rounds = 0, done = 0;
    while (!done) {
        int moved = 0;
        done = 1;
        for (int j = 0; j < S; j++) {
            const ah_program *pg = eval ? ah_schedule_eval_program_of(sp, k, j) : ah_schedule_program_of(sp, k, j);
            while (pc[j] < pg->n_ops) {
                const ah_op *o = &pg->ops[pc[j]];
                if (o->kind == AH_OP_RECV_ACTIVATION || o->kind == AH_OP_RECV_GRADIENT) {
                    assert_true(o->tag >= 0 && o->tag < (1 << 14));
                    if (!posted[o->tag])
                        break;
                    posted[o->tag]--;
                } else if (o->kind == AH_OP_SEND_ACTIVATION || o->kind == AH_OP_SEND_GRADIENT) {
                    assert_true(o->peer_stage != j);
                    posted[o->tag]++;
                }
                pc[j]++;
                moved = 1;
            }
            done &= pc[j] == pg->n_ops;
        }
        rounds++;
        if (!done && !moved) {
            free(pc);
            return -1;
        }
    }
    for (int t = 0; t < (1 << 14); t++)
        assert_int_equal(posted[t], 0); /* every send received */
    free(pc);
    return rounds;
}

static void test_no_deadlock(void **state) {
    (void)state;
    int cases = 0;
    for (int sched = 0; sched < AH_SCHED_KINDS; sched++)
        for (int S = 2; S <= 6; S++)
            for (int V = 1; V <= 3; V++)
                for (int mult = 1; mult <= 3; mult++) {
                    if ((sched == AH_SCHED_INTERLEAVED) != (V > 1))
                        continue;
                    int m = S * mult, blocks = 3 * S * V, first[6];
                    for (int j = 0; j < S; j++)
                        first[j] = j * 3 * V;
                    const int *fp[1] = {first};
                    int st[1] = {S}, mb[1] = {m};
                    ah_plan p;
                    make_plan(&p, blocks, 1, st, mb, fp);
                    ah_schedule_options o = {.schedule = (ah_schedule)sched, .virtual_stages = V, .act_bytes = 1};
                    ah_schedule_plan sp;
                    char err[256];
                    if (ah_schedule_build(&p, &o, &sp, err, sizeof err) != 0)
                        fail_msg("%s", err);
                    if (run_programs(&sp, 0, 0) < 0)
                        fail_msg("%s S=%d V=%d m=%d deadlocks", ah_schedule_name(sched), S, V, m);
                    if (run_programs(&sp, 0, 1) < 0)
                        fail_msg("%s S=%d V=%d m=%d: its evaluation deadlocks", ah_schedule_name(sched), S, V, m);
                    /* every chunk runs one forward and one backward per micro-batch */
                    for (int j = 0; j < S; j++) {
                        const ah_program *pg = ah_schedule_program_of(&sp, 0, j);
                        int fb = 0;
                        for (int i = 0; i < pg->n_ops; i++)
                            fb += pg->ops[i].kind == AH_OP_FORWARD || pg->ops[i].kind == AH_OP_BACKWARD;
                        assert_int_equal(fb, 2 * m * V);
                        /* the evaluation: one forward per chunk and micro-batch, no backward, its tags
                         * after the step's, one loss reduction at the end */
                        int max_tag = -1;
                        for (int i = 0; i < pg->n_ops; i++)
                            max_tag = pg->ops[i].tag > max_tag ? pg->ops[i].tag : max_tag;
                        const ah_program *ev = ah_schedule_eval_program_of(&sp, 0, j);
                        int fwd = 0, bwd = 0;
                        for (int i = 0; i < ev->n_ops; i++) {
                            fwd += ev->ops[i].kind == AH_OP_FORWARD;
                            bwd += ev->ops[i].kind == AH_OP_BACKWARD;
                            if (ev->ops[i].tag >= 0)
                                assert_true(ev->ops[i].tag > 2 * S * V * m);
                        }
                        assert_int_equal(fwd, m * V);
                        assert_int_equal(bwd, 0);
                        assert_true(max_tag < 2 * S * V * m);
                        assert_int_equal(ev->ops[ev->n_ops - 1].kind, AH_OP_STEP_SYNC);
                    }
                    ah_schedule_plan_free(&sp);
                    free_plan(&p);
                    cases++;
                }
    assert_true(cases > 40);
}

/* Rule 1 of per-stage TP: between degrees a -> b every receiving rank has
 * exactly one sender, and a sender's targets are exactly the ranks taking from
 * it; rule 2: a rank of degree t owns T/t consecutive slices of T. */
static void test_tp_peers_and_slices(void **state) {
    (void)state;
    for (int a = 1; a <= 8; a *= 2)
        for (int b = 1; b <= 8; b *= 2) {
            int got[8] = {0};
            for (int s = 0; s < a; s++) {
                int q[AH_MAX_TP], n = ah_tp_targets(s, a, b, q);
                assert_int_equal(n, s < b ? (b - s + a - 1) / a : 0);
                for (int i = 0; i < n; i++) {
                    assert_int_equal(ah_tp_source(q[i], a), s);
                    got[q[i]]++;
                }
            }
            for (int q = 0; q < b; q++)
                assert_int_equal(got[q], 1);
        }
    for (int T = 1; T <= 8; T *= 2)
        for (int t = 1; t <= T; t *= 2)
            for (int s = 0; s < T; s++) {
                int q = ah_tp_slice_owner(s, T, t);
                assert_true(q >= 0 && q < t && q * (T / t) <= s && s < (q + 1) * (T / t));
            }
}

/* Byte counts come at TP 1; the builder divides them by the stages' degrees:
 * sends by min(a, b) and the tied exchange by the stage's degree with
 * split_by_tp (whole without it, as the CPU engine sends), a bucket's
 * all-reduce by its holder's degree always. */
static void test_bytes_per_degree(void **state) {
    (void)state;
    ah_plan p;
    int st[2] = {2, 1}, mb[2] = {2, 2}, f0[2] = {0, 5}, f1[1] = {0};
    const int *first[2] = {f0, f1};
    make_plan(&p, 8, 2, st, mb, first);
    p.replicas[0].stages[0].tp = 2;
    p.replicas[0].stages[1].tp = 4;
    p.replicas[1].stages[0].tp = 2;
    double grad[10];
    for (int l = 0; l < 10; l++)
        grad[l] = 64.0 * (l + 1);
    for (int split = 0; split < 2; split++) {
        ah_schedule_options o = {.schedule = AH_SCHED_1F1B, .act_bytes = 64, .grad_bytes = grad,
                                 .tied_bytes = 32, .split_by_tp = split};
        ah_schedule_plan sp;
        char err[256];
        assert_int_equal(ah_schedule_build(&p, &o, &sp, err, sizeof err), 0);
        assert_int_equal(sp.n_buckets, 2);
        assert_double_equal(sp.buckets[0].bytes, 64.0 * (1 + 2 + 3 + 4 + 5), 0); /* at TP 1 */
        int sends = 0, dp = 0, tied = 0;
        for (int i = 0; i < sp.n_programs; i++) {
            const ah_program *pg = &sp.programs[i];
            int t = p.replicas[pg->replica].stages[pg->stage].tp;
            for (int n = 0; n < pg->n_ops; n++) {
                const ah_op *op = &pg->ops[n];
                switch (op->kind) {
                case AH_OP_SEND_ACTIVATION:
                case AH_OP_RECV_ACTIVATION:
                case AH_OP_SEND_GRADIENT:
                case AH_OP_RECV_GRADIENT:
                    assert_double_equal(op->bytes, split ? 64.0 / 2 : 64.0, 0); /* min(2, 4) */
                    sends++;
                    break;
                case AH_OP_DP_ALLREDUCE:
                    assert_double_equal(op->bytes, sp.buckets[op->bucket].bytes / t, 0);
                    dp++;
                    break;
                case AH_OP_TIED_SYNC:
                    assert_double_equal(op->bytes, pg->replica == 1 ? 0 : split ? 32.0 / t : 32.0, 0);
                    tied++;
                    break;
                default: break;
                }
            }
        }
        assert_int_equal(sends, 4 * 2); /* replica 0: act and grad of 2 micro-batches, both ends */
        assert_int_equal(dp, 2 + 2);    /* each bucket on its two holders */
        assert_int_equal(tied, 3);      /* both ends of replica 0, the one stage of replica 1 */
        ah_schedule_plan_free(&sp);
    }
    free_plan(&p);
}

/* --overlap-dp (ah_schedule_options.overlap_dp): on asymmetric replicas (buckets inside chunks) with a tied
 * embedding, under 1F1B and interleaved: each chunk's last backward is cut at its buckets, top first, the
 * pieces covering its layers once; each bucket's all-reduce follows the piece ending at its first layer,
 * non-blocking, once per holder; dp_wait completes them before the tied exchange, the step sync and the
 * optimizer; the programs still run to completion. Without it: no piece, no non-blocking op, no dp_wait,
 * and the tied exchange before the all-reduces. */
static void test_overlap_dp(void **state) {
    (void)state;
    ah_plan p;
    int st[3] = {2, 3, 2}, mb[3] = {4, 6, 2}, f0[2] = {0, 4}, f1[3] = {0, 3, 6}, f2[2] = {0, 5};
    const int *first[3] = {f0, f1, f2};
    make_plan(&p, 8, 3, st, mb, first); /* 10 layers: buckets [0,3) [3,4) [4,5) [5,6) [6,10) */
    double grad[10];
    for (int l = 0; l < 10; l++)
        grad[l] = 8.0 * (l + 1);
    for (int sched = 0; sched < 2; sched++)
        for (int overlap = 0; overlap < 2; overlap++) {
            ah_schedule_options o = {.schedule = sched ? AH_SCHED_INTERLEAVED : AH_SCHED_1F1B, .act_bytes = 8,
                                     .grad_bytes = grad, .tied_bytes = 16, .overlap_dp = overlap};
            ah_schedule_plan sp;
            char err[256];
            /* interleaved: micro-batches a multiple of the stages, >= 2 layers per stage */
            assert_int_equal(ah_schedule_check(&p, o.schedule, sched ? 2 : 1, err, sizeof err), 0);
            assert_int_equal(ah_schedule_build(&p, &o, &sp, err, sizeof err), 0);
            assert_int_equal(sp.overlap_dp, overlap);
            assert_true(sp.n_buckets >= 4);
            for (int k = 0; k < p.n_replicas; k++) {
                assert_true(run_programs(&sp, k, 0) > 0);
                for (int j = 0; j < p.replicas[k].n_stages; j++) {
                    const ah_program *pg = ah_schedule_program_of(&sp, k, j);
                    int started = 0, blocking = 0, pieces = 0, wait_at = -1, tied_at = -1, first_dp = -1;
                    int *covered = calloc(10 * (size_t)p.replicas[k].micro_batches * sp.V, sizeof(int));
                    for (int i = 0; i < pg->n_ops; i++) {
                        const ah_op *op = &pg->ops[i];
                        if (op->kind == AH_OP_BACKWARD) {
                            for (int l = op->first; l < op->last; l++)
                                covered[(op->chunk * p.replicas[k].micro_batches + op->mb) * 10 + l]++;
                            const ah_chunk *ch = &sp.chunks[k][op->chunk * p.replicas[k].n_stages + j];
                            pieces += op->first != ch->first || op->last != ch->last;
                        } else if (op->kind == AH_OP_DP_ALLREDUCE) {
                            const ah_bucket *b = &sp.buckets[op->bucket];
                            assert_int_equal(b->holder[k], j);
                            first_dp = first_dp < 0 ? i : first_dp;
                            if (op->nonblocking) { /* right after the backward piece of its layers */
                                started++;
                                assert_int_equal(pg->ops[i - 1].kind, AH_OP_BACKWARD);
                                assert_int_equal(pg->ops[i - 1].first, b->first);
                                assert_int_equal(pg->ops[i - 1].last, b->last);
                            } else {
                                blocking++;
                            }
                        } else if (op->kind == AH_OP_DP_WAIT) {
                            wait_at = i;
                        } else if (op->kind == AH_OP_TIED_SYNC) {
                            tied_at = i;
                        }
                    }
                    int held = 0;
                    for (int q = 0; q < sp.n_buckets; q++)
                        held += sp.buckets[q].holder[k] == j;
                    /* every bucket once on each holder, started early iff overlap_dp */
                    assert_int_equal(started + blocking, held);
                    assert_int_equal(started, overlap ? held : 0);
                    if (!overlap)
                        assert_int_equal(pieces, 0);
                    /* the backward of every (chunk, micro-batch) covers each of its layers once */
                    for (int i = 0; i < 10 * p.replicas[k].micro_batches * sp.V; i++)
                        assert_true(covered[i] <= 1);
                    free(covered);
                    /* the tail: dp_wait (overlap) before the tied exchange; without it the tied exchange
                     * comes before the all-reduces; step sync and optimizer last */
                    if (overlap && held)
                        assert_true(wait_at >= 0 && (tied_at < 0 || tied_at > wait_at));
                    if (!overlap) {
                        assert_int_equal(wait_at, -1);
                        if (tied_at >= 0 && held)
                            assert_true(tied_at < first_dp);
                    }
                    assert_int_equal(pg->ops[pg->n_ops - 2].kind, AH_OP_STEP_SYNC);
                    assert_int_equal(pg->ops[pg->n_ops - 1].kind, AH_OP_OPTIMIZER);
                }
            }
            ah_schedule_plan_free(&sp);
        }
    free_plan(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlap_dp),
        cmocka_unit_test(test_tp_peers_and_slices),
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_chunks_and_buckets),
        cmocka_unit_test(test_bytes_per_degree),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_no_deadlock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
