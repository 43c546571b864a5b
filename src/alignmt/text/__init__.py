"""Text, without torch: corpora read with errors that name file and line, tokenizers,
vocabularies, length buckets of ids, the token cache and its parallel parts, data
preparation, and the synthetic tasks.

    build.py           the training split to tokenizers, vocabularies and ids
    cache.py           tokenised corpora as memory-mapped id arrays
    constraints.py     lexical constraints as users write them (JSON lines), read with file:line
                       errors
    copy.py            the pointer-generator's ids from words: extended source ids, copied
                       target ids, copies named
    corpora.py         the corpora alignmt gets by name, each file's URL, size and SHA-256; the
                       data folder; `multi30k:train` to a path
    corpus.py          parallel files and TSV, plain or gzipped, with file:line errors
    download.py        a corpus's files into the data folder, over HTTP or from a mirror:
                       resumed, checked, renamed into place
    escape.py          Moses' escaping of special characters (`&apos;`), and its inverse
    guide.py           the training pairs' word links as token links, for guided alignment
    links.py           Pharaoh files, the words of a sentence, eflomal's links
    parts.py           tokenising a corpus in parallel worker processes
    prepare.py         a data config to everything training reads, cached; validation pairs
    shortlist.py       each source token's likeliest translations, by Dice
    split.py           corpus splits on disk, and length buckets
    tasks.py           the synthetic tasks: reverse, copy, sort
    tokenize.py        Moses, character, SentencePiece, d2l and space tokenizers
    tokenizer_json.py  a SentencePiece model as a Hugging Face tokenizer.json, and where the two
                       cut differently
    vocab.py           the vocabulary: specials at fixed ids, then tokens by frequency
"""
