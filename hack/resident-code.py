#!/usr/bin/env python3
"""Which crates' code a running process keeps resident: its binary's mapped pages that are
present (/proc/<pid>/pagemap, bit 63), each page's bytes shared among the symbols it holds
(`nm -S -C`), summed by crate. Read as root.

    hack/resident-code.py <pid> [top]

The part of the file-backed RSS a lever that moves code out of the binary can remove is the
resident bytes of the crates it moves.
"""
import bisect
import collections
import os
import re
import struct
import subprocess
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")


def mappings(pid, binary):
    """(start, end, offset, perms) of each mapping of `binary`."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and os.path.realpath(fields[5]) == binary:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                yield start, end, int(fields[2], 16), fields[1]


def resident_pages(pid, start, end):
    """The addresses of the present pages in [start, end)."""
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        pagemap.seek(start // PAGE * 8)
        data = pagemap.read((end - start) // PAGE * 8)
    for i in range(len(data) // 8):
        (entry,) = struct.unpack_from("<Q", data, i * 8)
        if entry >> 63 & 1:
            yield start + i * PAGE


def crate_of(symbol):
    """The crate a demangled symbol belongs to: the first path segment of its type or function
    (`<object_store::aws::AmazonS3 as …>::put` is object_store's)."""
    name = symbol.lstrip("<&*").removeprefix("mut ").removeprefix("dyn ")
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", name)
    return match.group(1) if match else "(C and others)"


def symbols(binary):
    """Sorted (address, size, crate) of the binary's code and read-only data symbols."""
    out = subprocess.run(
        ["nm", "-S", "-C", "--defined-only", binary], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        parts = line.split(" ", 3)
        # Symbols of unknown size have no size column.
        if len(parts) == 4 and len(parts[1]) == len(parts[0]) and parts[2] in "tTrRwW":
            found.append((int(parts[0], 16), int(parts[1], 16), crate_of(parts[3])))
    found.sort()
    return found


def main():
    pid = int(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    binary = os.path.realpath(f"/proc/{pid}/exe")
    maps = list(mappings(pid, binary))
    # A position-independent binary is loaded at the first mapping's address less its offset.
    elf_type = open(binary, "rb").read(18)[16]
    base = maps[0][0] - maps[0][2] if elf_type == 3 else 0
    table = symbols(binary)
    starts = [s[0] for s in table]
    by_crate = collections.Counter()
    resident = 0
    for start, end, _, perms in maps:
        if "w" in perms:
            continue
        for page in resident_pages(pid, start, end):
            resident += PAGE
            low, high = page - base, page - base + PAGE
            i = max(bisect.bisect_right(starts, low) - 1, 0)
            named = 0
            while i < len(table) and table[i][0] < high:
                address, size, crate = table[i]
                overlap = min(high, address + size) - max(low, address)
                if overlap > 0:
                    by_crate[crate] += overlap
                    named += overlap
                i += 1
            by_crate["(unnamed)"] += PAGE - min(named, PAGE)
    print(f"{binary}: {resident / 2**20:.2f} MiB of its read-only mappings resident")
    for crate, size in by_crate.most_common(top):
        print(f"{size / 2**20:8.2f} MiB  {crate}")


if __name__ == "__main__":
    main()
