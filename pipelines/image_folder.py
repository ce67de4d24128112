"""An image folder laid out as ImageNet is (one sub-folder per class) into a cache.

    ROOT/cat/0001.jpg
    ROOT/cat/more/0002.png      (deeper folders belong to their top-level class)
    ROOT/dog/0003.jpg

Each image becomes an example with `image` (the file's bytes, format kept), `label`
(a ClassLabel of the sorted class-folder names, or of the classes `--classes` or
`--classes_from` pin, or on an append those of the cache, so that a split lacking a
class keeps the ids of the others) and `path` (relative to ROOT, with `/`). Files
directly in ROOT, hidden files and files without an image extension are left out, and
so is the output folder when it lies inside ROOT (so a second run does not take the
cache for a class); an output that is ROOT or holds it is refused.
Each class folder is listed by a worker and its images are keyed `(class, position in
the sorted listing)`, so rows are written class by class in path order whatever the
runner. Files are listed and read through `FileSystems`, so a gs:// or s3:// ROOT works
on Dataflow unchanged. Given no Beam flag, a local ROOT and output and no --dedup, the
run is done in this process without starting Beam (`local_write`), with the same rows
and shard bytes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from beam_shards import ClassLabel, Features, Image, Manifest, Value
from beam_shards.display import few
from beam_shards.format import MANIFEST_NAME
from beam_shards.storage import folders, fs
from beam_shards.terminal import say
from pipelines import classes, common
from pipelines.local_write import check_output, run_here_or_on_beam, write_here
from pipelines.where import Where

if TYPE_CHECKING:
    import apache_beam as beam

DEFAULT_EXTENSIONS = ",".join(common.IMAGE_EXTENSIONS)


def relative_image_path(path: str, prefix: str, extensions: frozenset[str],
                        excluded: frozenset[str] = frozenset()) -> str | None:
    """`path` relative to the root (which `prefix` ends with a separator), or None when the
    file is not an image inside a class folder, or lies in one of the folders `excluded`
    (relative to the root, with `/`)."""
    if not path.startswith(prefix):
        return None
    relative = path[len(prefix):].replace("\\", "/")
    parts = relative.split("/")
    if len(parts) < 2 or any(part.startswith(".") for part in parts):
        return None
    if any(relative.startswith(folder + "/") for folder in excluded):
        return None
    if os.path.splitext(parts[-1])[1].lower() not in extensions:
        return None
    return relative


def output_inside(root: str, output: str) -> str | None:
    """Where the folder `output` lies inside the folder `root`: its path relative to `root`
    with `/`, or None when it lies outside.

    Raises:
      ValueError: `output` is `root` or a folder holding it.
    """
    root_path, output_path = _comparable(root), _comparable(output)
    if (root_path + "/").startswith(output_path + "/"):
        raise ValueError(f"--output {output} is the input folder {root} or holds it; write the cache elsewhere")
    if output_path.startswith(root_path + "/"):
        return output_path[len(root_path) + 1:]
    return None


def _comparable(path: str) -> str:
    """A local path made absolute with symbolic links resolved, with `/`; a URI without a final `/`."""
    if fs.is_local(path):
        return os.path.realpath(fs.local_path(path)).replace(os.sep, "/").rstrip("/")
    return path.rstrip("/")


def class_names(root: str, excluded: str | None = None) -> list[str]:
    """The sorted names of the class folders under `root` (hidden ones, and the folder
    `excluded` when it is one, left out).

    Raises:
      FileNotFoundError: `root` does not exist or holds no class folder.
    """
    if fs.is_local(root):
        local = fs.local_path(root)
        if os.path.isfile(local):
            raise FileNotFoundError(f"input {root} is a file; give the folder that holds one folder per class")
        if not os.path.isdir(local):
            raise FileNotFoundError(f"input folder {root} does not exist")
        names = [entry.name for entry in os.scandir(local) if entry.is_dir() and not entry.name.startswith(".")]
    else:
        prefix = fs.join(root, "")
        files = folders.list_files([prefix + "*/**"])
        names = {path[len(prefix):].split("/", 1)[0] for path in files}
        names = [name for name in names if not name.startswith(".")]
    names = [name for name in names if name != excluded]
    if not names:
        raise FileNotFoundError(f"input folder {root} has no class sub-folders (expected ROOT/CLASS/IMAGE files)")
    return sorted(names)


def left_out_classes(root: str, names: list[str], extensions: frozenset[str]) -> dict[str, str]:
    """The class folders that are no classes, each with why: one holding a beam_shards cache
    (an old output left in the root), or one holding no file of `extensions`."""
    wanted = ", ".join(sorted(extensions))
    if fs.is_local(root):
        def holds_an_image(folder: str) -> bool:
            return any(os.path.splitext(name)[1].lower() in extensions and not name.startswith(".")
                       for _, _, names_ in os.walk(fs.local_path(folder)) for name in names_)
    else:
        prefix = fs.join(root, "")
        found = {path[len(prefix):].split("/", 1)[0] for path in folders.list_files([prefix + "*/**"])
                 if relative_image_path(path, prefix, extensions) is not None}

        def holds_an_image(folder: str) -> bool:
            return folder.rstrip("/").rsplit("/", 1)[-1] in found
    left_out = {}
    for name in names:
        folder = fs.join(root, name)
        if fs.exists(fs.join(folder, MANIFEST_NAME)):
            left_out[name] = "holds a beam_shards cache"
        elif not holds_an_image(folder):
            left_out[name] = f"holds no {wanted} file"
    return left_out


def features_for(names: list[str]) -> Features:
    return Features({"image": Image(nullable=False), "label": ClassLabel(names=names), "path": Value("string")})


def class_examples(name: str, prefix: str, extensions: frozenset[str],
                   excluded: frozenset[str]) -> Iterator[tuple[Where, dict[str, Any]]]:
    """The images of class folder `name` as `(where, example)` pairs, keyed by their place in the sorted listing."""
    for position, path in enumerate(sorted(folders.list_dir(prefix + name, recursive=True))):
        relative = relative_image_path(path, prefix, extensions, excluded)
        if relative is not None:
            yield Where(name, position, path), {"image": path, "label": name, "path": relative}


def build_parser() -> argparse.ArgumentParser:
    parser = common.make_parser(
        "image_folder", "Convert an image folder with one sub-folder per class (ImageNet layout) into a cache.")
    parser.add_argument("--input", required=True, metavar="ROOT",
                        help="the folder holding one sub-folder per class (local, gs://, s3://...)")
    parser.add_argument("--extensions", default=DEFAULT_EXTENSIONS,
                        help=f"comma-separated file extensions to take (default {DEFAULT_EXTENSIONS})")
    parser.epilog += ("Given no Beam flag at all, a local ROOT and --output and no --dedup, the conversion runs in this\n"
                      "process without starting Beam: the same checks, errors, rows and shard bytes (in input order,\n"
                      "--no_deterministic or not). Any Beam flag (--runner=FnApiRunner too) runs it on Beam.\n")
    return parser


class _Classes(NamedTuple):
    """What a run finds of its input before it lists the images: the class folders to read, where
    they are, which files are images, what is left out, and the features."""

    names: list[str]
    prefix: str
    extensions: frozenset[str]
    excluded: frozenset[str]
    features: Features
    metadata: dict[str, Any]

    def examples(self) -> Iterator[tuple[Where, dict[str, Any]]]:
        """Every image of every class, as `(where, example)` pairs."""
        for name in self.names:
            yield from class_examples(name, self.prefix, self.extensions, self.excluded)


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Runs the pipeline with command-line flags `argv` (in this process given no Beam flag, a local
    input and output and no --dedup, `local_write`); returns the published manifest."""
    return run_here_or_on_beam(argv, build_parser, _here, plan)


