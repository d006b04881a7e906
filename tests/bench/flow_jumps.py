#!/usr/bin/env python3
"""flow_jumps.py FILE [--threshold N] [--max-callers N] [--by-function] [--prune f,g] [--steps]

Static count of the "jumps" a reader makes following one report's path through avsm.py.

Method:
  * parse FILE with ast; map every module-level function to its def line, and every method
    of a top-level class as Class.method.
  * resolve calls:  name(...)          -> the module-level function `name` (or Class.__init__
                                           when `name` is a class of the file defining one)
                    self.x(...)        -> the enclosing class's method x (bases in the file too)
                    self.a[.b...].x(.) -> follow `self.a = A(...)` in the owner's __init__
                                           (any method as a fallback), then A's attributes ...
                    Class.x(...)       -> Class.x
                    f(g, ...)          -> g as well: a module-level function handed to a call
                                           is called through it
    a name the function binds itself (parameter, assignment, loop target) is not the module's.
    anything else (state.foo(), str/list builtins, ...) is unresolved: no step, not followed.
  * helpers called from more than --max-callers (15) distinct call sites in the file are
    excluded (not steps, not followed): they are generic helpers, not the flow.
  * roots, in order: Rounds.report_done (else Rounds.reading_done, the handler of a finished
    report child), Warden.carry_out, Levers.run_lever (gone since the Gate's event, gated, is
    carry_out's; skipped when absent), Levers.lever_done; then separately
    cmd_why.  Depth first from each, call sites in (line, column) order, each function visited
    once (a shared visited set).  A step = a call site of a not-yet-visited followed function:
    from the call site's line to the callee's def line.  Entering a root is not a step.
  * a jump is a step of more than --threshold (300) lines; backwards = callee def above the call.
"""
import ast
import re
import sys
from collections import Counter, defaultdict


def load(path):
    src = open(path, encoding="utf-8").read()
    return src, ast.parse(src)


