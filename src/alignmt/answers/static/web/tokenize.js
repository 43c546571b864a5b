/* The tokenizers and vocabularies of an exported model, in the browser: each one the same
   function as its Python twin in alignmt.text (tokenize.py, escape.py, vocab.py), so that a
   sentence typed into the page reaches the graphs as the same ids that `alignmt translate`
   gives them. Moses' rules are moses.js (for the languages it has); SentencePiece is
   @huggingface/tokenizers, reading the model as `alignmt export --web` converted it
   (alignmt.text.tokenizer_json), loaded only by a page that needs it. */

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

const UNKNOWN = " \u2047 "; // " ⁇ ": what SentencePiece writes for a piece it lacks

/** SentencePiece's pieces by @huggingface/tokenizers from `file` (a parsed tokenizer.json),
    and SentencePiece's decoding of them: a piece it lacks as " ⁇ ", "▁" as a space, and the
    first "▁" of the text dropped (its dummy prefix). */
async function sentencepiece({ lowercase }, file) {
  const { Tokenizer } = await import("./tokenizers/tokenizers.min.mjs");
  const cut = new Tokenizer(file, {});
  const { vocab, unk_id: unkId, unk_token: unkToken } = file.model;
  const pieces = new Set(Array.isArray(vocab) ? vocab.map(([piece]) => piece) : Object.keys(vocab));
  const unknown = unkToken ?? vocab[unkId][0];
  return {
    encode: (text) => cut.encode(lowercase ? text.toLowerCase() : text,
      { add_special_tokens: false }).tokens,
    decode: (tokens) => {
      let [text, first] = ["", true];
      for (const token of tokens) {
        let surface = UNKNOWN;
        if (token !== unknown && pieces.has(token)) {
          surface = (first && token.startsWith(SPACE) ? token.slice(1) : token).replaceAll(SPACE, " ");
        }
        text += surface;
        first &&= !surface;
      }
      return text;
    },
  };
}

/** The tokenizer a model's manifest describes (its `to_json`), or an Error naming it;
    `file`: a SentencePiece model's tokenizer.json, parsed. */
export async function tokenizer(spec, file = null) {
  if (spec.kind === "sentencepiece") return sentencepiece(spec, file);
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
