#!/usr/bin/env python3
"""scripts/wasm-sizes.py: what takes the bytes of the console's wasm module, by crate.

Usage: python3 scripts/wasm-sizes.py [MODULE.wasm] [TOP]

Reads the module the wasm build leaves before wasm-bindgen and wasm-opt
($CARGO_TARGET_DIR/front-*/wasm32-unknown-unknown/wasm-release/app.wasm, the newest one when no
path is given), whose `name` section still names every function, and sums the code section's
function bodies by the crate at the head of each name (`leptos_router::...` -> leptos_router,
`<app::pages::X as ...>` -> app). Prints the TOP crates (default 25) with bytes and share, then
the data section's size: the figures to look at before deciding what to cut. wasm-opt shrinks
every part afterwards, so shares matter more than bytes.
"""

import glob
import os
import re
import sys
from collections import Counter


def leb(data, at):
    """An unsigned LEB128 number at `at`: (value, next offset)."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def sections(data):
    at = 8  # magic and version
    while at < len(data):
        kind = data[at]
        size, at = leb(data, at + 1)
        yield kind, data[at : at + size]
        at += size


def imported_functions(body):
    count, at = leb(body, 0)
    functions = 0
    for _ in range(count):
        for _ in range(2):  # module and field names
            length, at = leb(body, at)
            at += length
        kind = body[at]
        at += 1
        if kind == 0:  # function: a type index
            _, at = leb(body, at)
            functions += 1
        elif kind == 1:  # table: element type, limits
            at += 1
            flags, at = leb(body, at)
            _, at = leb(body, at)
            if flags & 1:
                _, at = leb(body, at)
        elif kind == 2:  # memory: limits
            flags, at = leb(body, at)
            _, at = leb(body, at)
            if flags & 1:
                _, at = leb(body, at)
        elif kind == 3:  # global: type, mutability
            at += 2
    return functions


def function_names(body):
    length, at = leb(body, 0)
    if body[at : at + length] != b"name":
        return None
    at += length
    while at < len(body):
        sub = body[at]
        size, at = leb(body, at + 1)
        if sub == 1:
            names = {}
            count, inner = leb(body, at)
            for _ in range(count):
                index, inner = leb(body, inner)
                length, inner = leb(body, inner)
                names[index] = body[inner : inner + length].decode("utf-8", "replace")
                inner += length
            return names
        at += size
    return {}


STD = {"core", "alloc", "std"}


def crate_of(name):
    """The crate a function is counted for: the first crate named in its symbol that is not the
    standard library (a `core::ptr::drop_in_place<leptos::X>` is leptos's cost), else that one.
    Symbols are Rust's v0 mangling (`_R...C<hash>_<len><crate>...`) or the legacy one."""
    crates = []
    if name.startswith("_R"):
        for match in re.finditer(r"C(?:s[0-9A-Za-z]*_)?(\d+)([A-Za-z_])", name):
            length, start = int(match.group(1)), match.start(2)
            crates.append(name[start : start + length])
    else:
        crates = re.findall(r"(?:^_ZN|<|\b)(\d+)?([a-z_][a-z0-9_]*)::", name)
        crates = [crate for _, crate in crates]
    if not crates:
        return "(unnamed)"
    return next((crate for crate in crates if crate not in STD), crates[0])


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else None
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    if path is None:
        target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/seckill/target"))
        found = glob.glob(f"{target}/front-*/wasm32-unknown-unknown/wasm-release/app.wasm")
        if not found:
            sys.exit("no app.wasm found: run scripts/build-front.sh first, or give its path")
        path = max(found, key=os.path.getmtime)
    data = open(path, "rb").read()
    imports, bodies, names, data_bytes = 0, [], {}, 0
    for kind, body in sections(data):
        if kind == 2:
            imports = imported_functions(body)
        elif kind == 10:
            count, at = leb(body, 0)
            for _ in range(count):
                size, at = leb(body, at)
                bodies.append(size)
                at += size
        elif kind == 11:
            data_bytes = len(body)
        elif kind == 0:
            names = function_names(body) or names
    by_crate = Counter()
    for offset, size in enumerate(bodies):
        by_crate[crate_of(names.get(imports + offset, ""))] += size
    code = sum(bodies)
    print(f"{path}: {len(data)} bytes, code {code}, data {data_bytes}, {len(bodies)} functions")
    for crate, size in by_crate.most_common(top):
        print(f"  {crate:32} {size:>9}  {100 * size / code:5.1f} %")


if __name__ == "__main__":
    main()