def _here(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Manifest:
    found = _classes(parser, args)
    check_output(args, found.features, found.metadata)
    return write_here(found.examples(), args, found.features, found.metadata)


def plan(argv: Sequence[str] | None = None) -> common.Conversion:
    """The conversion the command-line flags `argv` ask for, on Beam, ready to run."""
    parser = build_parser()
    args, options = common.parse_args(parser, argv)
    found = _classes(parser, args)

    def read(pipeline: beam.Pipeline) -> beam.PCollection:
        import apache_beam as beam

        return (pipeline
                | "Classes" >> beam.Create(found.names)
                | "SpreadClasses" >> beam.Reshuffle()
                | "ListImages" >> beam.FlatMap(class_examples, found.prefix, found.extensions, found.excluded)
                | "Spread" >> beam.Reshuffle())

    return common.Conversion(options, args, read, found.features, found.metadata)


def _classes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> _Classes:
    """The classes of the input `args` name (exits with a usage error when there are none to read)."""
    root = common.input_uri(args.input)
    extensions = frozenset("." + e.strip().lower().lstrip(".") for e in args.extensions.split(",") if e.strip())
    try:
        output = output_inside(root, args.output)
        names = class_names(root, output)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    left_out = left_out_classes(root, names, extensions)
    if left_out:
        say("left out of the classes: " + "; ".join(f"{name} ({why})" for name, why in sorted(left_out.items())),
            file=sys.stderr)
    names = [name for name in names if name not in left_out]
    if not names:
        parser.error(f"no class folder of {args.input} holds a {', '.join(sorted(extensions))} file")
    excluded = frozenset(left_out) | ({output} if output is not None else set())
    pinned = classes.pinned_classes(args, "label")
    outside = [name for name in names if pinned is not None and name not in pinned]
    if outside and not args.skip_bad:  # with --skip_bad each of their images is a bad input
        parser.error(f"class folder {few(outside)} of {args.input} is not one of the {len(pinned)} classes of "
                     f"{classes.pinned_by(args)} ({few(pinned)})")
    metadata = {"pipeline": "image_folder", "input": args.input, **({"left_out": left_out} if left_out else {})}
    return _Classes(names, fs.join(root, ""), extensions, excluded, features_for(pinned or names), metadata)


if __name__ == "__main__":
    common.run_script(__spec__.name)
