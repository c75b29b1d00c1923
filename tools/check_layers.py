#!/usr/bin/python3
"""Checks the module layering: every #include "..." in a module's sources
must name the module itself, a module the layer table allows, include/ftl
(the public API) or an external library. The table is tools/layers.txt (its
header says the syntax).

  check_layers.py [--root DIR] [--table FILE]   check a tree (default: this repo)
  check_layers.py --self-test                   check the checker on fake trees

Exits 0 when clean, 1 listing each violation as file:line, 2 on a bad table.
Run by ctest as `layering` and `layering_self_test`.
"""

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile

SOURCE_EXTS = (".h", ".hh", ".hpp", ".cc", ".cpp", ".inc")
PUBLIC = "include/ftl"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


class TableError(Exception):
    pass


class Table:
    def __init__(self):
        self.allowed = {}      # module -> set of modules
        self.temporary = {}    # module -> set of modules
        self.public_only = set()
        self.external = set()
        self.roots = []
        self.unchecked = set()

    @staticmethod
    def parse(path):
        t = Table()
        temporary_lines = []
        with open(path, encoding="utf-8") as f:
            for n, raw in enumerate(f, 1):
                line = raw.split("#", 1)[0].strip()
                if not line:
                    continue
                if ":" not in line:
                    raise TableError(f"{path}:{n}: expected 'MODULE: ALLOWED...'")
                key, rest = (s.strip() for s in line.split(":", 1))
                words = rest.split()
                if key == "roots":
                    t.roots = words
                elif key == "external":
                    t.external.update(words)
                elif key == "unchecked":
                    t.unchecked.update(w.rstrip("/") for w in words)
                elif key == "public-only":
                    t.public_only.update(w.rstrip("/") for w in words)
                elif key == "allow-temporarily":
                    if ":" not in rest:
                        raise TableError(
                            f"{path}:{n}: expected 'allow-temporarily: MODULE: ALLOWED...'")
                    mod, deps = (s.strip() for s in rest.split(":", 1))
                    temporary_lines.append((n, mod.rstrip("/"), deps.split()))
                else:
                    mod = key.rstrip("/")
                    if mod in t.allowed:
                        raise TableError(f"{path}:{n}: module {mod} listed twice")
                    t.allowed[mod] = {w.rstrip("/") for w in words}
        for n, mod, deps in temporary_lines:
            if mod not in t.allowed:
                raise TableError(f"{path}:{n}: allow-temporarily for unknown module {mod}")
            t.temporary.setdefault(mod, set()).update(w.rstrip("/") for w in deps)
        for mod, deps in t.allowed.items():
            for d in deps:
                if d not in t.allowed:
                    raise TableError(f"{path}: {mod} allows {d}, which is not a module")
            if mod in t.public_only:
                bad = sorted(d for d in deps if d.startswith("src/"))
                if bad:
                    raise TableError(
                        f"{path}: {mod} may use include/ftl only, not {' '.join(bad)} "
                        f"(a known violation goes on an allow-temporarily: line)")
        for mod, deps in t.temporary.items():
            for d in deps:
                if d not in t.allowed:
                    raise TableError(f"{path}: allow-temporarily {mod}: {d} is not a module")
        return t

    def module_of(self, rel):
        """The longest module that rel (a path relative to the root) lies in."""
        best = None
        for mod in self.allowed:
            if rel == mod or rel.startswith(mod + "/"):
                if best is None or len(mod) > len(best):
                    best = mod
        return best


def source_files(root, top):
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(SOURCE_EXTS):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def top_folders(root):
    """Top-level folders that hold sources, without hidden and build folders."""
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.startswith(".") or not os.path.isdir(path):
            continue
        if os.path.exists(os.path.join(path, "CMakeCache.txt")):
            continue  # a build directory
        out.append(name)
    return out


def resolve(root, table, including, inc):
    """The file (relative to root) that #include "inc" in `including` names,
    or None when it is found nowhere."""
    cands = [os.path.join(os.path.dirname(including), inc)]
    cands += [os.path.join(r, inc) for r in table.roots]
    for c in cands:
        c = os.path.normpath(c)
        if not c.startswith("..") and os.path.isfile(os.path.join(root, c)):
            return c
    return None


