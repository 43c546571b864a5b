/* The explorer's fourth host: a Web Worker that runs an exported model's two graphs with ONNX
   Runtime Web (WebAssembly) and answers the explorer's questions in the page, with nothing
   installed and no server. It answers as the server's /v1/models, /v1/translate, /v1/step
   and /v1/beam do (alignmt.answers, over the torch engine's decoding/torch_engine/trace.py):
   the same translations, the same step-through with a forced prefix and an attention
   override, the same beam search and tree, under the same length limit, length penalty and
   stopping rule (alignmt.decoding.rules). What needs the model's gradients or its training
   run (attribution, snapshots), sampling or a constrained search is refused with the reason.

   Messages: {id, what, body} in; {id, answer} or {id, error, needsServer} out. The first
   message, {what: "open", body: {folders}}, opens the exported folders (URLs relative to the
   page), each written by `alignmt export RUN --out DIR --web`. */

import * as ort from "./ort/ort.wasm.min.mjs";
import { copiedTo, outputTokens, sourceIds } from "./copy.js";
import { problem } from "./requests.js";
import { beam as beamSearch, greedy as greedySearch, row, topK } from "./search.js";
import { SPECIALS, Vocab, tokenizer } from "./tokenize.js";

ort.env.wasm.wasmPaths = new URL("./ort/", import.meta.url).href;

/** How the page runs the graphs, said beside the model: threads need a cross-origin isolated
    page (SharedArrayBuffer), which the site's coi-serviceworker.js makes where the host sends
    no COOP/COEP headers itself; without it ONNX Runtime Web runs one thread. */
function runtime() {
  const threads = ort.env.wasm.numThreads; // ONNX Runtime's pick once a session is open
  const count = `${threads} thread${threads === 1 ? "" : "s"}`;
  const why = self.crossOriginIsolated ? `of ${navigator.hardwareConcurrency} cores`
    : "(the page is not cross-origin isolated)";
  return `runs in this browser: ONNX Runtime Web ${ort.env.versions.common}, ${count} ${why}`;
}

const DECIMALS = 1e5; // of probabilities and attention weights, as the server rounds them
const round = (x) => Math.round(x * DECIMALS) / DECIMALS;

class Refused extends Error {} // what the browser cannot do: the explorer says why, not "error"
class Invalid extends Error {} // a request the server would answer with 422

// ---- An exported model ------------------------------------------------------------------------

