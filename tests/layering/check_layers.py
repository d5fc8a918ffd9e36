#!/usr/bin/python3
"""The layering check: the library's calls go only downward, and each
struct's fields are written only by the files that own it.

    check_layers.py RULES BUILD_DIR SOURCE_ROOT [--list]

RULES (tests/layering/rules.txt) names, top first, the layers and the files
in each (a path or a folder prefix); which files own which struct's fields;
the test-support ("lab") files, which the product must not call; the
files other layers reach only through a vtable ("behind"); the headers
that define a vtable, which any layer may include ("interface"); and the
known violations still to be removed (a ratchet: the check fails on any
violation not listed, and on a listed one that no longer occurs, so the list
only shrinks). The facts come from clang's AST of each source file, with the
flags CMake used (BUILD_DIR/compile_commands.json): graph.py says what
counts as a call and as a write.

A struct named "part" in RULES is one each module may hold its own of (the
counters): a write to its field counts as a write to the field holding it.

Violations, one line each:
  up A -> B (fn -> callee)     a call from a lower layer to a higher one
  cycle L1 <-> L2              two layers that call each other
  lab A -> B (fn -> callee)    a product file calling test support
  behind A -> B (fn -> callee) a call into a file of another layer that
                               is reached only through its table
  include A -> H               a file including a higher layer's private
                               header (not an interface): each layer has its
                               own, so a file sees only the calls it may make
  write A: S.f (fn)            a field of S written outside S's owners
Exit 0 when the violations are exactly the listed ones, 1 otherwise, 2 on a
broken rules file or a source that does not parse.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import clang.cindex  # noqa: F401
except ImportError:
    print("skip: no libclang Python binding (apt-get install python3-clang-14)")
    sys.exit(77)
import graph  # noqa: E402


@dataclass
class Rules:
    layers: list[tuple[str, list[str]]] = field(default_factory=list)  # top first
    owners: dict[str, list[str]] = field(default_factory=dict)         # struct -> files
    values: set[str] = field(default_factory=set)                      # anyone may write
    parts: set[str] = field(default_factory=set)                       # owned through the holder
    lab: list[str] = field(default_factory=list)
    behind: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    known: set[str] = field(default_factory=set)


def _fail(msg: str) -> None:
    print(f"check_layers: {msg}", file=sys.stderr)
    sys.exit(2)


def read_rules(path: str) -> Rules:
    r = Rules()
    for n, raw in enumerate(open(path), 1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("known ") else raw.strip()
        if not line:
            continue
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        if word == "layer":
            name, *paths = rest.split()
            if not paths:
                _fail(f"{path}:{n}: layer {name} names no files")
            r.layers.append((name, paths))
        elif word == "owner":
            st, *files = rest.split()
            if not files:
                _fail(f"{path}:{n}: owner {st} names no files")
            r.owners[st] = files
        elif word == "value":
            r.values.update(rest.split())
        elif word == "part":
            r.parts.update(rest.split())
        elif word == "lab":
            r.lab += rest.split()
        elif word == "behind":
            r.behind += rest.split()
        elif word == "interface":
            r.interfaces += rest.split()
        elif word == "known":
            r.known.add(rest)
        else:
            _fail(f"{path}:{n}: unknown rule '{word}'")
    if not r.layers:
        _fail(f"{path}: no layers")
    return r


def _match(f: str, pats: list[str]) -> bool:
    return any(f == p or (p.endswith("/") and f.startswith(p)) for p in pats)


def layer_of(r: Rules, f: str) -> int | None:
    """Rank: 0 is the top layer. None: a file in no layer."""
    for i, (_, pats) in enumerate(r.layers):
        if _match(f, pats):
            return i
    return None


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)


def includes(root: str, sources: list[str]) -> list[tuple[str, str]]:
    """(file, header) for every quoted include of the sources and of the
    headers beside them, the header's path as the build finds it (from the
    root, else from the file's folder)."""
    files = set(sources)
    for d in {os.path.dirname(s) for s in sources}:
        full = os.path.join(root, d)
        files.update(os.path.join(d, n) for n in os.listdir(full) if n.endswith(".h"))
    out = []
    for f in sorted(files):
        try:
            text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        for m in _INCLUDE.finditer(text):
            for cand in (m.group(1), os.path.join(os.path.dirname(f), m.group(1))):
                if os.path.isfile(os.path.join(root, cand)):
                    out.append((f, os.path.normpath(cand)))
                    break
    return out


