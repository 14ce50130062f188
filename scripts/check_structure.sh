#!/usr/bin/env bash
# Structure rules of src/ (docs/architecture.md): no function over 150 lines,
# no include from the engine into the simulator or the planner's internals,
# none from the simulator into elastic/, the CLI through public headers only,
# the engine's one internal-name rule (ah_ public, ah__ internal),
# no include cycles between folders (public headers counted: each belongs to
# the folder that implements it).
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
# src/cli/ is flag parsing and printing over the public interface: it includes
# the public headers (include/autohet/*.h), its own (cli/) and the base kit
# every folder shares (util/), nothing of another folder's internals
hits=$(grep -rnE '#include "[a-z_]+/' src/cli | grep -vE '#include "(autohet|cli|util)/' || true)
if [ -n "$hits" ]; then
  echo "$hits" | sed 's|^|forbidden include (the CLI includes only public headers, its own and util/): |'; bad=1
fi
# One internal-name rule for the engine (libuv's uv__): a function of
# src/engine/ is public (ah_, declared in include/autohet/*.h), file-local
# (static), or shared between the engine's files under ah__ (declared in a
# header of src/engine/)
python3 - <<'PY' || bad=1
import glob, re, sys
# comments blanked, their newlines kept (line numbers stay right)
strip = lambda t: re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), t, flags=re.S))
fn = re.compile(r"^(?!static\b)[A-Za-z_][^;{}()#=]*?\b(ah_[A-Za-z0-9][A-Za-z0-9_]*)\s*\(", re.M)
public = set()
for h in glob.glob("include/autohet/*.h"):
    public |= set(re.findall(r"\b(ah_[A-Za-z0-9_]+)\s*\(", strip(open(h).read())))
bad = 0
for f in sorted(glob.glob("src/engine/**/*", recursive=True)):
    if not re.search(r"\.(c|h|cu|cuh)$", f): continue
    text = strip(open(f).read())
    header = not f.endswith((".c", ".cu"))
    for m in (re.finditer(r"\b(ah_[A-Za-z0-9][A-Za-z0-9_]*)\s*\(", text) if header else fn.finditer(text)):
        name = m.group(1)
        if header and not re.match(r"^[A-Za-z_][^;{}()#=]*?\b" + name + r"\s*\(", text[text.rfind("\n", 0, m.start()) + 1:], re.M):
            continue  # a use inside a header's inline function, not a declaration
        if name not in public:
            line = text.count("\n", 0, m.start()) + 1
            print(f"engine name rule: {f}:{line}: {name} is not in a public header: name it ah__{name[3:]} (internal) or declare it in include/autohet/engine.h")
            bad = 1
sys.exit(bad)
PY
# Folder dependency graph: an include of src/<dir>/ headers is an edge to
# <dir>; an include of a public header include/autohet/X.h is an edge to the
# folder that owns X.h (the folder defining most of the functions it
# declares), and X.h's own includes of public headers are edges of its owner.
python3 - <<'PY' || bad=1
import glob, os, re, sys
folders = sorted(d for d in os.listdir("src") if os.path.isdir(os.path.join("src", d)))
inc = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([A-Za-z0-9_]+\.h)"', re.M)
defn = re.compile(r'^[A-Za-z_][^;{}()#]*?\b(ah_[A-Za-z0-9_]+)\s*\(', re.M)
defined = {}  # function -> folders defining it
for d in folders:
    for f in glob.glob(f"src/{d}/**/*.c", recursive=True) + glob.glob(f"src/{d}/**/*.cu", recursive=True):
        for m in defn.finditer(open(f).read()):
            defined.setdefault(m.group(1), set()).add(d)
owner, bad = {}, 0
for h in sorted(glob.glob("include/autohet/*.h")):
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", open(h).read(), flags=re.S)
    votes = {}
    for name in set(re.findall(r"\b(ah_[A-Za-z0-9_]+)\s*\(", text)):
        for d in defined.get(name, ()):
            votes[d] = votes.get(d, 0) + 1
    if not votes:
        print(f"public header {h}: no folder of src/ defines a function it declares (its owner is unknown)")
        bad = 1
        continue
    owner[os.path.basename(h)] = max(sorted(votes), key=lambda d: votes[d])
deps, why = {}, {}
def edge(a, b, where):
    if a != b and b is not None:
        deps.setdefault(a, set()).add(b)
        why.setdefault((a, b), where)
def target(top, hdr):
    if top == "autohet":
        return owner.get(hdr)
    return top if top in folders else None
for d in folders:
    for root, _, files in os.walk(os.path.join("src", d)):
        for f in files:
            path = os.path.join(root, f)
            for m in inc.finditer(open(path).read()):
                edge(d, target(m.group(1), m.group(2)), f"{path} includes {m.group(1)}/{m.group(2)}")
for h, d in owner.items():
    for m in inc.finditer(open(os.path.join("include/autohet", h)).read()):
        edge(d, target(m.group(1), m.group(2)), f"include/autohet/{h} includes {m.group(1)}/{m.group(2)}")
seen, stack, cyc = set(), [], []
def dfs(u):
    if u in stack:
        cyc.append(stack[stack.index(u):] + [u]); return
    if u in seen: return
    seen.add(u); stack.append(u)
    for v in sorted(deps.get(u, ())): dfs(v)
    stack.pop()
for u in sorted(deps): dfs(u)
for c in cyc:
    print("include cycle between folders: " + " -> ".join(c))
    for a, b in zip(c, c[1:]):
        print(f"  {a} -> {b}: {why[(a, b)]}")
if os.environ.get("AUTOHET_STRUCTURE_VERBOSE"):
    for h in sorted(owner): print(f"owner: include/autohet/{h} -> src/{owner[h]}/")
    for a in sorted(deps): print(f"folder: {a} -> {' '.join(sorted(deps[a]))}")
sys.exit(1 if cyc or bad else 0)
PY
exit $bad
