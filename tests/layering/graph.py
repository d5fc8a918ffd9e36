"""The library's file-level call graph and struct-field writes, from clang's
AST of each source file (libclang, Debian's python3-clang-14).

What counts:
- a call: a CallExpr in a function body whose callee is a function defined
  in another library file. Calls through function pointers (the device,
  io, store and policy vtables, callbacks) are not edges: a vtable is how a
  lower layer is reached without naming it, and a callback is how a lower
  layer reaches up without a call.
- a write: an assignment (=, op=), ++ or -- whose target is a struct field
  (any depth: e->ssd.cv.x), or the address of a field handed to a function
  outside the library (memset(&e->st, ...), pthread_cond_init(&e->cv, ...);
  locking a mutex or waiting on a condition variable is a use, not a
  write). A field handed to a library function is written, if at all, in
  that function's body, which is checked as its file's. The field belongs
  to the struct that declares it; nested unnamed structs are named by their
  path from the outer struct (kvt_engine.pace).
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field

import clang.cindex as ci

CK = ci.CursorKind
ASSIGN_OPS = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}


@dataclass
class Facts:
    defs: dict[str, str] = field(default_factory=dict)          # function -> file
    calls: list[tuple[str, str, str, int]] = field(default_factory=list)  # file, caller fn, callee, line
    writes: list[tuple[str, str, str, int]] = field(default_factory=list)  # file, fn, "struct.field", line


def _libclang() -> None:
    if ci.Config.loaded:
        return
    for p in ("/usr/lib/llvm-14/lib/libclang.so.1", "/usr/lib/x86_64-linux-gnu/libclang-14.so.1"):
        if os.path.exists(p):
            ci.Config.set_library_file(p)
            return


ROOT = "."


def _record_name(decl: ci.Cursor) -> str:
    """struct kvt_engine -> kvt_engine; an unnamed struct inside a field of
    another -> outer.field (its path); a struct defined in a .c file ->
    file.c:name (no other file can name it, and two files may each have
    their own struct of one name)."""
    sp = decl.spelling
    if sp and "unnamed" not in sp and "anonymous" not in sp:
        loc = decl.location.file
        if loc is not None and loc.name.endswith(".c"):
            return f"{os.path.relpath(loc.name, ROOT)}:{sp}"
        return sp
    parent = decl.semantic_parent
    if parent is not None and parent.kind in (CK.STRUCT_DECL, CK.UNION_DECL):
        # the field whose type is this record
        for f in parent.get_children():
            if f.kind == CK.FIELD_DECL:
                t = f.type.get_canonical()
                while t.kind == ci.TypeKind.CONSTANTARRAY:
                    t = t.element_type.get_canonical()
                d = t.get_declaration()
                if d is not None and d == decl:
                    return f"{_record_name(parent)}.{f.spelling}"
    return sp or "?"


def _bare(c: ci.Cursor) -> ci.Cursor | None:
    """c without the parentheses, casts and implicit conversions around it."""
    while c is not None and c.kind in (CK.UNEXPOSED_EXPR, CK.PAREN_EXPR, CK.CSTYLE_CAST_EXPR):
        kids = list(c.get_children())
        c = kids[-1] if kids else None
    return c


def _member_target(c: ci.Cursor) -> str | None:
    """The "struct.field" an lvalue writes, or None if it is not a field."""
    c = _bare(c)
    if c is None:
        return None
    if c.kind == CK.ARRAY_SUBSCRIPT_EXPR:
        kids = list(c.get_children())
        return _member_target(kids[0]) if kids else None
    if c.kind == CK.UNARY_OPERATOR:
        # *p: a write through a pointer, not to a named field (unless p is one)
        return None
    if c.kind != CK.MEMBER_REF_EXPR:
        return None
    fd = c.referenced
    if fd is None or fd.kind != CK.FIELD_DECL:
        return None
    # The field that holds this one's struct, if the base is a field too
    # (e->copy.st.hits: kvt_stats.hits is held by kvt_copies.st): a struct
    # whose instances belong to whoever holds them ("part" in the rules)
    # is owned through its holder.
    kids = list(c.get_children())
    holder = _member_target(kids[0]) if kids else None
    rec = fd.semantic_parent
    if holder:
        return f"{_record_name(rec)}.{fd.spelling}@{holder}"
    return f"{_record_name(rec)}.{fd.spelling}"


def _binop(c: ci.Cursor) -> str | None:
    """The operator of a BINARY/COMPOUND_ASSIGNMENT operator cursor."""
    kids = list(c.get_children())
    if len(kids) != 2:
        return None
    lhs_end = kids[0].extent.end.offset
    for t in c.get_tokens():
        if t.extent.start.offset >= lhs_end and t.kind == ci.TokenKind.PUNCTUATION:
            return t.spelling
    return None


def _unop_incdec(c: ci.Cursor) -> bool:
    toks = [t.spelling for t in c.get_tokens()]
    return bool(toks) and (toks[0] in ("++", "--") or toks[-1] in ("++", "--"))


def _addr_of_field(c: ci.Cursor) -> str | None:
    c = _bare(c)
    if c is None:
        return None
    if c.kind == CK.UNARY_OPERATOR:
        toks = list(c.get_tokens())
        if toks and toks[0].spelling == "&":
            kids = list(c.get_children())
            return _member_target(kids[0]) if kids else None
    return None


def scan_file(path: str, args: list[str], root: str, facts: Facts, index: ci.Index) -> None:
    tu = index.parse(path, args=args, options=ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES * 0)
    errs = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errs:
        raise RuntimeError(f"{path}: {errs[0]}")
    rel = os.path.relpath(path, root)
    for fn in tu.cursor.get_children():
        if fn.kind != CK.FUNCTION_DECL or not fn.is_definition():
            continue
        if fn.location.file is None or os.path.realpath(fn.location.file.name) != os.path.realpath(path):
            continue  # static inline functions of headers: their callers own them
        if fn.linkage != ci.LinkageKind.INTERNAL:  # a static one is seen only in its file
            facts.defs.setdefault(fn.spelling, rel)
        _walk(fn, fn.spelling, rel, facts)


# Uses of a synchronisation object, not writes of the struct that holds it.
SYNC_USES = ("pthread_mutex_lock", "pthread_mutex_unlock", "pthread_mutex_trylock",
             "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_signal",
             "pthread_cond_broadcast")


def _external_writer(ref: ci.Cursor | None) -> bool:
    """Whether a field whose address is handed to this callee counts as
    written by the caller: the callee is outside the library (memset,
    pthread_cond_init). A library function writes what it writes in its own
    body, where its writes are checked; a call through a pointer (a vtable)
    reaches a back-end, whose state that is."""
    if ref is None or ref.kind != CK.FUNCTION_DECL or ref.spelling in SYNC_USES:
        return False
    f = ref.location.file
    return f is None or not os.path.realpath(f.name).startswith(ROOT + os.sep)


def _walk(node: ci.Cursor, fname: str, rel: str, facts: Facts) -> None:
    for c in node.walk_preorder():
        k = c.kind
        if k == CK.CALL_EXPR:
            ref = c.referenced
            if (ref is not None and ref.kind == CK.FUNCTION_DECL and
                    ref.linkage != ci.LinkageKind.INTERNAL):
                facts.calls.append((rel, fname, ref.spelling, c.location.line))
            if _external_writer(ref):
                kids = list(c.get_children())
                for a in kids[1:]:
                    t = _addr_of_field(a)
                    if t:
                        facts.writes.append((rel, fname, t, c.location.line))
        elif k == CK.BINARY_OPERATOR or k == CK.COMPOUND_ASSIGNMENT_OPERATOR:
            op = _binop(c)
            if op in ASSIGN_OPS:
                kids = list(c.get_children())
                t = _member_target(kids[0])
                if t:
                    facts.writes.append((rel, fname, t, c.location.line))
        elif k == CK.UNARY_OPERATOR:
            if _unop_incdec(c):
                kids = list(c.get_children())
                t = _member_target(kids[0]) if kids else None
                if t:
                    facts.writes.append((rel, fname, t, c.location.line))


def compile_args(cc_json: str, root: str) -> dict[str, list[str]]:
    """Source path -> the clang arguments (includes, defines) CMake used."""
    out: dict[str, list[str]] = {}
    for e in json.load(open(cc_json)):
        f = os.path.realpath(os.path.join(e["directory"], e["file"]))
        argv = e.get("arguments") or shlex.split(e["command"])
        keep: list[str] = []
        it = iter(argv[1:])
        for a in it:
            if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
                next(it, None)
                continue
            if a.startswith(("-I", "-D", "-std=", "-isystem", "-include")):
                if a in ("-I", "-D", "-isystem", "-include"):
                    keep += [a, next(it, "")]
                else:
                    keep.append(a)
        out[f] = keep
    return out


def library_sources(cc_json: str, root: str) -> list[str]:
    """The sources of libkvtier (CMake's kvtier_obj target), relative to root."""
    out = []
    for e in json.load(open(cc_json)):
        cmd = e.get("command") or " ".join(e.get("arguments", []))
        if "CMakeFiles/kvtier_obj.dir/" in (e.get("output", "") + cmd):
            f = os.path.realpath(os.path.join(e["directory"], e["file"]))
            out.append(os.path.relpath(f, os.path.realpath(root)))
    return sorted(set(out))


def collect(root: str, cc_json: str, sources: list[str]) -> Facts:
    global ROOT
    ROOT = os.path.realpath(root)
    _libclang()
    index = ci.Index.create()
    args = compile_args(cc_json, root)
    facts = Facts()
    for s in sources:
        p = os.path.realpath(os.path.join(root, s))
        a = args.get(p)
        if a is None:
            raise RuntimeError(f"{s}: not in {cc_json} (is it built?)")
        scan_file(p, a + ["-Wno-everything"], root, facts, index)
    return facts


if __name__ == "__main__":
    root, cc = sys.argv[1], sys.argv[2]
    f = collect(root, cc, sys.argv[3:])
    edges: dict[tuple[str, str], int] = {}
    for file, fn, callee, line in f.calls:
        d = f.defs.get(callee)
        if d and d != file:
            edges[(file, d)] = edges.get((file, d), 0) + 1
    for (a, b), n in sorted(edges.items()):
        print(f"{a} -> {b} ({n})")
