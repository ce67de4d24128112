"""The docs' links lead somewhere: README links every page of docs/, and each relative link of
README and docs/ names a file of the repository and, for a page, one of its headings."""

from __future__ import annotations

import os
import re

import pytest

from test_readme import REPO, docs

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings (not of lines in its code blocks)."""
    return {anchor(match.group(1)) for match in re.finditer(r"^#+ (.+)$", _CODE_BLOCK.sub("", text), re.MULTILINE)}


def relative_links(text: str) -> list[str]:
    return [link for link in _LINK.findall(_CODE_BLOCK.sub("", text)) if "://" not in link]


def test_anchor_is_githubs():
    assert anchor("Polars, DuckDB, pyarrow.dataset") == "polars-duckdb-pyarrowdataset"
    assert anchor("The `beam-shards` command") == "the-beam-shards-command"
    assert anchor("image_folder") == "image_folder"


def test_readme_links_every_page_of_docs():
    linked = set(relative_links(dict(docs())["README.md"]))
    pages = {name for name, _ in docs()} - {"README.md"}
    assert pages <= linked, f"README links none of {sorted(pages - linked)}"


@pytest.mark.parametrize("name, text", docs(), ids=[name for name, _ in docs()])
def test_every_relative_link_leads_to_a_file_and_heading(name, text):
    for link in relative_links(text):
        target, _, fragment = link.partition("#")
        path = os.path.normpath(os.path.join(REPO, os.path.dirname(name), target)) if target else \
            os.path.join(REPO, name)
        assert os.path.exists(path), f"{name}: {link} leads to no file"
        if fragment and path.endswith(".md"):
            with open(path, encoding="utf-8") as handle:
                assert fragment in anchors(handle.read()), f"{name}: {link} names no heading of {target or name}"
