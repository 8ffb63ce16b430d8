#!/usr/bin/env bash
# house_metrics.sh: a markdown report of the tree's shape, for the house (layout) issues.
#
# Usage: tools/house_metrics.sh [TREE] > report.md    (TREE defaults to the repo root above this script)
#
# Over the non-test C++ files (*.cc *.h *.cu *.cuh, leaving out *_test.cc, tests/, third_party/,
# bazel-*/) it measures:
#   1. lines and files per top-level folder (test lines beside them, for scale);
#   2. the 15 largest files and how many exceed 600 lines;
#   3. the 15 longest function bodies (opening brace to matching closing brace, found by a
#      heuristic brace matcher that skips comments, strings and the preprocessor; only
#      definitions at namespace/class scope, no lambdas) and how many exceed 100 lines;
#   4. quoted includes of a repo header from another directory (Bazel package), per
#      top-level pair, and the includes of launch/ headers from outside launch/;
#   5. include cycles inside one directory (a .cc and its .h are one node, named by stem):
#      every strongly connected component of more than one node;
#   6. the summary line of `duplicates --repo TREE` (all source and BUILD files it reads).
# Needs bash and python3 (standard library only); reads files, writes nothing.
set -euo pipefail
ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
ROOT="$(cd "$ROOT" && pwd)"

python3 - "$ROOT" <<'PY'
import os, re, sys
from collections import Counter, defaultdict

root = sys.argv[1]
EXTS = ('.cc', '.h', '.cu', '.cuh')
files = {}          # relative path -> text
for d, dirs, names in os.walk(root):
    rel_d = os.path.relpath(d, root)
    dirs[:] = sorted(x for x in dirs if not x.startswith(('bazel-', '.'))
                     and not (rel_d == '.' and x == 'third_party'))
    for n in sorted(names):
        if n.endswith(EXTS) and not os.path.islink(os.path.join(d, n)):
            rel = os.path.normpath(os.path.join(rel_d, n))
            with open(os.path.join(d, n), encoding='utf-8', errors='replace') as f:
                files[rel] = f.read()

def is_test(p): return p.endswith('_test.cc') or p.split('/')[0] == 'tests'
def top(p): return p.split('/')[0] if '/' in p else '(root)'
def nlines(t): return len(t.splitlines())
src = {p: t for p, t in files.items() if not is_test(p)}
print(f'# House metrics: {root}\n')
print(f'{len(src)} non-test C++ files, {sum(nlines(t) for t in src.values())} lines '
      f'({len(files) - len(src)} test files, {sum(nlines(t) for p, t in files.items() if is_test(p))} lines).\n')

# 1. Lines per top-level folder.
print('## 1. Lines per top-level folder (non-test)\n')
print('| folder | files | lines | test files | test lines |\n| --- | ---: | ---: | ---: | ---: |')
agg = defaultdict(lambda: [0, 0, 0, 0])
for p, t in files.items():
    a = agg[top(p)]
    k = 2 if is_test(p) else 0
    a[k] += 1; a[k + 1] += nlines(t)
for f, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f'| {f}/ | {a[0]} | {a[1]} | {a[2]} | {a[3]} |')

# 2. Largest files.
sizes = sorted(((nlines(t), p) for p, t in src.items()), key=lambda x: (-x[0], x[1]))
print(f'\n## 2. Largest files: {sum(1 for n, _ in sizes if n > 600)} over 600 lines\n')
print('| file | lines |\n| --- | ---: |')
for n, p in sizes[:15]: print(f'| {p} | {n} |')

# 3. Longest functions.
def blank(text):
    """Comments, string/char literals and preprocessor lines turned to spaces (newlines kept)."""
    out, i, n, bol = list(text), 0, len(text), True
    def wipe(a, b):
        for k in range(a, b):
            if out[k] != '\n': out[k] = ' '
    while i < n:
        c = text[i]
        if bol and c == '#' :                       # preprocessor line, with continuations
            j = i
            while j < n and not (text[j] == '\n' and text[j - 1] != '\\'): j += 1
            wipe(i, j); i = j; continue
        if c == '\n': bol = True; i += 1; continue
        if c in ' \t': i += 1; continue
        bol = False
        if text.startswith('//', i):
            j = text.find('\n', i); j = n if j < 0 else j; wipe(i, j); i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2); j = n if j < 0 else j + 2; wipe(i, j); i = j
        elif c == '"' and re.search(r'(?<!\w)(?:u8|u|U|L)?R$', text[max(0, i - 3):i]):
            m = re.match(r'"([^(\s]*)\(', text[i:])       # raw string R"delim(...)delim"
            j = text.find(')' + m.group(1) + '"', i) if m else -1
            j = n if j < 0 else j + len(m.group(1)) + 2
            wipe(i + 1, j - 1); i = j
        elif c in '"\'':
            if c == "'" and re.search(r"(?<![\w.])\d[\w.']*$", text[max(0, i - 40):i]):
                i += 1; continue                   # digit separator: 1'000
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            wipe(i + 1, j); i = j + 1
        else: i += 1
    return ''.join(out)

QUAL = r'(?:\s*(?:const|volatile|override|final|mutable|noexcept\s*(?:\(\{?[^{}]*\}?\))?|throw\s*\(\)|&&?|->.*))*\s*$'
SKIP_PARENS = {'decltype', '__attribute__', 'alignas', 'noexcept', 'sizeof', 'alignof', '__declspec', 'operator'}

