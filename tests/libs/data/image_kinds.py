#!/usr/bin/python3
"""The kinds of image a user's folder holds, made and decoded by Pillow (Debian's python3-pil), an
independent decoder for tests/libs/data/image_folder_test.cc and tests/e2e/adam_run_test.cc.

  image_kinds.py make DIR
      Writes one file of each kind into DIR (PNG of 8 and 16 bits, grey, colour, palette with
      transparency, alpha; JPEG baseline, progressive, grey, CMYK with and without Adobe's marker,
      the eight EXIF orientations, one in a PNG; an upper-case extension), of odd sizes.
  image_kinds.py reference DIR OUT
      Decodes every .png/.jpg/.jpeg (any case) under DIR as a viewer shows it: EXIF orientation
      applied, transparency composited on white, CMYK to RGB; writes OUT/NAME.rgb and
      OUT/NAME.grey (height x width x channels bytes) and OUT/index.json {NAME: [width, height]}.
  image_kinds.py vary DIR
      Rewrites the grey images of a class folder tree in other kinds with the same pixels as a
      viewer shows them (CMYK JPEG, 16-bit and palette PNG, EXIF-turned JPEG, nested folders,
      upper-case extensions), for a job trained on them.
"""
import io
import json
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image, ImageOps


def pattern(width, height, seed):
    """A smooth colour pattern with edges, so that turns and flips show."""
    y, x = np.mgrid[0:height, 0:width]
    r = (x * 255 // max(1, width - 1)).astype(np.uint8)
    g = (y * 255 // max(1, height - 1)).astype(np.uint8)
    b = (((x + 2 * y + seed * 7) % 17) * 15).astype(np.uint8)
    b[: height // 3, : width // 4] = 255 - seed
    return np.dstack([r, g, b])


def png_chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def write_png16(path, samples, colour_type):
    """A 16-bit PNG (Pillow writes grey only at 16 bits): samples height x width x channels."""
    height, width = samples.shape[:2]
    rows = b"".join(b"\x00" + samples[i].astype(">u2").tobytes() for i in range(height))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)))
        f.write(png_chunk(b"IDAT", zlib.compress(rows)))
        f.write(png_chunk(b"IEND", b""))


def strip_adobe(jpeg):
    """The JPEG without its APP14 "Adobe" segment (a CMYK file as non-Adobe tools write it)."""
    at = 2
    while at + 4 <= len(jpeg) and jpeg[at] == 0xFF and jpeg[at + 1] != 0xDA:
        length = int.from_bytes(jpeg[at + 2:at + 4], "big")
        if jpeg[at + 1] == 0xEE and jpeg[at + 4:at + 9] == b"Adobe":
            return jpeg[:at] + jpeg[at + 2 + length:]
        at += 2 + length
    raise ValueError("no Adobe segment")


def exif(orientation):
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


# What EXIF orientation N undoes: the stored image is the shown one turned by the inverse.
STORED = {
    2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90, 7: Image.Transpose.TRANSVERSE, 8: Image.Transpose.ROTATE_270,
}


def make(out):
    os.makedirs(out, exist_ok=True)
    rgb = Image.fromarray(pattern(37, 23, 1))
    rgb.save(f"{out}/rgb8.png")
    rgb.convert("L").save(f"{out}/grey8.png")
    rgb.convert("L").convert("1").save(f"{out}/bilevel.png")
    rgba = np.dstack([pattern(29, 31, 2), (np.arange(29 * 31) % 256).reshape(31, 29)])
    Image.fromarray(rgba.astype(np.uint8), "RGBA").save(f"{out}/rgba.png")
    la = Image.fromarray(pattern(20, 17, 3)[:, :, 0]).convert("LA")
    la.putalpha(Image.fromarray(pattern(20, 17, 3)[:, :, 1]))
    la.save(f"{out}/grey-alpha.png")
    pal = rgb.quantize(16)
    pal.save(f"{out}/palette.png")
    pal.save(f"{out}/palette-transparent.png", transparency=3)
    write_png16(f"{out}/rgb16.png", pattern(19, 13, 4).astype(np.uint16) * 257 + 91, 2)
    rgba16 = np.dstack([pattern(19, 13, 5), pattern(19, 13, 6)[:, :, 0]]).astype(np.uint16)
    write_png16(f"{out}/rgba16.png", rgba16 * 257 + 37, 6)
    Image.fromarray((pattern(21, 11, 7)[:, :, 1].astype(np.uint16) * 257 + 100)
                    .astype(np.uint16), "I;16").save(f"{out}/grey16.png")
    big = Image.fromarray(pattern(64, 48, 8))
    big.save(f"{out}/picture.png")
    big.save(f"{out}/baseline.jpg", quality=90)
    big.save(f"{out}/progressive.jpg", quality=90, progressive=True)
    big.save(f"{out}/UPPER.JPG", quality=85, subsampling=0)
    big.convert("L").save(f"{out}/grey.jpeg", quality=90)
    cmyk = io.BytesIO()
    big.convert("CMYK").save(cmyk, "JPEG", quality=92)
    with open(f"{out}/cmyk-adobe.jpg", "wb") as f:
        f.write(cmyk.getvalue())
    with open(f"{out}/cmyk-plain.jpg", "wb") as f:
        f.write(strip_adobe(cmyk.getvalue()))
    shown = Image.fromarray(pattern(40, 24, 9))
    for n in range(1, 9):
        stored = shown.transpose(STORED[n]) if n in STORED else shown
        stored.save(f"{out}/exif-{n}.jpg", quality=95, subsampling=0, exif=exif(n))
    shown.transpose(STORED[8]).save(f"{out}/exif-8.png", exif=exif(8))