def check(root, table):
    """Returns (violations, notes): lists of strings."""
    violations = []
    used_temporary = set()
    unknown = {}  # folder -> files in it that no module covers
    for top in top_folders(root):
        if top in table.unchecked:
            continue
        for rel in source_files(root, top):
            mod = table.module_of(rel)
            if mod is None:
                unknown.setdefault(os.path.dirname(rel), []).append(rel)
                continue
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
            for n, line in enumerate(lines, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                target = resolve(root, table, rel, inc)
                if target is None:
                    first = inc.split("/", 1)[0]
                    if "/" in inc and first in table.external:
                        continue
                    violations.append(
                        f"{rel}:{n}: #include \"{inc}\" resolves to no file and '{first}' is "
                        f"no known folder (add the module to tools/layers.txt, or its "
                        f"library to external:)")
                    continue
                dep = table.module_of(target)
                if dep is None:
                    violations.append(
                        f"{rel}:{n}: #include \"{inc}\" names {target}, whose folder is in no "
                        f"module of tools/layers.txt (add the new module)")
                    continue
                if dep == mod or dep == PUBLIC or dep in table.allowed[mod]:
                    continue
                if dep in table.temporary.get(mod, ()):
                    used_temporary.add((mod, dep))
                    continue
                why = "may not include src/ (include/ftl only)" if (
                    mod in table.public_only and dep.startswith("src/")) else \
                    f"may include only {' '.join(sorted(table.allowed[mod])) or 'itself'}"
                violations.append(f"{rel}:{n}: #include \"{inc}\": {mod} -> {dep} not allowed "
                                  f"({mod} {why})")
    for folder, files in sorted(unknown.items()):
        violations.append(
            f"{files[0]}: folder {folder} ({len(files)} source file(s)) is in no module of "
            f"tools/layers.txt (add a line for the new module and what it may include)")
    for mod, deps in sorted(table.temporary.items()):
        for d in sorted(deps):
            if (mod, d) not in used_temporary:
                violations.append(
                    f"tools/layers.txt: 'allow-temporarily: {mod}: {d}' is no longer needed "
                    f"(no such include left): delete it")
    return violations


def run(root, table_path):
    try:
        table = Table.parse(table_path)
    except (TableError, OSError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    violations = check(root, table)
    for v in violations:
        print(v)
    n_temp = sum(len(d) for d in table.temporary.values())
    if violations:
        print(f"check_layers: {len(violations)} layering violation(s)", file=sys.stderr)
        return 1
    print(f"check_layers: OK ({len(table.allowed)} modules, {n_temp} temporary allowance(s))")
    return 0


# --- self-test ----------------------------------------------------------------

SELF_TABLE = """\
roots: src include .
external: absl
unchecked: tests
include/ftl:
src/util:
src/log: src/util
src/core: src/util src/log
public-only: nbd tools
nbd:
tools:
"""


def make_tree(base, files, table=SELF_TABLE):
    for rel, text in files.items():
        path = os.path.join(base, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    table_path = os.path.join(base, "layers.txt")
    with open(table_path, "w", encoding="utf-8") as f:
        f.write(table)
    return table_path


CLEAN = {
    "include/ftl/api.h": '#include "absl/status/status.h"\n',
    "src/util/u.h": "#include <vector>\n",
    "src/util/u.cc": '#include "util/u.h"\n#include "u.h"\n',
    "src/log/l.h": '#include "util/u.h"\n#include "ftl/api.h"\n',
    "src/core/c.cc": '#include "log/l.h"\n#include "util/u.h"\n#include "absl/strings/str_cat.h"\n',
    "nbd/n.cc": '#include "ftl/api.h"\n#include "nbd/n.h"\n',
    "nbd/n.h": "",
    "tools/t.cc": '#include "ftl/api.h"\n',
    "tests/x_test.cc": '#include "core/c.cc"\n#include "whatever/none.h"\n',
}


def self_test():
    cases = [
        # (name, extra files, table or None, expected exit, substrings in output)
        ("clean tree passes", {}, None, 0, []),
        ("upward include is caught",
         {"src/util/bad.cc": '#include "util/u.h"\n\n#include "log/l.h"\n'}, None, 1,
         ["src/util/bad.cc:3", "src/util -> src/log not allowed"]),
        ("cross include from a program into src/ is caught",
         {"tools/bad.cc": '#include "util/u.h"\n'}, None, 1,
         ["tools/bad.cc:1", "tools -> src/util", "include/ftl only"]),
        ("public header including src/ is caught",
         {"include/ftl/bad.h": '#include "util/u.h"\n'}, None, 1,
         ["include/ftl/bad.h:1", "include/ftl -> src/util"]),
        ("include into an unknown module folder is caught",
         {"src/range/r.h": "", "src/core/d.cc": '#include "range/r.h"\n'}, None, 1,
         ["src/core/d.cc:1", "src/range/r.h", "src/range/r.h: folder src/range (1 source file(s)) is in no module"]),
        ("unknown top-level folder of an include is caught",
         {"src/core/e.cc": '#include "nosuch/thing.h"\n'}, None, 1,
         ["src/core/e.cc:1", "'nosuch' is no known folder"]),
        ("sources in a folder without a table line are caught",
         {"daemon/main.cc": '#include "ftl/api.h"\n'}, None, 1,
         ["daemon/main.cc: folder daemon (1 source file(s)) is in no module"]),
        ("allow-temporarily lets a known violation pass",
         {"tools/bad.cc": '#include "util/u.h"\n'},
         SELF_TABLE + "allow-temporarily: tools: src/util\n", 0, []),
        ("a stale allow-temporarily fails",
         {}, SELF_TABLE + "allow-temporarily: nbd: src/util\n", 1,
         ["'allow-temporarily: nbd: src/util' is no longer needed"]),
        ("granting src/ to a public-only program is refused",
         {}, SELF_TABLE.replace("tools:\n", "tools: src/util\n"), 2, []),
    ]
    failed = 0
    for name, extra, table, want_rc, want_text in cases:
        with tempfile.TemporaryDirectory(prefix="check_layers.") as base:
            table_path = make_tree(base, {**CLEAN, **extra}, table or SELF_TABLE)
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                rc = run(base, table_path)
            text = out.getvalue()
            missing = [s for s in want_text if s not in text]
            ok = rc == want_rc and not missing
            print(f"{'ok  ' if ok else 'FAIL'} {name}")
            if not ok:
                failed += 1
                print(f"     exit {rc} (want {want_rc}); missing {missing}; output:")
                print("     " + text.replace("\n", "\n     "))
    print(f"check_layers self-test: {len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="source tree to check")
    ap.add_argument("--table", help="layer table (default: ROOT/tools/layers.txt)")
    ap.add_argument("--self-test", action="store_true", help="check the checker")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return run(args.root, args.table or os.path.join(args.root, "tools", "layers.txt"))


if __name__ == "__main__":
    sys.exit(main())
