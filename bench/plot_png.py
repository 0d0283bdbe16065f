"""A minimal log-log line chart written as PNG with numpy and zlib only (no matplotlib on these machines).

`loglog_png(path, title, xlabel, ylabel, series, points)`: `series` are named polylines (x, y > 0) drawn with
markers, `points` are named single markers (the anchors) drawn beside, with a legend. Text is a 5x7 bitmap font
(upper case, digits, a little punctuation): enough for titles, axis labels, decades and a legend.
"""

from __future__ import annotations

import math
import struct
import zlib

import numpy as np

_FONT_ROWS = {
    "A": "01110 10001 10001 11111 10001 10001 10001",
    "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110",
    "D": "11110 10001 10001 10001 10001 10001 11110",
    "E": "11111 10000 10000 11110 10000 10000 11111",
    "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111",
    "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110",
    "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001",
    "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001",
    "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110",
    "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101",
    "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110",
    "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110",
    "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010",
    "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 01010 00100 00100 00100 00100",
    "Z": "11111 00001 00010 00100 01000 10000 11111",
    "0": "01110 10001 10011 10101 11001 10001 01110",
    "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111",
    "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010",
    "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110",
    "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110",
    "9": "01110 10001 10001 01111 00001 00010 01100",
    ".": "00000 00000 00000 00000 00000 01100 01100",
    ",": "00000 00000 00000 00000 01100 00100 01000",
    "-": "00000 00000 00000 11111 00000 00000 00000",
    "+": "00000 00100 00100 11111 00100 00100 00000",
    "(": "00010 00100 01000 01000 01000 00100 00010",
    ")": "01000 00100 00010 00010 00010 00100 01000",
    "/": "00001 00010 00010 00100 01000 01000 10000",
    ":": "00000 01100 01100 00000 01100 01100 00000",
    "=": "00000 00000 11111 00000 11111 00000 00000",
    "_": "00000 00000 00000 00000 00000 00000 11111",
    "%": "11000 11001 00010 00100 01000 10011 00011",
    "^": "00100 01010 10001 00000 00000 00000 00000",
    "<": "00010 00100 01000 10000 01000 00100 00010",
    ">": "01000 00100 00010 00001 00010 00100 01000",
    "'": "00100 00100 01000 00000 00000 00000 00000",
    " ": "00000 00000 00000 00000 00000 00000 00000",
}
_FONT = {
    ch: np.array([[c == "1" for c in row] for row in rows.split()], dtype=bool)
    for ch, rows in _FONT_ROWS.items()
}

