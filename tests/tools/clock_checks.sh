#!/usr/bin/env bash
# Sourced by tests/cli_trace_clock*.sh after common.sh: clock_checks TRACE LABEL MAX_RESIDUAL_S checks that an
# engine trace records a clock correction for every rank with a residual in (0, MAX_RESIDUAL_S], and that it
# is causally ordered as analyze reports it (table and JSON), as jq finds it in the Chrome trace itself, and
# as otf2-print shows the OTF2 archive analyze --otf2 writes (ClockProperties, two ClockOffset definitions per
# location, receives after their sends, no collective member leaving before the last one entered).
CLOCK_TOOLS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

clock_checks() {
  local t="$1" label="$2" max="$3" d="$TMP/clk-$RANDOM" n
  mkdir -p "$d"
  "$BIN" analyze "$t" --top 0 --json "$d/a.json" --otf2 "$d/otf" >"$d/a.out" 2>&1 \
    || { cat "$d/a.out"; fail "$label: analyze --json --otf2"; return; }
  n=$(jq '[.traceEvents[] | select(.ph == "X") | .pid] | max + 1' "$t")
  jq -e --argjson n "$n" --argjson max "$max" '.clock.corrected and (.clock.ranks | length) == $n
       and .clock.max_residual_s > 0 and .clock.max_residual_s <= $max
       and all(.clock.ranks[1:][]; .residual_s > 0 and .rtt_s > 0)
       and .causality.receives > 0 and .causality.receives_before_send == 0
       and .causality.collective_instances > 0 and .causality.collective_order_violations == 0
       and .causality.flows > 0 and .causality.flows_backward == 0' "$d/a.json" >/dev/null \
    || fail "$label: clock / causality: $(jq -c '{clock: .clock.max_residual_s, causality}' "$d/a.json")"
  grep -q "on the synced clock:   receives before their send 0 of" "$d/a.out" && grep -q "residual us" "$d/a.out" \
    || fail "$label: analyze prints no clock table or causality line"
  # the Chrome trace itself: every flow forward; every collective instance (site, group, seq on > 1 rank)
  # with no member leaving before the last entered; every receive ending after its send started
  jq -e '[.traceEvents[] | select(.ph == "s" or .ph == "f")] | group_by(.id)
         | length > 0 and all(.[]; length == 2 and (map(select(.ph == "f"))[0].ts >= map(select(.ph == "s"))[0].ts))' \
    "$t" >/dev/null || fail "$label: a flow arrow points backwards in the Chrome trace"
  jq -e '[.traceEvents[] | select(.ph == "X" and (.args.kind | test("^(tp_allreduce|dp_allreduce|step_sync)$")))]
         | group_by([.args.site, .args.group, .args.seq]) | map(select(length > 1))
         | length > 0 and all(.[]; (map(.ts + .dur) | min) >= (map(.ts) | max))' "$t" >/dev/null \
    || fail "$label: a collective member leaves before the last one entered (Chrome trace)"
  jq -e '[.traceEvents[] | select(.ph == "X" and (.args.kind | test("^send_(activation|gradient)$")))
          | {k: [.pid, .args.peer, (.args.kind | test("gradient")), .args.seq], t: .ts}] as $s
         | [.traceEvents[] | select(.ph == "X" and (.args.kind | test("^recv_(activation|gradient)$")))
          | {k: [.args.peer, .pid, (.args.kind | test("gradient")), .args.seq], t: (.ts + .dur)}] as $r
         | ($s | map({key: (.k | tostring), value: .t}) | from_entries) as $m
         | ($r | length) > 0 and all($r[]; $m[.k | tostring] != null and .t >= $m[.k | tostring])' "$t" >/dev/null \
    || fail "$label: a receive ends before its send started (Chrome trace)"
  if ! grep -q "built without OTF2" "$d/a.out" && command -v otf2-print >/dev/null; then
    otf2-print -G "$d/otf/trace.otf2" >"$d/g.txt" && otf2-print "$d/otf/trace.otf2" >"$d/e.txt" \
      && otf2-print -C "$d/otf/trace.otf2" >"$d/c.txt" || fail "$label: otf2-print cannot read the archive"
    grep -q '^CLOCK_PROPERTIES .*Ticks per Seconds: 1000000000' "$d/g.txt" || fail "$label: OTF2: no ClockProperties"
    [ "$(grep -c '^CLOCK_OFFSET ' "$d/c.txt")" -eq $((2 * $(grep -c '^LOCATION ' "$d/g.txt"))) ] \
      || fail "$label: OTF2: expected two ClockOffset definitions per location"
    local o
    o=$(python3 "$CLOCK_TOOLS/otf2_causality.py" "$d/g.txt" "$d/e.txt") || fail "$label: otf2_causality.py"
    [[ "$o" =~ ^receives\ [1-9][0-9]*\ before_send\ 0\ collectives\ [1-9][0-9]*\ out_of_order\ 0$ ]] \
      || fail "$label: OTF2 as otf2-print shows it: $o"
    echo "$label: OTF2 (otf2-print): $o"
  fi
  sed -n '/^clocks:/,/on each rank/p' "$d/a.out"
  echo "$label: residual max $(jq '.clock.max_residual_s * 1e6' "$d/a.json") us;" \
    "$(jq -c '.causality | del(.uncorrected)' "$d/a.json"); on each rank's own clock: $(jq -c '.causality.uncorrected' "$d/a.json")"
}
