#!/usr/bin/env python3
"""Prints "WIDTH HEIGHT DISTINCT_COLOURS STDDEV CRC" of an 8-bit RGB/RGBA PNG (stdlib only: zlib).

Used by the inspect browser test to check that Chromium's screenshot of the page is not blank, and
by the PNG writer's test (CRC: zlib.crc32 of the decoded pixel bytes, rows concatenated, no filter
bytes) to check that Python's zlib inflates our deflate stream to the image we encoded.
"""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]:
            raise SystemExit(f"{path}: bad CRC in chunk {kind!r}")
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise SystemExit(f"{path}: unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    w, h, bpp, rows = decode(sys.argv[1])
    colours, n, s, s2 = set(), 0, 0.0, 0.0
    for r in rows[::2]:
        for x in range(0, w * bpp, bpp * 2):
            px = r[x:x + 3]
            colours.add(px)
            lum = 0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2]
            n += 1
            s += lum
            s2 += lum * lum
    mean = s / max(n, 1)
    crc = zlib.crc32(b"".join(rows))
    print(w, h, len(colours), round(max(s2 / max(n, 1) - mean * mean, 0) ** 0.5, 2), crc)


if __name__ == "__main__":
    main()
