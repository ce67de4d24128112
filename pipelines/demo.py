"""The demo: draws a small image-classification dataset inside the pipeline and writes a cache.

No input is needed. Each example is a real JPEG or PNG image of a coloured shape
(the class) on a plain background, with its label, the shape's bounding box and
colour as arrays, and a caption. Run it, then look at what it wrote:

    python -m pipelines.demo --output ./demo_cache
    beam-shards info ./demo_cache
    beam-shards show ./demo_cache --out grid.png
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from beam_shards import Array, ClassLabel, Features, Image, Manifest, Value
from beam_shards.units import count_flag
from pipelines import common
from pipelines.where import Where

SHAPES = ("circle", "square", "triangle", "diamond", "cross", "ring")
COLOURS = {
    "red": (214, 39, 40), "green": (44, 160, 44), "blue": (31, 119, 180),
    "orange": (255, 127, 14), "purple": (148, 103, 189), "yellow": (230, 200, 30),
}
FEATURES = Features({
    "id": Value("int64"),
    "image": Image(),
    "label": ClassLabel(names=list(SHAPES)),
    "caption": Value("string"),
    "bbox": Array((4,), "float32"),
    "colour": Array((3,), "uint8"),
})
_CHUNK = 250


def make_example(index: int, image_size: int = 64) -> dict[str, Any]:
    """Example `index` of the demo dataset; the same index always gives the same example.

    The class, colour and format (JPEG or PNG, about half each) are drawn by a generator
    seeded with `index`. `bbox` is the shape's (x0, y0, x1, y1) in [0, 1]; `colour` its RGB.
    """
    from PIL import Image as PILImage, ImageDraw

    rng = np.random.default_rng(index)
    shape = SHAPES[int(rng.integers(len(SHAPES)))]
    colour_name = list(COLOURS)[int(rng.integers(len(COLOURS)))]
    colour = COLOURS[colour_name]
    shade = int(rng.integers(20, 90)) if rng.random() < 0.5 else int(rng.integers(170, 240))
    side = int(rng.integers(image_size // 3, image_size * 3 // 4 + 1))
    x0, y0 = (int(v) for v in rng.integers(0, image_size - side + 1, size=2))
    box = (x0, y0, x0 + side - 1, y0 + side - 1)

    picture = PILImage.new("RGB", (image_size, image_size), (shade, shade, shade))
    _draw(ImageDraw.Draw(picture), shape, box, colour)
    image_format = "JPEG" if rng.random() < 0.5 else "PNG"
    buffer = io.BytesIO()
    picture.save(buffer, format=image_format, **({"quality": 90} if image_format == "JPEG" else {}))
    return {
        "id": index,
        "image": buffer.getvalue(),
        "label": shape,
        "caption": f"a {colour_name} {shape} on a {'dark' if shade < 128 else 'light'} background",
        "bbox": np.array([box[0], box[1], box[2] + 1, box[3] + 1], dtype=np.float32) / image_size,
        "colour": np.array(colour, dtype=np.uint8),
    }


def _draw(draw: Any, shape: str, box: tuple[int, int, int, int], colour: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    width = max(2, (x1 - x0) // 5)
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=colour)
    elif shape == "diamond":
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=colour)
    elif shape == "cross":
        draw.rectangle((cx - width / 2, y0, cx + width / 2, y1), fill=colour)
        draw.rectangle((x0, cy - width / 2, x1, cy + width / 2), fill=colour)
    else:
        draw.ellipse(box, outline=colour, width=width)


def _examples(chunk: int, num_examples: int, image_size: int) -> Iterator[tuple[Where, dict[str, Any]]]:
    for index in range(chunk * _CHUNK, min((chunk + 1) * _CHUNK, num_examples)):
        yield Where("demo", index, f"demo example {index}"), make_example(index, image_size)


def build_parser() -> argparse.ArgumentParser:
    parser = common.make_parser(
        "demo", "Draw a small sample image-classification dataset (no input needed) and write it as a cache.",
        default_output="./demo_cache", classes=False)
    parser.add_argument("--num_examples", type=count_flag, default=2000,
                        help="how many examples to draw (default 2000)")
    parser.add_argument("--image_size", type=count_flag, default=64,
                        help="width and height of the images in pixels (default 64)")
    return parser


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the demo pipeline with command-line flags `argv`; returns the published manifest."""
    return common.run_conversion(plan(argv))


def plan(argv: Sequence[str] | None = None) -> common.Conversion:
    """The demo conversion the command-line flags `argv` ask for, ready to run."""
    parser = build_parser()
    args, options = common.parse_args(parser, argv)
    if args.image_size < 8:
        parser.error(f"--image_size must be at least 8 pixels; got {args.image_size}")
    num_chunks = -(-args.num_examples // _CHUNK)

    def read(pipeline: beam.Pipeline) -> beam.PCollection:
        return (pipeline
                | "Chunks" >> beam.Create(range(num_chunks))
                | "Spread" >> beam.Reshuffle()
                | "Draw" >> beam.FlatMap(_examples, args.num_examples, args.image_size))

    return common.Conversion(options, args, read, FEATURES, {"pipeline": "demo", "num_examples": args.num_examples})


if __name__ == "__main__":
    common.run_script(__spec__.name)
