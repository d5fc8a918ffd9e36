#!/usr/bin/python3
"""check_layers.py on a made-up library of three files, so that the check
is seen to fail on each kind of violation it exists to catch: a call up,
a write to another owner's field, a call into test support, a direct call
into a file reached only through its table, an include of a higher layer's
header, and a known violation that is gone (the ratchet)."""
from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import clang.cindex  # noqa: F401
except ImportError:
    print("skip: no libclang Python binding (apt-get install python3-clang-14)")
    sys.exit(77)
import check_layers  # noqa: E402

HEADER = """
struct low { int n; };
struct top { struct low low; int m; };
void low_bump(struct low *l);
void top_poke(struct top *t);
void lab_hook(void);
"""
LOW = """#include "lib.h"
void low_bump(struct low *l) { l->n++; }
"""
TOP = """#include "lib.h"
void top_poke(struct top *t) { t->m = 1; low_bump(&t->low); }
"""
LAB = """#include "lib.h"
void lab_hook(void) {}
"""
RULES = """
layer top top.c
layer low low.c
lab lab.c
owner top top.c
owner low low.c
"""


def run(d: str, files: dict[str, str], rules: str) -> tuple[int, str]:
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    cc = [{"directory": d, "file": n, "output": f"CMakeFiles/kvtier_obj.dir/{n}.o",
           "command": f"cc -I{d} -c {n} -o CMakeFiles/kvtier_obj.dir/{n}.o"}
          for n in files if n.endswith(".c")]
    with open(os.path.join(d, "compile_commands.json"), "w") as f:
        json.dump(cc, f)
    with open(os.path.join(d, "rules.txt"), "w") as f:
        f.write(rules)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = check_layers.main(["check_layers.py", os.path.join(d, "rules.txt"), d, d])
    return rc, out.getvalue()


def expect(what: str, got: tuple[int, str], rc: int, text: str | None) -> bool:
    ok = got[0] == rc and (text is None or text in got[1])
    print(f"{'ok  ' if ok else 'FAIL'} {what}: rc {got[0]} (want {rc})"
          + ("" if ok else f"\n{got[1]}"))
    return ok


def main() -> int:
    base = {"lib.h": HEADER, "low.c": LOW, "top.c": TOP, "lab.c": LAB}
    good = True
    with tempfile.TemporaryDirectory() as d:
        good &= expect("downward calls, own writes", run(d, base, RULES), 0, None)
    with tempfile.TemporaryDirectory() as d:
        up = dict(base, **{"low.c": LOW + "void low_up(struct top *t) { top_poke(t); }\n"})
        good &= expect("a call up", run(d, up, RULES), 1,
                       "NEW   up low.c -> top.c (low_up -> top_poke)")
    with tempfile.TemporaryDirectory() as d:
        wr = dict(base, **{"top.c": TOP + "void top_reach(struct top *t) { t->low.n = 2; }\n"})
        good &= expect("a write to another owner's field", run(d, wr, RULES), 1,
                       "NEW   write top.c: low.n (top_reach)")
    with tempfile.TemporaryDirectory() as d:
        ms = dict(base, **{"low.c": "#include <string.h>\n" + LOW +
                           "void low_clear(struct top *t) { memset(&t->m, 0, sizeof t->m); }\n"})
        good &= expect("a field cleared through memset", run(d, ms, RULES), 1,
                       "NEW   write low.c: top.m (low_clear)")
    with tempfile.TemporaryDirectory() as d:
        hand = dict(base, **{"top.c": TOP + "void top_hand(struct top *t) { low_bump(&t->low); }\n"})
        good &= expect("a field handed to its owner's function", run(d, hand, RULES), 0, None)
    with tempfile.TemporaryDirectory() as d:
        lab = dict(base, **{"low.c": LOW + "void low_test(void) { lab_hook(); }\n"})
        good &= expect("a call into test support", run(d, lab, RULES), 1,
                       "NEW   lab low.c -> lab.c (low_test -> lab_hook)")
    with tempfile.TemporaryDirectory() as d:
        inc = dict(base, **{"top.h": "void top_only(void);\n",
                            "low.c": '#include "top.h"\n' + LOW})
        rules = RULES.replace("layer top top.c", "layer top top.c top.h")
        good &= expect("a lower layer including a higher one's header", run(d, inc, rules), 1,
                       "NEW   include low.c -> top.h")
        good &= expect("an interface header included from below",
                       run(d, inc, rules + "interface top.h\n"), 0, None)
    with tempfile.TemporaryDirectory() as d:
        good &= expect("a direct call into a file behind its table", run(d, base, RULES + "behind low.c\n"), 1,
                       "NEW   behind top.c -> low.c (top_poke -> low_bump)")
    with tempfile.TemporaryDirectory() as d:
        known = RULES + "known up low.c -> top.c (low_up -> top_poke)\n"
        good &= expect("a known violation that is gone", run(d, base, known), 1,
                       "GONE  up low.c -> top.c")
    with tempfile.TemporaryDirectory() as d:
        up = dict(base, **{"low.c": LOW + "void low_up(struct top *t) { top_poke(t); }\n"})
        known = RULES + "known up low.c -> top.c (low_up -> top_poke)\nknown cycle top <-> low\n"
        good &= expect("a known violation still there", run(d, up, known), 0, None)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
