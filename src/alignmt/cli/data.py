"""`alignmt data list | get NAME [--all] [--from DIR] | path NAME[:PART]`: the corpora the
shipped configs name, got into the data folder and found there."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alignmt.text.corpora import CATALOGUE, Corpus, data_root, find, lang, locate, missing_files
from alignmt.text.corpus import CorpusError
from alignmt.text.download import get


def run(args: argparse.Namespace) -> int:
    return {"list": _list, "get": _get, "path": _path}[args.action](args)


def _list(args: argparse.Namespace) -> int:
    root = data_root()
    print(f"data folder: {root} (ALIGNMT_DATA moves it)")
    for corpus in CATALOGUE.values():
        print(f"\n{corpus.name}: {corpus.title}")
        for row in _rows(corpus, root):
            print(f"  {row}")
        print(f"  licence: {corpus.licence}")
        print(f"  cite: {corpus.cite}")
        print(f"  from: {corpus.files[0].url.rsplit('/', 1)[0]}/")
    return 0


def _rows(corpus: Corpus, root: Path) -> list[str]:
    """A line per part: its name in a config, its files, size, and what the folder holds."""
    rows = []
    for part, files in corpus.parts().items():
        spec = f"{corpus.name}:{part}"
        names = files[0].name if len(files) == 1 else " ".join(lang(f.name) for f in files)
        held = len(files) - len(missing_files(corpus, files, root))
        default = [lang(f.name) for f in files if f.default and len(files) > 1]
        when = f"default: {' '.join(default)}" if default else ""
        when = when or ("default" if files[0].default else "--all")
        size = f"{sum(f.size for f in files) / 1e6:.2f} MB"
        rows.append(f"{spec:<28} {names:<12} {size:>9}  {when:<16} have {held}/{len(files)}")
    return rows


def _get(args: argparse.Namespace) -> int:
    corpora = [find(name) for name in args.names]  # every name checked before any download
    mirror = Path(args.mirror) if args.mirror else None
    if mirror is not None and not mirror.is_dir():
        raise CorpusError(f"--from {mirror}: no such folder")
    status = 0
    for corpus in corpora:
        got = get(corpus, data_root(), every=args.all, mirror=mirror, progress=sys.stderr.isatty())
        print(got.summary())
        status = status or int(bool(got.missing or got.refused))
    return status


def _path(args: argparse.Namespace) -> int:
    name, colon, _ = args.name.partition(":")
    if colon:
        print(locate(args.name, None, "alignmt data path"))
        return 0
    corpus, root = find(name), data_root()
    if len(missing_files(corpus, corpus.files, root)) == len(corpus.files):
        raise CorpusError(f"{name} is not in {root}; get it with: alignmt data get {name}")
    print(root / name)
    return 0