class Model {
  static async open(folder) {
    const base = new URL(folder.endsWith("/") ? folder : `${folder}/`, self.location.href);
    const json = async (name) => {
      const response = await fetch(new URL(name, base));
      if (!response.ok) throw new Error(`${new URL(name, base)}: HTTP ${response.status}`);
      return response.json();
    };
    const [manifest, site] = await Promise.all([json("manifest.json"), json("site.json")]);
    // int8-stored weights (alignmt's onnx_engine/stored_int8.py) folded into float32 at load
    const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all",
      extra: { session: { disable_quant_qdq: "1" } } };
    const [encoder, step] = await Promise.all([site.graphs.encoder, site.graphs.step].map(
      async (name) => ort.InferenceSession.create(
        new Uint8Array(await (await fetch(new URL(name, base))).arrayBuffer()), options)));
    // each side's tokenizer, with its tokenizer.json where SentencePiece cuts it
    const cutters = await Promise.all(["source", "target"].map(async (side, i) => {
      const spec = JSON.parse([manifest.src_tokenizer, manifest.tgt_tokenizer][i]);
      const file = site.tokenizers?.[side];
      return tokenizer(spec, file ? await json(file) : null);
    }));
    return new Model(manifest, site, encoder, step, cutters);
  }

  constructor(manifest, site, encoder, step, [srcTokenizer, tgtTokenizer]) {
    this.info = site.info;
    this.search = site.search;
    this.refusals = site.refusals; // feature -> why the browser cannot (decoding.engine.FEATURES)
    this.requests = site.requests; // each route's JSON Schema, the server's
    this.src = { vocab: new Vocab(JSON.parse(manifest.src_vocab).itos), tokenizer: srcTokenizer };
    this.tgt = { vocab: new Vocab(JSON.parse(manifest.tgt_vocab).itos), tokenizer: tgtTokenizer };
    this.bos = manifest.bos_id;
    this.pad = manifest.pad_id;
    this.eos = manifest.eos_id;
    this.stateNames = manifest.state;
    this.memoryNames = manifest.memory;
    this.attention = manifest.attention;
    // a copying model (the pointer-generator) reads and writes extended ids (copy.js)
    this.copies = manifest.copies ?? false;
    // the state slots the attention mechanisms show after each step (`Shown`, by name)
    this.shown = manifest.shown ?? [];
    this.encoder = encoder;
    this.stepGraph = step;
    this.steers = step.inputNames.includes("steer");
  }

  /** A field of the graphs' kind (search.js builds new rows with it). */
  tensor(type, data, dims) {
    return new ort.Tensor(type, data, dims);
  }

  /** The most output tokens (</s> included) for `n` source tokens: ratio * (n + 1) + offset
      in float32, truncated, at least one (rules.max_output_len). */
  limit(n) {
    const product = Math.fround(Math.fround(n + 1) * Math.fround(this.search.max_len_ratio));
    return Math.max(Math.trunc(product) + this.search.max_len_offset, 1);
  }

  /** Sentences' source ids (each ending in </s>) -> the first state and the memory, a row
      each, the batch padded to its longest. */
  async encode(sentences) {
    const T = Math.max(...sentences.map((ids) => ids.length));
    const src = new BigInt64Array(sentences.length * T).fill(BigInt(this.pad));
    sentences.forEach((ids, b) => src.set(ids.map(BigInt), b * T));
    const lengths = BigInt64Array.from(sentences, (ids) => BigInt(ids.length));
    const given = {
      src: new ort.Tensor("int64", src, [sentences.length, T]),
      src_len: new ort.Tensor("int64", lengths, [sentences.length]),
    };
    if (this.encoder.inputNames.includes("keep")) {  // every source embedding read
      given.keep = new ort.Tensor("float32", new Float32Array(sentences.length * T).fill(1),
        [sentences.length, T]);
    }
    const out = await this.encoder.run(given);
    const memory = Object.fromEntries(this.memoryNames.map((n) => [n, out[n]]));
    const state = Object.fromEntries(this.stateNames.map((n) => [n, out[`first_${n}`]]));
    return { state, memory };
  }

  /** One decoder step over N rows: log-probabilities (N x V, flat), the new state, alpha
      (N x T_src, flat, or null). `steer`: a source position that gets all of every row's
      attention at this step, or null. */
  async step(prev, state, memory, steer = null) {
    const rows = prev.length;
    const given = { prev: new ort.Tensor("int64", BigInt64Array.from(prev, BigInt), [rows]),
      ...state, ...memory };
    if (this.steers) {
      const T = memory.mask.dims[1];
      const weights = new Float32Array(rows * T);
      if (steer !== null) for (let r = 0; r < rows; r++) weights[r * T + steer] = 1;
      given.steer = new ort.Tensor("float32", weights, [rows, T]);
    }
    // the graph takes only the fields it reads (a vanilla step no memory states; a state slot
    // that a step writes for the explorer but never reads is no input)
    const feeds = Object.fromEntries(this.stepGraph.inputNames.map((n) => [n, given[n]]));
    const out = await this.stepGraph.run(feeds);
    const next = Object.fromEntries(this.stateNames.map((n) => [n, out[`next_${n}`]]));
    return { logProbs: out.log_probs.data, state: next, alpha: this.attention ? out.alpha.data : null };
  }
}

// ---- The answers ---------------------------------------------------------------------------------

