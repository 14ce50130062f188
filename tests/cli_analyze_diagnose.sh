#!/usr/bin/env bash
# analyze --diagnose and --comm-profile-out on a hand-made trace (docs/analyze.md, "Diagnosis", "Closing the
# loop"): three ranks on hosts ha, hb, hc exchange messages of 256 KiB, 1 MiB and 4 MiB over every pair; the
# pair ha-hb moves them at 0.125 GB/s after 500 us, the others at 5 GB/s after 20 us (the figures of
# tests/cli_plan_links.sh). The diagnosis names the link 0-1 (ha-hb) as its top finding; the comm profile it
# writes has that pair's alpha-beta within 2% and the others', and `autohet plan --comm-profile` reading it
# moves a 2-stage GPT-3 1.3B pipeline off n0 -> n1 (ha-hb), while the profile of a trace where every pair is
# fast keeps it there. Bad input: one line on stderr, exit 2.
. "$(dirname "$0")/common.sh"

trace() { # out slow(0|1): the trace of 3 ranks, every pair, three sizes, 4 rounds
  local out="$1" slow="$2" t=0 id=0 first=1
  {
    echo '{"traceEvents": ['
    for r in 0 1 2; do
      h=$(echo "ha hb hc" | cut -d' ' -f$((r + 1)))
      printf '%s{"ph":"M","name":"process_name","pid":%d,"tid":0,"args":{"name":"rank %d (replica 0, stage %d, tp 0) on %s (cpu)"}}' \
        "$([ $first = 1 ] || echo ,)" "$r" "$r" "$r" "$h"
      first=0
    done
    for round in 0 1 2 3; do
      for pair in "0 1" "0 2" "1 2"; do
        set -- $pair
        for bytes in 262144 1048576 4194304; do
          if [ "$slow" = 1 ] && [ "$pair" = "0 1" ]; then a=500 bw=0.125; else a=20 bw=5; fi
          dur=$(awk -v a=$a -v b=$bytes -v bw=$bw 'BEGIN { printf "%.3f", a + b / (bw * 1e3) }')
          for dir in 0 1; do
            if [ $dir = 0 ]; then s=$1 d=$2; else s=$2 d=$1; fi
            printf ',\n{"ph":"X","pid":%d,"tid":2,"ts":%s,"dur":3,"cat":"communication","name":"send_activation","args":{"kind":"send_activation","site":"send_activation","bytes":%d,"ranks":2,"group":%d,"peer":%d,"seq":%d}}' \
              "$s" "$t" "$bytes" "$1" "$d" "$id"
            printf ',\n{"ph":"X","pid":%d,"tid":2,"ts":%s,"dur":%s,"cat":"communication","name":"recv_activation","args":{"kind":"recv_activation","site":"recv_activation","bytes":%d,"ranks":2,"group":%d,"peer":%d,"seq":%d}}' \
              "$d" "$t" "$dur" "$bytes" "$1" "$s" "$id"
            t=$(awk -v t=$t -v d=$dur 'BEGIN { printf "%.3f", t + d + 10 }')
            id=$((id + 1))
          done
        done
      done
      for r in 0 1 2; do # a step ends on every rank
        printf ',\n{"ph":"X","pid":%d,"tid":0,"ts":%s,"dur":100,"cat":"compute","name":"optimizer","args":{"kind":"optimizer"}}' "$r" "$t"
      done
      t=$(awk -v t=$t 'BEGIN { printf "%.3f", t + 110 }')
    done
    echo '], "otherData": {"format": "autohet-trace", "version": 2, "source": "engine"}}'
  } >"$out"
}
trace "$TMP/slow.json" 1
trace "$TMP/even.json" 0

"$BIN" analyze "$TMP/slow.json" --diagnose --top 0 --json "$TMP/a.json" --comm-profile-out "$TMP/cp-slow.json" \
  >"$TMP/a.out" 2>&1 || { cat "$TMP/a.out"; fail "analyze --diagnose --comm-profile-out"; }
jq -e '[.findings[] | select(.significant)][0] | .kind == "slow_link" and .link == [0, 1] and .ranks == [0, 1]
       and .cost_s > 0 and .measured > 10 * .expected' "$TMP/a.json" >/dev/null \
  || fail "the top finding is not the slow link 0-1: $(jq -c '.findings[0]' "$TMP/a.json")"
jq -e '.findings | all(has("kind") and has("ranks") and has("link") and has("op") and has("steps") and has("cost_s")
       and has("share") and has("measured") and has("expected") and has("evidence"))' "$TMP/a.json" >/dev/null \
  || fail "a diagnosis entry lacks a field"
jq -e 'has("ranks") and has("sites") and has("clock") and has("causality")' "$TMP/a.json" >/dev/null \
  || fail "the existing --json fields are gone"