COLORS = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (148, 103, 189),
    (255, 127, 14),
    (23, 190, 207),
    (140, 86, 75),
    (127, 127, 127),
    (188, 189, 34),
    (227, 119, 194),
    (0, 0, 0),
    (0, 90, 50),
]


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.pixels = np.full((height, width, 3), 255, dtype=np.uint8)

    def dot(self, x: float, y: float, color: tuple, radius: int = 1) -> None:
        h, w, _ = self.pixels.shape
        x0, y0 = int(round(x)), int(round(y))
        self.pixels[
            max(0, y0 - radius) : min(h, y0 + radius + 1), max(0, x0 - radius) : min(w, x0 + radius + 1)
        ] = color

    def line(self, x0: float, y0: float, x1: float, y1: float, color: tuple, width: int = 1) -> None:
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for t in np.linspace(0.0, 1.0, n + 1):
            self.dot(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t, color, radius=width // 2)

    def text(
        self, x: int, y: int, text: str, color: tuple = (0, 0, 0), scale: int = 1, vertical: bool = False
    ) -> None:
        for i, ch in enumerate(text.upper()):
            glyph = _FONT.get(ch, _FONT[" "])
            big = np.kron(glyph, np.ones((scale, scale), dtype=bool))
            if vertical:  # read bottom to top
                big = np.rot90(big)
                gx, gy = x, y - (i + 1) * 6 * scale
            else:
                gx, gy = x + i * 6 * scale, y
            h, w = big.shape
            region = self.pixels[gy : gy + h, gx : gx + w]
            region[big[: region.shape[0], : region.shape[1]]] = color

    def save(self, path: str) -> None:
        h, w, _ = self.pixels.shape
        raw = b"".join(b"\x00" + self.pixels[row].tobytes() for row in range(h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        png = (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )
        with open(path, "wb") as handle:
            handle.write(png)


def _fmt_decade(exponent: int) -> str:
    value = 10.0**exponent
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def loglog_png(
    path: str,
    title: str,
    xlabel: str,
    ylabel: str,
    series: dict[str, list[tuple[float, float]]],
    points: dict[str, tuple[float, float]] | None = None,
    width: int = 720,
    height: int = 480,
) -> None:
    points = points or {}
    xs = [x for line in series.values() for x, _ in line] + [x for x, _ in points.values()]
    ys = [y for line in series.values() for _, y in line] + [y for _, y in points.values()]
    xs, ys = [x for x in xs if x > 0], [y for y in ys if y > 0]
    if not xs or not ys:
        raise ValueError("nothing positive to draw")
    lx0, lx1 = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    ly0, ly1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    lx1, ly1 = max(lx1, lx0 + 1), max(ly1, ly0 + 1)
    rows = (len(series) + len(points) + 1) // 2
    height = max(height, 300 + 14 * rows)
    canvas = Canvas(width, height)
    left, right, top, bottom = 70, width - 20, 40, height - 48 - 14 * rows

    def px(x: float) -> float:
        return left + (math.log10(x) - lx0) / (lx1 - lx0) * (right - left)

    def py(y: float) -> float:
        return bottom - (math.log10(y) - ly0) / (ly1 - ly0) * (bottom - top)

    grid, axis = (225, 225, 225), (0, 0, 0)
    for e in range(lx0, lx1 + 1):
        for m in range(1, 10) if e < lx1 else (1,):
            x = px(m * 10.0**e)
            canvas.line(x, top, x, bottom, grid if m > 1 else (190, 190, 190))
        label = _fmt_decade(e)
        canvas.text(int(px(10.0**e)) - len(label) * 3, bottom + 6, label)
    for e in range(ly0, ly1 + 1):
        for m in range(1, 10) if e < ly1 else (1,):
            y = py(m * 10.0**e)
            canvas.line(left, y, right, y, grid if m > 1 else (190, 190, 190))
        label = _fmt_decade(e)
        canvas.text(left - 6 - len(label) * 6, int(py(10.0**e)) - 3, label)
    canvas.line(left, bottom, right, bottom, axis)
    canvas.line(left, top, left, bottom, axis)
    canvas.text(left, 12, title, scale=2)
    canvas.text((left + right) // 2 - len(xlabel) * 3, bottom + 20, xlabel)
    canvas.text(8, (top + bottom) // 2 + len(ylabel) * 3, ylabel, vertical=True)

    legend_y = bottom + 40
    entries = [(name, line, True) for name, line in series.items()] + [
        (name, [xy], False) for name, xy in points.items()
    ]
    for index, (name, line, connected) in enumerate(entries):
        color = COLORS[index % len(COLORS)]
        pts = [(px(x), py(y)) for x, y in line if x > 0 and y > 0]
        if connected:
            for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
                canvas.line(x0, y0, x1, y1, color, width=2)
            for x, y in pts:
                canvas.dot(x, y, color, radius=3)
        else:
            for x, y in pts:  # anchors: a hollow square
                canvas.line(x - 5, y - 5, x + 5, y - 5, color, 2)
                canvas.line(x - 5, y + 5, x + 5, y + 5, color, 2)
                canvas.line(x - 5, y - 5, x - 5, y + 5, color, 2)
                canvas.line(x + 5, y - 5, x + 5, y + 5, color, 2)
        column, row = index % 2, index // 2
        lx, ly = left + column * ((right - left) // 2), legend_y + row * 14
        if connected:
            canvas.line(lx, ly + 3, lx + 18, ly + 3, color, width=2)
        else:
            canvas.dot(lx + 9, ly + 3, color, radius=3)
        canvas.text(lx + 24, ly, name[:48])
    canvas.save(path)