def classify(pre):
    """('func', name, offset of name) | 'scope' | 'other' for the text before a '{'."""
    s = re.sub(r'^\s*((public|private|protected)\s*:\s*)+', lambda m: ' ' * len(m.group(0)), pre)
    # Find the top-level paren groups.
    groups, depth, start = [], 0, 0
    for k, ch in enumerate(s):
        if ch == '(':
            if depth == 0: start = k
            depth += 1
        elif ch == ')' and depth:
            depth -= 1
            if depth == 0: groups.append((start, k))
    for a, b in groups:
        before = s[:a].rstrip()
        word = re.search(r'[\w~]*$', before).group(0)
        if word in SKIP_PARENS or not before: continue
        if before.endswith(']'): return 'other'          # a lambda
        rest = s[b + 1:]
        # A constructor's initializer list: ") [qualifiers] : a_(x), b_{y}" then the body.
        init = re.match(r'(?:\s*(?:noexcept|const))*\s*:(?!:)', rest)
        if not (re.match(QUAL, rest) or init and re.search(r'[)}]\s*$', rest)): return 'other'
        m = re.search(r'((?:[\w~]+(?:<[^<>]*>)?\s*::\s*)*(?:operator\s*(?:\(\)|\[\]|[^\s\w(]+|\w+)|~?\w+))\s*$',
                      before)
        if not m or re.fullmatch(r'(if|for|while|switch|catch|return)', m.group(1)): return 'other'
        return ('func', re.sub(r'\s+', '', m.group(1)), m.start(1))
    body = re.sub(r'template\s*<.*?>', '', s, flags=re.S)
    if re.search(r'\b(namespace|class|struct|union|enum|extern)\b', body): return 'scope'
    return 'other'

funcs = []   # (length, path, line, name)
for p, t in src.items():
    b = blank(t)
    line_at = lambda off: b.count('\n', 0, off) + 1
    stack = []            # 'scope' | 'other' | ('func', path-line, name, open offset)
    pre_start, i = 0, 0
    for i, ch in enumerate(b):
        in_func = any(isinstance(x, tuple) for x in stack) or (stack and stack[-1] == 'other')
        if ch == ';' and not in_func: pre_start = i + 1
        elif ch == '{':
            if in_func: stack.append('other'); continue
            kind = classify(b[pre_start:i])
            if isinstance(kind, tuple):
                stack.append(('func', line_at(pre_start + kind[2]), kind[1], i))
            else:
                stack.append(kind)
                if kind == 'scope': pre_start = i + 1
        elif ch == '}' and stack:
            x = stack.pop()
            if isinstance(x, tuple):
                funcs.append((line_at(i) - line_at(x[3]) + 1, p, x[1], x[2]))
                pre_start = i + 1
            elif x == 'scope': pre_start = i + 1
            # an 'other' block at scope level (brace init) stays part of the text before a '{'
funcs.sort(key=lambda f: (-f[0], f[1], f[2]))
print(f'\n## 3. Longest functions: {len(funcs)} found, {sum(1 for f in funcs if f[0] > 100)} over 100 lines\n')
print('| where | function | lines |\n| --- | --- | ---: |')
for n, p, ln, name in funcs[:15]: print(f'| {p}:{ln} | {name} | {n} |')

# 4. Includes crossing packages.
INC = re.compile(r'^\s*#\s*include\s*"([^"]+/[^"]+)"', re.M)
tops = {x for x in os.listdir(root) if os.path.isdir(os.path.join(root, x))}
cross, pairs, into_launch, into_launch_all, same = 0, Counter(), 0, 0, 0
for p, t in files.items():
    for h in INC.findall(t):
        if h.split('/')[0] not in tops: continue
        if os.path.dirname(h) == os.path.dirname(p):
            same += is_test(p) == False; continue
        out_of_launch = h.startswith('launch/') and top(p) != 'launch'
        into_launch_all += out_of_launch
        if is_test(p): continue
        cross += 1; into_launch += out_of_launch
        pairs[(top(p), top(h))] += 1
print(f'\n## 4. Includes crossing packages (non-test files)\n')
print(f'- {cross} `#include "dir/..."` lines name a header in another directory ({same} stay in their own).')
print(f'- {into_launch} include a launch/ header from outside launch/ '
      f'({into_launch_all} counting tests and *_test.cc).\n')
print('| from | to | includes |\n| --- | --- | ---: |')
for (a, b), n in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0])):
    print(f'| {a}/ | {b}/ | {n} |')

# 5. Include cycles inside one directory (Tarjan's SCC over stems).
graph = defaultdict(lambda: defaultdict(set))   # dir -> stem -> {stem}
for p, t in src.items():
    d, stem = os.path.dirname(p), os.path.splitext(os.path.basename(p))[0]
    graph[d][stem]
    for h in INC.findall(t):
        hs = os.path.splitext(os.path.basename(h))[0]
        if os.path.dirname(h) == d and hs != stem and h in src:
            graph[d][stem].add(hs)
def sccs(g):
    index, low, stack, on, out, cnt = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = cnt[0]; cnt[0] += 1; stack.append(v); on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(sorted(comp))
    for v in sorted(g):
        if v not in index: visit(v)
    return [c for c in out if len(c) > 1]
cycles = [(d, c) for d in sorted(graph) for c in sccs(graph[d])]
print(f'\n## 5. Include cycles inside a directory: {len(cycles)}\n')
for d, c in cycles: print(f'- {d}/: ' + ' <-> '.join(c))
if not cycles: print('- none')
PY

echo
echo "## 6. Duplicates (\`duplicates --repo $ROOT\`)"
echo
DUP="$(cd "$ROOT" && duplicates --repo "$ROOT" --most 5 --seconds 300 2>&1 || true)"
echo "- $(printf '%s\n' "$DUP" | head -n 1)"
echo "- pairs: $(printf '%s\n' "$DUP" | head -n 1 | grep -oE '^[0-9]+' || echo 0)"
printf '%s\n' "$DUP" | grep -E '^(D[0-9]+ |left out:|incomplete:)' | sed 's/^/  - /' || true
