/* The Moses tokenizer and detokenizer (Koehn et al. 2007, tokenizer.perl and detokenizer.perl)
   in the browser, rule for rule as sacremoses runs them for alignmt.text.tokenize's
   MosesTokenizer: tokenize without escaping and without aggressive dash splits, detokenize
   without unescaping. The character classes and nonbreaking prefixes are sacremoses' own,
   written into moses_tables.js by web/moses_tables.py. tests/test_web_moses.py holds both
   directions to sacremoses on every sentence of the corpora alignmt's catalogue names. */

import { CLASSES, PREFIXES } from "./moses_tables.js";

export const LANGUAGES = Object.keys(PREFIXES);

const C = CLASSES;
const re = (source, flags = "gu") => new RegExp(source, flags);
const inClass = (name) => re(`^[${C[name]}]$`, "u");
const isAnyAlpha = inClass("anyAlpha");
const isLower = inClass("lower");
const isCjk = inClass("cjk");

// Python's str.split() and str.strip(): on every character str.isspace() counts
const SPACES = re(`[${C.space}]+`);
const split = (text) => text.split(SPACES).filter((token) => token);
const strip = (text) => text.replace(re(`^[${C.space}]+|[${C.space}]+$`), "");

const N = C.number;
const ALPHA = C.alpha;
// [pattern, replacement] pairs, applied in order, each over the whole text (re.sub)
const DEDUPLICATE_SPACE = [SPACES, " "];
const ASCII_JUNK = [/[\u0000-\u001f]/gu, ""];
const PAD_NOT_ALNUM = [re(`([${C.pad}])`), " $1 "];
const COMMA_SEPARATE = [
  [re(`([^${N}])[,]`), "$1 , "],
  [re(`[,]([^${N}])`), " , $1"],
  [re(`([${N}])[,]$`), "$1 , "],
];
const APOSTROPHES = {
  en: [
    [re(`([^${ALPHA}])[']([^${ALPHA}])`), "$1 ' $2"],
    [re(`([^${C.alphaNumber}])[']([${ALPHA}])`), "$1 ' $2"],
    [re(`([${ALPHA}])[']([^${ALPHA}])`), "$1 ' $2"],
    [re(`([${ALPHA}])[']([${ALPHA}])`), "$1 '$2"],
    [re(`([${N}])[']([s])`), "$1 '$2"],
  ],
  fr: [
    [re(`([^${ALPHA}])[']([^${ALPHA}])`), "$1 ' $2"],
    [re(`([^${ALPHA}])[']([${ALPHA}])`), "$1 ' $2"],
    [re(`([${ALPHA}])[']([^${ALPHA}])`), "$1 ' $2"],
    [re(`([${ALPHA}])[']([${ALPHA}])`), "$1' $2"],
  ],
  other: [[/'/gu, " ' "]],
};
APOSTROPHES.it = APOSTROPHES.fr;
const TRAILING_DOT_APOSTROPHE = [/\.' ?$/u, " . ' "];

const apply = (text, rules) => rules.reduce((t, [pattern, by]) => t.replace(pattern, by), text);

/** A run of k >= 2 dots -> " " + "DOT" * k + "MULTI", and a space after it unless it ends the
    text; restore() undoes it once the other rules cannot split the dots. */
const multidots = {
  replace: (text) => text.replace(/\.{2,}/gu, (run, at) =>
    ` ${"DOT".repeat(run.length)}MULTI${at + run.length < text.length ? " " : ""}`),
  restore: (text) => text.replace(/(?:DOT)+MULTI/gu, (marker) => ".".repeat((marker.length - 5) / 3)),
};

/** The Moses tokenizer of one language (sacremoses' MosesTokenizer(lang).tokenize(text,
    escape=False)). */
export class MosesTokenizer {
  constructor(lang) {
    const prefixes = PREFIXES[lang];
    if (!prefixes) {
      throw new Error(`Moses' rules for ${lang} do not run in the browser (it has ${LANGUAGES.join(", ")})`);
    }
    this.lang = lang;
    this.nonbreaking = new Set(prefixes.any);
    this.numericOnly = new Set(prefixes.numeric);
    this.apostrophes = APOSTROPHES[lang] ?? APOSTROPHES.other;
  }

  /** The tokens of one sentence. */
  tokenize(sentence) {
    let text = strip(apply(sentence, [DEDUPLICATE_SPACE, ASCII_JUNK]));
    text = apply(text, [PAD_NOT_ALNUM]);
    text = multidots.replace(text);
    text = apply(text, [...COMMA_SEPARATE, ...this.apostrophes]);
    text = this.nonbreakingPrefixes(text);
    text = strip(apply(text, [DEDUPLICATE_SPACE]));
    text = apply(text, [TRAILING_DOT_APOSTROPHE]);
    return split(multidots.restore(text));
  }

  /** A word ending in "." keeps its dot where the word before it abbreviates (a nonbreaking
      prefix, one with a dot inside it, or before a lowercase word), else it is split off. */
  nonbreakingPrefixes(text) {
    const tokens = split(text);
    return tokens.map((token, i) => {
      // tokens hold no spaces, so Python's ^(\S+)\.$ is "two characters or more, the last a dot"
      if (token.length < 2 || !token.endsWith(".")) return token;
      const prefix = token.slice(0, -1);
      const next = tokens[i + 1];
      const kept = (prefix.includes(".") && [...prefix].some((c) => isAnyAlpha.test(c)))
        || (this.nonbreaking.has(prefix) && !this.numericOnly.has(prefix))
        || (next !== undefined && isLower.test(String.fromCodePoint(next.codePointAt(0))));
      const beforeNumber = this.numericOnly.has(prefix) && next !== undefined && /^[0-9]+/u.test(next);
      return kept || beforeNumber ? token : `${prefix} .`;
    }).join(" ");
  }
}

const HYPHEN_SPLIT = / @-@ /gu;
const CURRENCY = re(`^[${C.currency}]+$`, "u");
const PUNCT = /^[,.?!:;\\%}\])]+$/u;
const OPEN_QUOTE = /^['"„“`]+$/u;
const ENGLISH_CONTRACTION = re(`^['][${C.detokAlpha}]`, "u");
const FRENCH_CONTRACTION = re(`[${C.detokAlpha}][']$`, "u");
const STARTS_WITH_ALPHA = re(`^[${C.detokAlpha}]`, "u");

/** The Moses detokenizer of one language (sacremoses' MosesDetokenizer(lang).detokenize(
    tokens, unescape=False)) for the languages moses_tables.js has. */
export class MosesDetokenizer {
  constructor(lang) {
    this.lang = lang;
  }

  /** One sentence from its tokens. */
  detokenize(given) {
    const tokens = split(` ${given.join(" ")} `.replace(HYPHEN_SPLIT, "-"));
    const quotes = {};
    let space = " ";
    let text = "";
    tokens.forEach((token, i) => {
      const first = String.fromCodePoint(token.codePointAt(0));
      if (isCjk.test(first) && this.lang !== "ko") {
        const afterCjk = i > 0 && isCjk.test([...tokens[i - 1]].at(-1));
        text += afterCjk ? token : space + token;
        space = " ";
      } else if (CURRENCY.test(token)) {  // shifted right: no space after it
        text += space + token;
        space = "";
      } else if (PUNCT.test(token)) {  // shifted left; French puts a space before ? ! : ; \ %
        if (this.lang === "fr" && /^[?!:;\\%]$/u.test(token)) text += " ";
        text += token;
        space = " ";
      } else if (this.lang === "en" && i > 0 && ENGLISH_CONTRACTION.test(token)) {
        text += token;
        space = " ";
      } else if (["fr", "it", "ga"].includes(this.lang) && i <= tokens.length - 2
        && FRENCH_CONTRACTION.test(token) && STARTS_WITH_ALPHA.test(tokens[i + 1])) {
        text += space + token;
        space = "";
      } else if (OPEN_QUOTE.test(token)) {
        const quote = /^[„“”]+$/u.test(token) ? '"' : token;
        quotes[quote] ??= 0;
        if (quotes[quote] % 2 === 0) {
          if (this.lang === "en" && token === "'" && i > 0 && /s$/u.test(tokens[i - 1])) {
            text += token;  // a possessive's quote: "the Jones' house"
            space = " ";
          } else {  // an opening quote
            text += space + token;
            space = "";
            quotes[quote] += 1;
          }
        } else {  // a closing quote
          text += token;
          space = " ";
          quotes[quote] += 1;
        }
      } else {
        text += space + token;
        space = " ";
      }
    });
    return strip(text.replace(/ {2,}/gu, " "));
  }
}