class Index:
    def __init__(self, tree):
        self.funcs = {}          # qualname -> FunctionDef
        self.classes = {}        # name -> ClassDef
        self.owner = {}          # qualname -> class name or None
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.funcs[node.name] = node
                self.owner[node.name] = None
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        q = f"{node.name}.{item.name}"
                        self.funcs[q] = item
                        self.owner[q] = node.name
        self.attr_types = {c: self._attr_types(c) for c in self.classes}

    def bases(self, cls):
        out, todo = [], [cls]
        while todo:
            c = todo.pop(0)
            if c in out or c not in self.classes:
                continue
            out.append(c)
            for b in self.classes[c].bases:
                if isinstance(b, ast.Name):
                    todo.append(b.id)
        return out

    def _attr_types(self, cls):
        """self.X = C(...) (tuple assignments too): __init__ first, then any other method."""
        found, fallback = {}, {}
        for item in self.classes[cls].body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            into = found if item.name == "__init__" else fallback
            for n in ast.walk(item):
                if not isinstance(n, ast.Assign):
                    continue
                for t in n.targets:
                    pairs = []
                    if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple) \
                            and len(t.elts) == len(n.value.elts):
                        pairs = list(zip(t.elts, n.value.elts))
                    else:
                        pairs = [(t, n.value)]
                    for tt, vv in pairs:
                        if (isinstance(tt, ast.Attribute) and isinstance(tt.value, ast.Name)
                                and tt.value.id == "self" and isinstance(vv, ast.Call)
                                and isinstance(vv.func, ast.Name) and vv.func.id in self.classes):
                            into.setdefault(tt.attr, vv.func.id)
        for k, v in fallback.items():
            found.setdefault(k, v)
        return found

    def method(self, cls, name):
        for c in self.bases(cls):
            q = f"{c}.{name}"
            if q in self.funcs:
                return q
        return None

    def resolve(self, call, cls):
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in self.funcs and self.owner[f.id] is None:
                return f.id
            if f.id in self.classes:
                return self.method(f.id, "__init__")
            return None
        if not isinstance(f, ast.Attribute):
            return None
        chain, v = [f.attr], f.value
        while isinstance(v, ast.Attribute):
            chain.insert(0, v.attr)
            v = v.value
        if not isinstance(v, ast.Name):
            return None
        if v.id == "self" and cls is not None:
            cur = cls
            for a in chain[:-1]:
                nxt = None
                for c in self.bases(cur):
                    nxt = self.attr_types.get(c, {}).get(a)
                    if nxt:
                        break
                if nxt is None:
                    return None
                cur = nxt
            return self.method(cur, chain[-1])
        if v.id in self.classes and len(chain) == 1:
            return self.method(v.id, chain[0])
        return None

    def calls(self, q):
        """[(line, col, callee)] of the resolved calls in q's body, in reading order."""
        cls = self.owner[q]
        out = []
        fn = self.funcs[q]
        # a name the function binds itself (a parameter, an assignment, a loop's target) is
        # its own, not the module's function of that name
        local = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)} | {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for n in ast.walk(fn):
            if isinstance(n, ast.Call):
                if isinstance(n.func, ast.Name) and n.func.id in local:
                    continue
                r = self.resolve(n, cls)
                if r is not None:
                    out.append((n.lineno, n.col_offset, r))
                # a module-level function handed to a call is called through it: a step too
                for a in n.args:
                    if (isinstance(a, ast.Name) and a.id in self.funcs and self.owner[a.id] is None
                            and a.id not in local):
                        out.append((a.lineno, a.col_offset, a.id))
        out.sort()
        return out


def flow(ix, max_callers, by_function, prune=()):
    sites = Counter()
    callers = defaultdict(set)
    for q in ix.funcs:
        for line, col, r in ix.calls(q):
            sites[r] += 1
            callers[r].add(q)
    fan = {q: len(callers[q]) for q in callers} if by_function else sites
    excluded = {q for q, n in fan.items() if n > max_callers} | set(prune)

    start = next((s for s in ("Rounds.report_done", "Rounds.reading_done") if s in ix.funcs), None)
    roots = [start, "Warden.carry_out", "Levers.run_lever", "Levers.lever_done", None, "cmd_why"]
    visited, steps, entries, revisits = set(), [], [], 0
    part = 0

    def dfs(q):
        nonlocal revisits
        visited.add(q)
        for line, col, r in ix.calls(q):
            if r in excluded or r == q:
                continue
            if r in visited:
                revisits += 1
                continue
            steps.append((part, line, q, ix.funcs[r].lineno, r))
            dfs(r)

    for r in roots:
        if r is None:
            part = 1
            continue
        if r not in ix.funcs:
            entries.append((part, r, None, "absent"))
            continue
        if r in visited:
            entries.append((part, r, ix.funcs[r].lineno, "already visited"))
            continue
        entries.append((part, r, ix.funcs[r].lineno, "root"))
        dfs(r)
    return start, excluded, fan, steps, entries, revisits, visited


def structure(src, tree, path):
    lines = src.splitlines()
    print(f"== structure of {path}")
    print(f"lines: {len(lines)}")
    print("classes over 100 lines (lines, methods, distinct self.X attributes):")
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        n = node.end_lineno - node.lineno + 1
        if n <= 100:
            continue
        methods = sum(isinstance(i, (ast.FunctionDef, ast.AsyncFunctionDef)) for i in node.body)
        attrs = set()
        for s in ast.walk(node):
            targets = []
            if isinstance(s, ast.Assign):
                targets = s.targets
            elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
                targets = [s.target]
            todo = list(targets)
            while todo:
                t = todo.pop()
                if isinstance(t, (ast.Tuple, ast.List)):
                    todo.extend(t.elts)
                elif isinstance(t, ast.Starred):
                    todo.append(t.value)
                elif (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                      and t.value.id == "self"):
                    attrs.add(t.attr)
        print(f"  {node.name:<16} line {node.lineno:>6}  {n:>5} lines  {methods:>3} methods"
              f"  {len(attrs):>3} attributes")
    print("sections:")
    heads = [(i + 1, l) for i, l in enumerate(lines) if re.match(r"^# \d+\. ", l)]
    if heads and heads[0][0] > 1:
        print(f"  {heads[0][0] - 1:>6} lines  (before the first section)")
    for k, (at, text) in enumerate(heads):
        end = heads[k + 1][0] - 1 if k + 1 < len(heads) else len(lines)
        print(f"  {end - at + 1:>6} lines  line {at:>6}  {text}")
    measure = sum(len(l.lstrip().encode()) + 1 for l in lines)
    print(f"byte measure sum(len(l.lstrip().encode())+1): {measure}")
    long = [i + 1 for i, l in enumerate(lines) if len(l) > 100]
    print(f"lines over 100 columns: {len(long)}" + (f"  {long}" if long else ""))


def main(argv):
    path = argv[0]
    threshold, max_callers = 300, 15
    if "--threshold" in argv:
        threshold = int(argv[argv.index("--threshold") + 1])
    if "--max-callers" in argv:
        max_callers = int(argv[argv.index("--max-callers") + 1])
    by_function = "--by-function" in argv
    prune = argv[argv.index("--prune") + 1].split(",") if "--prune" in argv else []
    src, tree = load(path)
    ix = Index(tree)
    start, excluded, fan, steps, entries, revisits, visited = flow(ix, max_callers, by_function, prune)
    unit = "calling functions" if by_function else "call sites"
    if prune:
        print(f"sensitivity run: also not followed (--prune): {', '.join(prune)}")
    print(f"== flow of {path}")
    print(f"start: {start}")
    print(f"excluded helpers (> {max_callers} distinct {unit}): "
          + ", ".join(f"{q}({fan[q]})" for q in sorted(excluded, key=lambda q: (-fan.get(q, 0), q))))
    for part, r, at, how in entries:
        print(f"  {'why' if part else 'report'} root: {r} (line {at}) {how}")
    print(f"functions visited: {len(visited)}; calls to already-visited functions skipped:"
          f" {revisits}")
    for label, sel in (("report path", 0), ("why path", 1), ("total", None)):
        ss = [s for s in steps if sel is None or s[0] == sel]
        jumps = [s for s in ss if abs(s[3] - s[1]) > threshold]
        back = [s for s in jumps if s[3] < s[1]]
        print(f"{label}: steps {len(ss)}, jumps > {threshold} lines {len(jumps)},"
              f" of them backwards {len(back)}")
    print("jumps:")
    for part, line, q, to, r in steps:
        d = to - line
        if abs(d) > threshold:
            print(f"  {'B' if d < 0 else 'F'} {d:>+7}  {line:>6} {q}  ->  {to:>6} {r}")
    if "--steps" in argv:
        print("all steps:")
        for part, line, q, to, r in steps:
            print(f"     {to - line:>+7}  {line:>6} {q}  ->  {to:>6} {r}")
    structure(src, tree, path)


if __name__ == "__main__":
    main(sys.argv[1:])
