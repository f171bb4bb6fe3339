#!/usr/bin/env python3
"""Prints "WIDTH HEIGHT NON_WHITE_FRACTION DISTINCT_COLORS" of an 8-bit RGB or RGBA PNG.

The browser test of report.html (tests/e2e/html_report_test.cpp) reads a headless Chromium
screenshot with it: a blank page is all one colour. Standard library only (zlib).
"""

import struct
import sys
import zlib


def main(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG file")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            if depth != 8 or color not in (2, 6):
                sys.exit(
                    f"{path}: only 8-bit RGB or RGBA PNGs are read (depth {depth}, colour {color})"
                )
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    non_white, colors = 0, set()
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 2 == 0:  # every other row is plenty for the statistics
            for x in range(0, stride, channels * 2):
                pixel = bytes(line[x : x + 3])
                colors.add(pixel)
                if pixel != b"\xff\xff\xff":
                    non_white += 1
        previous = line
    sampled = ((height + 1) // 2) * ((width + 1) // 2)
    print(width, height, f"{non_white / max(1, sampled):.4f}", len(colors))


if __name__ == "__main__":
    main(sys.argv[1])
