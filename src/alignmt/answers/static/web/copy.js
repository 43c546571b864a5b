/* The pointer-generator's ids (See et al. 2017) from words, in the browser: the same
   functions as their Python twins in alignmt.text.copy, so that a copying model reads the
   page's sentence as `alignmt translate` reads it and its outputs name the words it copied.

   A copying model reads a source word its vocabulary lacks as V_src + the position where the
   word first occurs (so repeats share an id), and its output id V_tgt + j is a copy of the
   source word at position j. */

/** Source ids for a copying model: an unknown token as vocab.size + its first position. */
export function sourceIds(tokens, vocab) {
  const first = new Map();
  const ids = tokens.map((token, j) => {
    if (vocab.stoi.has(token)) return vocab.stoi.get(token);
    if (!first.has(token)) first.set(token, j);
    return vocab.size + first.get(token);
  });
  return [...ids, vocab.eos];
}

/** The source words that copy into an extended id, and that id (V_tgt + the first position):
    those the source vocabulary lacks (or reads as <unk>), or the target vocabulary lacks. */
export function copiedTo(tokens, srcVocab, tgtVocab) {
  const extended = new Map();
  tokens.forEach((token, j) => {
    const known = srcVocab.stoi.has(token) && srcVocab.stoi.get(token) !== srcVocab.unk;
    if (!(known && tgtVocab.stoi.has(token)) && !extended.has(token)) {
      extended.set(token, tgtVocab.size + j);
    }
  });
  return extended;
}

/** The tokens of output ids, copies (V + j) as the source token at position j; `strip`:
    stop at the first </s> and drop <pad> and <s> (Vocab.decode's). */
export function outputTokens(ids, srcTokens, vocab, strip = true) {
  const out = [];
  for (const id of ids) {
    if (id >= vocab.size) out.push(srcTokens[id - vocab.size]);
    else if (strip && id === vocab.eos) break;
    else out.push(...vocab.decode([id], strip));
  }
  return out;
}