/** The source of one sentence as tokens, ids and what the model reads; none is an error. */
function source(model, sentence) {
  if (!sentence.trim()) throw new Invalid("sentence: the sentence is empty or only whitespace");
  const tokens = model.src.tokenizer.encode(sentence);
  if (!tokens.length) throw new Invalid("sentence: the source tokenizer finds no tokens in it");
  const read = model.src.vocab.decode(model.src.vocab.encode(tokens), false);
  const ids = model.copies ? sourceIds(tokens, model.src.vocab) : model.src.vocab.encode(tokens);
  return { tokens, ids, read };
}

/** An output id's token: the target vocabulary's, or a copied source word's. */
const tokenOf = (model, src, id) => outputTokens([id], src.tokens, model.tgt.vocab, false)[0];

/** A finished output as the server words it: text (with <unk> replaced from attention where
    the run asks), the tokens, and the hard alignment. */
function words(model, src, ids, attention) {
  let out = outputTokens(ids, src.tokens, model.tgt.vocab);
  if (model.search.replace_unk && attention) {
    out = out.map((w, i) => (w === SPECIALS.unk
      ? src.tokens[argmax(attention[i].slice(0, src.tokens.length))] : w));
  }
  const tokens = outputTokens(ids, src.tokens, model.tgt.vocab, false);
  return { text: model.tgt.tokenizer.decode(out), tokens, alignment: alignment(attention, tokens) };
}

const argmax = (xs) => xs.reduce((best, x, i) => (x > xs[best] ? i : best), 0);

/** Each output token's most attended source token, </s> out on both sides (`j-i` pairs). */
function alignment(attention, tokens) {
  if (!attention) return null;
  const rows = tokens.length - (tokens.at(-1) === SPECIALS.eos ? 1 : 0);
  if (rows === 0 || attention[0].length < 2) return "";
  return attention.slice(0, rows).map((r, i) => `${argmax(r.slice(0, -1))}-${i}`).join(" ");
}

/** A state tensor's value for the first row: a number (rows,), or weights (rows, T_src, N)
    as N arrays of T_src numbers, one per head. */
function firstRow(tensor, kind) {
  if (kind !== "weights") return tensor.data[0];
  const [, T, n] = tensor.dims;
  return Array.from({ length: n }, (_, h) => Array.from({ length: T }, (_, j) => tensor.data[j * n + h]));
}

/** /v1/step: the decoder over one sentence, `prefix` forced, `override` steering attention. */
async function step(model, { sentence, prefix = [], override = {}, top_k: k = 5,
  beam_size: beamSize = 1, attribution = null }) {
  if (attribution) throw new Refused(model.refusals.attribution);
  if (beamSize !== 1) throw new Refused("the step-through after a prefix is greedy in the browser");
  const src = source(model, sentence);
  const limit = model.limit(src.tokens.length);
  const vocab = model.tgt.vocab;
  if (k > vocab.size) throw new Invalid(`top_k: ${k} is more than the ${vocab.size} target tokens`);
  const steered = new Map(Object.entries(override).map(([i, j]) => [Number(i), Number(j)]));
  if (steered.size && !model.attention) {
    throw new Invalid(`override: model '${model.info.name}' has no attention to override`);
  }
  // a copying model's prefix may name a source word it copies, by its extended id
  const copied = model.copies ? copiedTo(src.tokens, model.src.vocab, vocab) : new Map();
  checkForcing(prefix, steered, limit, src.tokens.length, vocab, copied);
  const follow = prefix.map((t) => copied.get(t) ?? vocab.stoi.get(t));
  let { state, memory } = await model.encode([src.ids]);
  const V = vocab.size, T = src.ids.length;
  const steps = [];
  let prev = model.bos;
  while (steps.length < limit && (!steps.length || steps.at(-1).id !== model.eos)) {
    const at = steps.length;
    const out = await model.step([prev], state, memory, steered.get(at) ?? null);
    state = out.state;
    // over the vocabulary, or a copying model's V + T_src extended ids
    const top = topK(out.logProbs, 0, out.logProbs.length, Math.min(k, V));
    const id = at < follow.length ? follow[at] : top[0][0];
    steps.push({ id, logProb: out.logProbs[id], forced: at < follow.length,
      overridden: steered.has(at), attention: out.alpha ? row(out.alpha, 0, T) : null, top,
      shown: Object.fromEntries(model.shown.map((s) => [s.slot, firstRow(state[s.slot], s.kind)])) });
    prev = id;
  }
  const attention = model.attention ? steps.map((s) => s.attention) : null;
  const said = words(model, src, steps.map((s) => s.id), attention);
  return {
    model: model.info.name,
    source_tokens: src.read,
    steps: steps.map((s) => ({
      token: tokenOf(model, src, s.id),
      probability: round(Math.exp(s.logProb)),
      forced: s.forced,
      overridden: s.overridden,
      attention: s.attention && s.attention.map(round),
      top_k: s.top.map(([id, lp]) => ({ token: tokenOf(model, src, id), probability: round(Math.exp(lp)) })),
      attribution: null,
      shown: s.shown,
    })),
    text: said.text,
    tokens: said.tokens,
    score: steps.reduce((sum, s) => sum + s.logProb, 0),
  };
}