def violations(r: Rules, facts: graph.Facts, sources: list[str],
               incs: list[tuple[str, str]] = ()) -> list[str]:
    out: set[str] = set()
    for f, h in incs:
        if _match(f, r.lab) or _match(h, r.interfaces):
            continue
        if _match(h, r.lab):
            out.add(f"lab include {f} -> {h}")
            continue
        a, b = layer_of(r, f), layer_of(r, h)
        if a is not None and b is not None and b < a:
            out.add(f"include {f} -> {h}")
    for s in sources:
        if layer_of(r, s) is None and not _match(s, r.lab):
            out.add(f"unplaced {s}")
    pairs: set[tuple[int, int]] = set()
    for file, fn, callee, _ in facts.calls:
        d = facts.defs.get(callee)
        if d is None or d == file:
            continue
        if _match(file, r.lab):
            continue  # test support may call anything
        if _match(d, r.lab):
            out.add(f"lab {file} -> {d} ({fn} -> {callee})")
            continue
        a, b = layer_of(r, file), layer_of(r, d)
        if a is None or b is None:
            continue
        if a != b and _match(d, r.behind):
            out.add(f"behind {file} -> {d} ({fn} -> {callee})")
        if b < a:
            out.add(f"up {file} -> {d} ({fn} -> {callee})")
        if a != b:
            pairs.add((a, b))
    for a, b in pairs:
        if a < b and (b, a) in pairs:
            out.add(f"cycle {r.layers[a][0]} <-> {r.layers[b][0]}")
    for file, fn, chain, _ in facts.writes:
        if _match(file, r.lab):
            continue
        # target@holder@...: a part's field is its holder's (counters a
        # module keeps in a kvt_stats of its own are that module's).
        links = chain.split("@")
        target = links[0]
        while len(links) > 1 and links[0].split(":")[-1].rsplit(".", 1)[0] in r.parts:
            links = links[1:]
            target = links[0]
        if target.split(":")[-1].rsplit(".", 1)[0] in r.parts:
            continue  # a part held by no field: a caller's record (kvt_get_stats' out)
        if ":" in target:  # a struct defined in a .c file: that file owns it
            if not target.startswith(file + ":"):
                out.add(f"write {file}: {target} ({fn})")
            continue
        st = target.rsplit(".", 1)[0]
        top = st.split(".", 1)[0]
        if st in r.values or top in r.values:
            continue
        # The most specific owner: the field's own (a hub struct such as
        # kvt_engine holds each module's fields), then its struct's.
        owners = r.owners.get(target)
        if owners is None:
            owners = r.owners.get(st)
        if owners is None and st != top:
            owners = r.owners.get(top)
        if owners is None:
            out.add(f"unowned {st} (written in {file})")
            continue
        if not _match(file, owners):
            out.add(f"write {file}: {target} ({fn})")
    return sorted(out)


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    rules_path, build, root = argv[1], argv[2], argv[3]
    listing = "--list" in argv[4:]
    r = read_rules(rules_path)
    cc = os.path.join(build, "compile_commands.json")
    if not os.path.exists(cc):
        _fail(f"{cc}: missing (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)")
    sources = graph.library_sources(cc, root)
    try:
        facts = graph.collect(root, cc, sources)
    except RuntimeError as e:
        _fail(str(e))
    found = violations(r, facts, sources, includes(root, sources))
    if listing:
        for v in found:
            print(f"known {v}")
        return 0
    new = [v for v in found if v not in r.known]
    gone = sorted(r.known - set(found))
    edges = {(f, facts.defs[c]) for f, _, c, _ in facts.calls
             if c in facts.defs and facts.defs[c] != f}
    print(f"check_layers: {len(sources)} files, {len(edges)} cross-file call edges, "
          f"{len(facts.writes)} field writes; {len(found)} violations, "
          f"{len(r.known)} listed as known")
    for v in new:
        print(f"NEW   {v}")
    for v in gone:
        print(f"GONE  {v}  (remove it from {os.path.basename(rules_path)})")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