def show(path):
    """The image as a viewer shows it: RGB, float-free, 8 bits."""
    im = Image.open(path)
    adobe = "adobe" in im.info
    im = ImageOps.exif_transpose(im)
    if im.mode == "CMYK":
        if not adobe:  # Pillow takes every CMYK JPEG as Adobe's (inverted); this one is not
            im = Image.fromarray(255 - np.asarray(im), "CMYK")
        return np.asarray(im.convert("RGB"))
    if im.mode in ("I;16", "I;16B", "I"):
        grey = np.rint(np.asarray(im).astype(np.float64) / 257).astype(np.uint8)
        return np.dstack([grey] * 3)
    if im.mode in ("P", "PA") or "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode in ("RGBA", "LA"):
        px = np.asarray(im.convert("RGBA")).astype(np.int32)
        a = px[:, :, 3:4]
        return ((px[:, :, :3] * a + 255 * (255 - a) + 127) // 255).astype(np.uint8)
    return np.asarray(im.convert("RGB"))


def reference(src, out):
    os.makedirs(out, exist_ok=True)
    index = {}
    for name in sorted(os.listdir(src)):
        if not name.lower().endswith((".png", ".jpg", ".jpeg")):
            continue
        rgb = show(os.path.join(src, name))
        grey = Image.fromarray(rgb, "RGB").convert("L")  # BT.601 luma
        rgb.tofile(f"{out}/{name}.rgb")
        np.asarray(grey).tofile(f"{out}/{name}.grey")
        index[name] = [int(rgb.shape[1]), int(rgb.shape[0])]
    with open(f"{out}/index.json", "w") as f:
        json.dump(index, f)


def vary(root):
    """Every grey PNG/JPEG under root rewritten, in turn, as one of the kinds below."""
    files = sorted(os.path.join(d, n) for d, _, ns in os.walk(root) for n in ns
                   if n.lower().endswith((".png", ".jpg")))
    for i, path in enumerate(files):
        im = Image.open(path).convert("L")
        base, _ = os.path.splitext(path)
        kind = i % 8
        if kind == 0:
            continue  # left as it is
        os.remove(path)
        if kind == 1:  # CMYK, Adobe's: black ink only
            k = Image.fromarray(255 - np.asarray(im))
            zero = Image.new("L", im.size, 0)
            Image.merge("CMYK", (zero, zero, zero, k)).save(base + "-cmyk.jpg", quality=95)
        elif kind == 2:
            Image.fromarray(np.asarray(im).astype(np.uint16) * 257, "I;16").save(base + "-16.png")
        elif kind == 3:  # a grey palette whose white is transparent: white again on white
            p = Image.fromarray(np.asarray(im), "P")
            p.putpalette([v for i in range(256) for v in (i, i, i)])
            p.save(base + "-palette.png", transparency=255)
        elif kind == 4:  # stored turned, shown upright
            im.convert("RGB").transpose(Image.Transpose.ROTATE_90).save(
                base + "-exif6.jpg", quality=95, subsampling=0, exif=exif(6))
        elif kind == 5:
            im.convert("RGB").save(base + ".JPEG", quality=95, subsampling=0)
        elif kind == 6:
            d = os.path.join(os.path.dirname(path), "nested", "deeper")
            os.makedirs(d, exist_ok=True)
            im.save(os.path.join(d, os.path.basename(base) + ".PNG"))
        else:
            im.save(base + "-progressive.jpg", quality=95, progressive=True)


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "reference":
        reference(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "vary":
        vary(sys.argv[2])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")


if __name__ == "__main__":
    main()