/* As the server checks a step request: known prefix tokens (or words a copying model copies,
   `copied`), </s> last if at all, within the
   output limit; overrides at steps within it and on source positions within the source. */
function checkForcing(prefix, steered, limit, sourceLength, vocab, copied) {
  const unknown = prefix.filter((t) => !(vocab.stoi.has(t) || copied.has(t)) ||
    t === SPECIALS.pad || t === SPECIALS.bos);
  if (unknown.length) {
    throw new Invalid(`prefix: tokens not in the target vocabulary: [${unknown.map(pyRepr).join(", ")}]`);
  }
  if (prefix.slice(0, -1).includes(SPECIALS.eos)) throw new Invalid("prefix: </s> may only come last");
  if (prefix.length > limit) {
    throw new Invalid(`prefix: ${prefix.length} tokens, more than this sentence's output limit of ${limit}`);
  }
  for (const [at, j] of steered) {
    if (at >= limit) throw new Invalid(`override: step ${at} is past this sentence's output limit of ${limit} steps`);
    if (j > sourceLength) {
      throw new Invalid(`override: step ${at}: source position ${j} is past the source's last ` +
        `token (</s>, at ${sourceLength})`);
    }
  }
}

/** A string as Python's repr writes it, as the server's messages quote tokens. */
const pyRepr = (text) => {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  const escaped = text.replaceAll("\\", "\\\\").replaceAll("\n", "\\n").replaceAll("\t", "\\t");
  return quote + (quote === "'" ? escaped.replaceAll("'", "\\'") : escaped) + quote;
};

/** /v1/beam: beam search over one sentence, every candidate it weighed kept as a tree
    (search.js's `beam` with n-best K, as the server's beam tree is searched). */
async function beam(model, { sentence, beam_size: size = null, constraints = null }) {
  if (constraints) throw new Refused(model.refusals["constrained search"]);
  const K = size ?? model.search.beam_size;
  const alpha = model.search.length_penalty;
  const src = source(model, sentence);
  const searched = await beamSearch(model, src.ids, model.limit(src.tokens.length), K, K, alpha);
  return {
    model: model.info.name,
    source_tokens: src.read,
    beam_size: K,
    length_penalty: alpha,
    coverage_penalty: model.search.coverage_penalty,
    nodes: searched.nodes.map((n) => ({ id: n.id, step: n.step, parent: n.parent,
      token: tokenOf(model, src, n.token), score: n.score, status: n.status,
      final_score: n.final_score, attention: n.attention && n.attention.map(round), met: null })),
    finished: searched.finished.map((h) => asHypothesis(model, src, h)),
    finished_nodes: searched.finishedNodes,
    constraints: null,
  };
}

