"""The classes of a label column, pinned so that class ids stay the same across splits and versions.

`--classes a,b,c` names them; `--classes_from CACHE` takes those of another cache's
ClassLabel; an append (`--mode append`) with neither takes those of the cache it
appends to, so rows holding some of its classes keep its ids. Without any of these a
pipeline makes the classes of the rows it reads (sorted names, or ids up to the largest).
"""

from __future__ import annotations

import argparse

from beam_shards import CacheError, ClassLabel, Features, read_metadata


def parse_classes(text: str) -> list[str]:
    """The class names of `--classes a,b,c`, in that order (ids 0, 1, 2).

    Raises:
      ValueError: an empty name or one given twice.
    """
    names = [name.strip() for name in text.split(",")]
    if any(not name for name in names):
        raise ValueError(f"--classes {text!r} holds an empty class name; give names separated by commas, like a,b,c")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"--classes {text!r} names {', '.join(map(repr, twice))} more than once")
    return names


def classes_of_cache(path: str, column: str | None) -> list[str]:
    """The class names of the ClassLabel column `column` of the cache at `path` (its only
    ClassLabel when `column` is None).

    Raises:
      ValueError: no cache at `path`, no such column, a column that is no ClassLabel,
        no ClassLabel or several (with `column` None), or a ClassLabel without names.
    """
    try:
        features = read_metadata(path).features
    except (CacheError, OSError) as error:
        raise ValueError(f"--classes_from {path}: {error}") from None
    labels = [name for name, feature in features.items() if isinstance(feature, ClassLabel)]
    if column is None:
        if len(labels) != 1:
            found = f"has several, {', '.join(map(repr, labels))}; name one with --label_column" if labels else \
                f"has none (its columns: {_columns(features)})"
            raise ValueError(f"--classes_from {path}: the cache must have one ClassLabel column to take the "
                             f"classes of; it {found}")
        column = labels[0]
    feature = features.get(column)
    if feature is None:
        raise ValueError(f"--classes_from {path}: the cache has no column {column!r} (its columns: "
                         f"{_columns(features)})")
    if not isinstance(feature, ClassLabel):
        raise ValueError(f"--classes_from {path}: its column {column!r} is {feature!r}, not a ClassLabel")
    if feature.names is None:
        raise ValueError(f"--classes_from {path}: its ClassLabel {column!r} has no class names, only "
                         f"num_classes={feature.num_classes}")
    return list(feature.names)


def _columns(features: Features) -> str:
    return ", ".join(f"{name} ({feature!r})" for name, feature in features.items())


def resolve_class_flags(args: argparse.Namespace) -> None:
    """Sets `args.classes` to the names `--classes` or `--classes_from` gives (None for neither).

    Raises:
      ValueError: a flag that names no classes (see `parse_classes`, `classes_of_cache`).
    """
    if args.classes is not None:
        args.classes = parse_classes(args.classes)
    elif args.classes_from is not None:
        args.classes = classes_of_cache(args.classes_from, getattr(args, "label_column", None))


def pinned_classes(args: argparse.Namespace, column: str) -> list[str] | None:
    """The classes label column `column` is to have: `--classes` or `--classes_from`'s; on an
    append with neither, those of the cache at `--output` when its `column` is a ClassLabel
    of names; otherwise None (the classes of the rows read)."""
    if args.classes is not None:
        return args.classes
    if args.mode != "append":
        return None
    try:
        feature = read_metadata(args.output).features.get(column)
    except CacheError:  # nothing to append to yet: the first version makes the classes
        return None
    return list(feature.names) if isinstance(feature, ClassLabel) and feature.names is not None else None


def pinned_by(args: argparse.Namespace) -> str:
    """What pinned the classes `pinned_classes` gives, for messages."""
    if args.classes_from is not None:
        return f"--classes_from {args.classes_from}"
    if args.classes is not None:
        return "--classes"
    return f"the cache at {args.output} (--mode append keeps its classes)"