grep -q "slow_link .*link 0-1 (ha-hb)" "$TMP/a.out" || fail "the table does not name link 0-1 (ha-hb): $(cat "$TMP/a.out")"
# the written profile: ha-hb at 0.125 GB/s and 500 us, the others at 5 GB/s and 20 us (within 2%)
near() { awk -v x="$1" -v w="$2" 'BEGIN { exit !(x > w * 0.98 && x < w * 1.02) }'; }
m() { jq ".links.$1[$2][$3]" "$TMP/cp-slow.json"; }
near "$(m bandwidth_GBps 0 1)" 0.125 && near "$(m latency_us 0 1)" 500 && near "$(m bandwidth_GBps 1 0)" 0.125 \
  || fail "ha-hb in the profile: $(m bandwidth_GBps 0 1) GB/s, $(m latency_us 0 1) us; want 0.125, 500"
near "$(m bandwidth_GBps 0 2)" 5 && near "$(m latency_us 1 2)" 20 \
  || fail "the free pairs in the profile: $(m bandwidth_GBps 0 2) GB/s, $(m latency_us 1 2) us; want 5, 20"
[ "$(jq -c .links.hosts "$TMP/cp-slow.json")" = '["ha","hb","hc"]' ] || fail "hosts: $(jq -c .links.hosts "$TMP/cp-slow.json")"
jq -e '[.fits[] | select(.pair == null)] | map(.op) == ["latency", "bw"]' "$TMP/cp-slow.json" >/dev/null \
  || fail "the class fits: $(jq -c '[.fits[] | {op, link_class, pair}]' "$TMP/cp-slow.json")"
"$BIN" analyze "$TMP/even.json" --top 0 --comm-profile-out "$TMP/cp-even.json" >/dev/null 2>&1 || fail "analyze even"

# the planner reads it: a 2-stage pipeline on n0 (ha) -> n1 (hb) moves off the slow pair
cat >"$TMP/inv.json" <<'EOF'
{"nodes": [{"name": "n0", "gpu": "A100-40G", "gpus": 1, "host": "ha"},
           {"name": "n1", "gpu": "A100-40G", "gpus": 1, "host": "hb"},
           {"name": "n2", "gpu": "A100-40G", "gpus": 1, "host": "hc"}]}
EOF
for p in even slow; do
  "$BIN" plan --model gpt3-1.3b --cluster "$TMP/inv.json" --global-batch 16 --pp 2 --dp 1 --quiet \
    --comm-profile "$TMP/cp-$p.json" --json "$TMP/plan-$p.json" >"$TMP/plan-$p.out" 2>&1 \
    || { cat "$TMP/plan-$p.out"; fail "plan --comm-profile cp-$p.json"; }
done
nodes() { jq -c '[.replicas[].stages[].node_index]' "$1"; }
[ "$(nodes "$TMP/plan-even.json")" = "[0,1]" ] || fail "with every pair fast the plan is not n0 -> n1: $(nodes "$TMP/plan-even.json")"
jq -e '[.replicas[].stages[].node_index] | sort != [0, 1]' "$TMP/plan-slow.json" >/dev/null \
  || fail "with ha-hb slow in the run's profile the planner kept the pipeline on n0 -> n1"
echo "plans: every pair fast $(nodes "$TMP/plan-even.json"), ha-hb slow as the run saw it $(nodes "$TMP/plan-slow.json")"

# bad input: one line on stderr, exit 2
bad() { # want args...
  local want="$1"
  shift
  "$BIN" analyze "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"
  local rc=$? err
  err=$(cat "$TMP/bad.err")
  [ $rc = 2 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] && [[ "$err" == *"$want"* ]] \
    || fail "analyze $*: exit $rc and '$err', want exit 2 and one line with '$want'"
}
bad "cannot open file" "$TMP/slow.json" --diagnose --plan "$TMP/missing-plan.json"
bad "--plan needs --diagnose or --comm-profile-out" "$TMP/slow.json" --plan "$PLANS/tiny-2x2.json"
bad "the plan runs 4 rank(s), the trace has 3" "$TMP/slow.json" --diagnose --plan "$PLANS/tiny-2x2.json"
# a plan of GPU types the built-in catalog does not know reads with --devices (then its 4 ranks meet the
# trace's 3), and --devices needs a --plan
jq '.cluster.nodes[].gpu_type = "emu-fast"' "$PLANS/tiny-2x2.json" >"$TMP/emu-plan.json"
bad 'unknown GPU type "emu-fast"' "$TMP/slow.json" --diagnose --plan "$TMP/emu-plan.json"
bad "the plan runs 4 rank(s), the trace has 3" "$TMP/slow.json" --diagnose --plan "$TMP/emu-plan.json" \
  --devices "$FIX/emu-devices.json"
bad "--devices is for a --plan's GPU types" "$TMP/slow.json" --diagnose --devices "$FIX/emu-devices.json"
bad "--comm-profile-out" "$TMP/slow.json" --comm-profile-out "$TMP/no/such/dir/cp.json"
bad "unknown or incomplete option '--diagnose-now'" "$TMP/slow.json" --diagnose-now
bad "unknown or incomplete option '--comm-profile-out'" "$TMP/slow.json" --comm-profile-out
[ $fails = 0 ] && echo "cli_analyze_diagnose: all passed"
exit $((fails > 0))
