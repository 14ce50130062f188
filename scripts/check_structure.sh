#!/usr/bin/env bash
# Structure rules of src/ (docs/architecture.md): no function over 150 lines,
# no include from the engine into the simulator or the planner's internals,
# none from the simulator into elastic/, no include cycles between folders.
# Prints every violation; exit 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-150}
bad=0
# function bodies: clang-format puts a definition's opening line and its
# closing brace in column 0
while IFS= read -r line; do
  echo "function too long: $line"; bad=1
done < <(awk -v lim="$limit" '
  FNR == 1 { start = 0 }
  /^[a-zA-Z_].*\(.*/ && !/;[ \t]*$/ && start == 0 { start = FNR; name = $0 }
  /^}/ && start > 0 { n = FNR - start + 1; if (n > lim) printf "%s:%d %d lines: %s\n", FILENAME, start, n, name; start = 0 }
  /;[ \t]*$/ && start == FNR { start = 0 }
' $(find src -name '*.c'))
rule() { # folder, forbidden include pattern, why
  local hits
  hits=$(grep -rnE "#include \"($2)" "src/$1" || true)
  if [ -n "$hits" ]; then echo "$hits" | sed "s|^|forbidden include ($3): |"; bad=1; fi
}
rule engine 'autohet/sim\.h|sim/|plan/(search|costs)' 'the engine must not depend on the simulator or planner internals'
rule sim 'elastic/|autohet/elastic\.h' 'the simulator must not depend on elastic/'
# folder dependency graph from includes of src/<dir>/ headers and autohet/<dir>.h
python3 - <<'PY' || bad=1
import os, re, sys
deps = {}
for d in sorted(os.listdir("src")):
    if not os.path.isdir(os.path.join("src", d)): continue
    for root, _, files in os.walk(os.path.join("src", d)):
        for f in files:
            for m in re.finditer(r'#include "([a-z_]+)/', open(os.path.join(root, f)).read()):
                t = m.group(1)
                if t not in ("autohet", d) and os.path.isdir(os.path.join("src", t)):
                    deps.setdefault(d, set()).add(t)
seen, stack, cyc = set(), [], []
def dfs(u):
    if u in stack:
        cyc.append(stack[stack.index(u):] + [u]); return
    if u in seen: return
    seen.add(u); stack.append(u)
    for v in sorted(deps.get(u, ())): dfs(v)
    stack.pop()
for u in sorted(deps): dfs(u)
for c in cyc: print("include cycle between folders: " + " -> ".join(c))
sys.exit(1 if cyc else 0)
PY
exit $bad