/** An output of search.js ({ ids, logProbs, score, attention }) as the server's Hypothesis. */
function asHypothesis(model, src, { ids, logProbs, score, attention }) {
  const said = words(model, src, ids, attention);
  return {
    text: said.text,
    tokens: said.tokens,
    score,
    probabilities: logProbs.map((lp) => round(Math.exp(lp))),
    attention: attention && attention.map((r) => r.map(round)),
    alignment: said.alignment,
    met: null,
  };
}

/** /v1/translate: many sentences at once, greedy in one batch (every sentence's rows step
    together) or each by beam search, the n best of each. */
async function translate(model, { sentences, beam_size: size = null, nbest = 1, attention = false,
  sample = null, constraints = null }) {
  if (sample) throw new Refused(model.refusals.sampling);
  if (constraints) throw new Refused(model.refusals["constrained search"]);
  const K = size ?? model.search.beam_size;
  if (nbest > K) throw new Invalid(`nbest: ${nbest} hypotheses need a beam of at least ${nbest}, not ${K}`);
  const sources = sentences.map((sentence) => source(model, sentence));
  const limits = sources.map((src) => model.limit(src.tokens.length));
  const found = K === 1
    ? (await greedySearch(model, sources.map((src) => src.ids), limits)).map((h) => [h])
    : await Promise.all(sources.map(async (src, b) => (await beamSearch(model, src.ids,
      limits[b], K, nbest, model.search.length_penalty)).finished.slice(0, nbest)));
  return {
    model: model.info.name,
    beam_size: K,
    translations: sources.map((src, b) => ({
      source_tokens: src.read,
      hypotheses: found[b].map((h) => asHypothesis(model, src, h))
        .map((h) => ({ ...h, attention: attention ? h.attention : null })),
    })),
  };
}

// ---- The messages ------------------------------------------------------------------------------------

let models = null; // name -> Model, once opened

const ANSWERS = {
  // `threads`: as many as asked (a benchmark's), else as many as ONNX Runtime picks: half the
  // cores, at most 4, where the page is cross-origin isolated
  open: async ({ folders, threads }) => {
    if (threads) ort.env.wasm.numThreads = threads;
    const opened = await Promise.all(folders.map((f) => Model.open(f)));
    models = new Map(opened.map((m) => [m.info.name, m]));
    for (const model of opened) model.info.runtime = runtime();
    return [...models.keys()];
  },
  models: async () => [...models.values()].map((m) => m.info),
  translate: (body) => translate(named(body.model), body),
  step: (body) => step(named(body.model), body),
  beam: (body) => beam(named(body.model), body),
  snapshots: async () => {
    throw new Refused("attention over training reads the run's snapshots, which an exported " +
      "model does not hold: `alignmt serve RUN_DIR` shows them");
  },
};

function named(name) {
  if (name == null) return models.values().next().value;
  if (!models.has(name)) {
    throw new Invalid(`model: no model named '${name}'; served: ${[...models.keys()].join(", ")}`);
  }
  return models.get(name);
}

// One question at a time, in order: ONNX Runtime's sessions run one call at a time.
let queue = Promise.resolve();
self.onmessage = ({ data: { id, what, body } }) => {
  queue = queue.then(async () => {
    try {
      if (!ANSWERS[what]) throw new Invalid(`the explorer asks ${Object.keys(ANSWERS)}, not ${what}`);
      const schema = models && models.values().next().value.requests[what];
      const bad = schema && problem(schema, body ?? {});
      if (bad) throw new Invalid(bad);
      self.postMessage({ id, answer: await ANSWERS[what](body ?? {}) });
    } catch (error) {
      self.postMessage({ id, error: error.message, needsServer: error instanceof Refused });
    }
  });
};
