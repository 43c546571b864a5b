"""Text, without torch: corpora read with errors that name file and line, tokenizers,
vocabularies, length buckets of ids, the token cache and its parallel parts, data
preparation, and the synthetic tasks."""
