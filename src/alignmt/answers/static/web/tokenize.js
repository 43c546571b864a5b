/* The tokenizers and vocabularies of an exported model, in the browser: each one the same
   function as its Python twin in alignmt.text (tokenize.py, escape.py, vocab.py), so that a
   sentence typed into the page reaches the graphs as the same ids that `alignmt translate`
   gives them. SentencePiece has no twin here: `alignmt export --web` refuses a model cut with
   it rather than approximate it. Moses' rules are moses.js, for the languages it has. */

import { MosesDetokenizer, MosesTokenizer } from "./moses.js";

export const SPECIALS = { pad: "<pad>", bos: "<s>", eos: "</s>", unk: "<unk>" };
const SPACE = "\u2581"; // "▁", the visible space of the character tokenizer

// Moses' escapes (escape-special-chars.perl) and the older names its inverse also reads.
const ESCAPES = { "&": "&amp;", "|": "&#124;", "<": "&lt;", ">": "&gt;", "'": "&apos;",
  '"': "&quot;", "[": "&#91;", "]": "&#93;" };
const ENTITIES = Object.fromEntries([
  ...Object.entries(ESCAPES).map(([char, entity]) => [entity, char]),
  ["&bar;", "|"], ["&bra;", "["], ["&ket;", "]"],
]);
const ENTITY = new RegExp(Object.keys(ENTITIES).map((e) => e.replace(/[|[\]]/g, "\\$&")).join("|"), "g");
const ESCAPED = /[&|<>'"[\]]/g;

const mosesEscape = (text) => text.replace(ESCAPED, (char) => ESCAPES[char]);
const mosesUnescape = (text) => text.replace(ENTITY, (entity) => ENTITIES[entity]);

// Python's str.split(" ") without the empty strings: spaces alone, never tabs or no-break
// spaces, which stay inside a token.
const spaceSplit = (text) => text.split(" ").filter((token) => token);

/* Each tokenizer: encode(raw sentence) -> tokens, decode(tokens) -> text. */
const KINDS = {
  // Moses' rules (sacremoses in Python), without escaping, lowercased first where asked
  moses: ({ lang, lowercase }) => {
    const [cut, join] = [new MosesTokenizer(lang), new MosesDetokenizer(lang)];
    return {
      encode: (text) => cut.tokenize(lowercase ? text.toLowerCase() : text),
      decode: (tokens) => join.detokenize(tokens),
    };
  },
  char: ({ lowercase }) => ({
    encode: (text) => Array.from((lowercase ? text.toLowerCase() : text).replaceAll(" ", SPACE)),
    decode: (tokens) => tokens.join("").replaceAll(SPACE, " "),
  }),
  // d2l.ai's MTFraEng: no-break spaces to spaces, a space before , . ! ? after a non-space
  d2l: ({ lowercase }) => ({
    encode: (text) => spaceSplit((lowercase ? text.toLowerCase() : text)
      .replace(/[\u202f\u00a0]/g, " ").replace(/(?<=[^ ])([,.!?])/g, " $1")),
    decode: (tokens) => tokens.join(" "),
  }),
  // a corpus tokenised before it arrived; unescaped before lowercasing, as in Python
  space: ({ lowercase, unescape }) => ({
    encode: (text) => {
      const read = unescape ? mosesUnescape(text) : text;
      return spaceSplit(lowercase ? read.toLowerCase() : read);
    },
    decode: (tokens) => tokens.map((t) => (unescape && t !== SPECIALS.unk ? mosesEscape(t) : t))
      .join(" "),
  }),
};

/** The tokenizer a model's manifest describes (its `to_json`), or an Error naming it. */
export function tokenizer(spec) {
  const make = KINDS[spec.kind];
  if (!make) throw new Error(`the ${spec.kind} tokenizer does not run in the browser`);
  return make(spec);
}

/** A vocabulary from its list of tokens, the specials at their fixed ids. */
export class Vocab {
  constructor(itos) {
    this.itos = itos;
    this.stoi = new Map(itos.map((token, id) => [token, id]));
    this.unk = this.stoi.get(SPECIALS.unk);
    this.eos = this.stoi.get(SPECIALS.eos);
  }

  get size() {
    return this.itos.length;
  }

  /** Ids of `tokens`, unknown ones as <unk>, then </s>. */
  encode(tokens) {
    return [...tokens.map((t) => this.stoi.get(t) ?? this.unk), this.eos];
  }

  /** The tokens of `ids`; `strip`: stop at the first </s> and drop <pad> and <s>. */
  decode(ids, strip = true) {
    const out = [];
    for (const id of ids) {
      const token = this.itos[id];
      if (strip && token === SPECIALS.eos) break;
      if (strip && (token === SPECIALS.pad || token === SPECIALS.bos)) continue;
      out.push(token);
    }
    return out;
  }
}
