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
import { SPECIALS, Vocab, tokenizer } from "./tokenize.js";

ort.env.wasm.wasmPaths = new URL("./ort/", import.meta.url).href;
// Threads need a cross-origin-isolated page (SharedArrayBuffer); a plain static host gives one.
ort.env.wasm.numThreads = self.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency) : 1;

const DECIMALS = 1e5; // of probabilities and attention weights, as the server rounds them
const round = (x) => Math.round(x * DECIMALS) / DECIMALS;
const NO_STEP = "needs the model's gradients";

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
    const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
    const [encoder, step] = await Promise.all([site.graphs.encoder, site.graphs.step].map(
      async (name) => ort.InferenceSession.create(
        new Uint8Array(await (await fetch(new URL(name, base))).arrayBuffer()), options)));
    return new Model(manifest, site, encoder, step);
  }

  constructor(manifest, site, encoder, step) {
    this.info = site.info;
    this.search = site.search;
    this.src = { vocab: new Vocab(JSON.parse(manifest.src_vocab).itos),
      tokenizer: tokenizer(JSON.parse(manifest.src_tokenizer)) };
    this.tgt = { vocab: new Vocab(JSON.parse(manifest.tgt_vocab).itos),
      tokenizer: tokenizer(JSON.parse(manifest.tgt_tokenizer)) };
    this.bos = manifest.bos_id;
    this.pad = manifest.pad_id;
    this.eos = manifest.eos_id;
    this.stateNames = manifest.state;
    this.memoryNames = manifest.memory;
    this.attention = manifest.attention;
    // the state slots the attention mechanisms show after each step (`Shown`, by name)
    this.shown = (manifest.shown ?? []).map((s) => s.slot);
    this.encoder = encoder;
    this.stepGraph = step;
    this.steers = step.inputNames.includes("steer");
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
    const out = await this.encoder.run({
      src: new ort.Tensor("int64", src, [sentences.length, T]),
      src_len: new ort.Tensor("int64", lengths, [sentences.length]),
    });
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

/** `fields` with their rows (the first axis) taken at `index`, in that order. */
function pick(fields, index) {
  return Object.fromEntries(Object.entries(fields).map(([name, t]) => {
    const width = t.dims.slice(1).reduce((a, b) => a * b, 1);
    const data = new t.data.constructor(index.length * width);
    index.forEach((row, r) => data.set(t.data.subarray(row * width, (row + 1) * width), r * width));
    return [name, new ort.Tensor(t.type, data, [index.length, ...t.dims.slice(1)])];
  }));
}

/** The `k` largest entries of `values[from, from + n)`, best first (ties: the lower index),
    as [index, value] pairs. */
function topK(values, from, n, k) {
  const best = [];
  for (let i = 0; i < n; i++) {
    const v = values[from + i];
    if (best.length === k && v <= best[k - 1][1]) continue;
    let at = best.length === k ? k - 1 : best.length;
    if (best.length < k) best.push(null);
    while (at > 0 && best[at - 1][1] < v) { best[at] = best[at - 1]; at -= 1; }
    best[at] = [i, v];
  }
  return best;
}

const row = (flat, r, width) => Array.from(flat.subarray(r * width, (r + 1) * width));

// ---- The answers ---------------------------------------------------------------------------------

/** The source of one sentence as tokens, ids and what the model reads; none is an error. */
function source(model, sentence) {
  if (!sentence.trim()) throw new Invalid("sentence: the sentence is empty or only whitespace");
  const tokens = model.src.tokenizer.encode(sentence);
  if (!tokens.length) throw new Invalid("sentence: the source tokenizer finds no tokens in it");
  const ids = model.src.vocab.encode(tokens);
  return { tokens, ids, read: model.src.vocab.decode(ids, false) };
}

/** A finished output as the server words it: text (with <unk> replaced from attention where
    the run asks), the tokens, and the hard alignment. */
function words(model, src, ids, attention) {
  let out = model.tgt.vocab.decode(ids);
  if (model.search.replace_unk && attention) {
    out = out.map((w, i) => (w === SPECIALS.unk
      ? src.tokens[argmax(attention[i].slice(0, src.tokens.length))] : w));
  }
  const tokens = model.tgt.vocab.decode(ids, false);
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

/** /v1/step: the decoder over one sentence, `prefix` forced, `override` steering attention. */
async function step(model, { sentence, prefix = [], override = {}, top_k: k = 5,
  beam_size: beamSize = 1, attribution = null }) {
  if (attribution) throw new Refused(`attribution ${NO_STEP}, which the graphs do not give`);
  if (beamSize !== 1) throw new Refused("the step-through after a prefix is greedy in the browser");
  const src = source(model, sentence);
  const limit = model.limit(src.tokens.length);
  const vocab = model.tgt.vocab;
  if (k > vocab.size) throw new Invalid(`top_k: ${k} is more than the ${vocab.size} target tokens`);
  const steered = new Map(Object.entries(override).map(([i, j]) => [Number(i), Number(j)]));
  if (steered.size && !model.attention) {
    throw new Invalid(`override: model '${model.info.name}' has no attention to override`);
  }
  checkForcing(prefix, steered, limit, src.tokens.length, vocab);
  const follow = prefix.map((t) => vocab.stoi.get(t));
  let { state, memory } = await model.encode([src.ids]);
  const V = vocab.size, T = src.ids.length;
  const steps = [];
  let prev = model.bos;
  while (steps.length < limit && (!steps.length || steps.at(-1).id !== model.eos)) {
    const at = steps.length;
    const out = await model.step([prev], state, memory, steered.get(at) ?? null);
    state = out.state;
    const top = topK(out.logProbs, 0, V, Math.min(k, V));
    const id = at < follow.length ? follow[at] : top[0][0];
    steps.push({ id, logProb: out.logProbs[id], forced: at < follow.length,
      overridden: steered.has(at), attention: out.alpha ? row(out.alpha, 0, T) : null, top,
      shown: Object.fromEntries(model.shown.map((name) => [name, state[name].data[0]])) });
    prev = id;
  }
  const attention = model.attention ? steps.map((s) => s.attention) : null;
  const said = words(model, src, steps.map((s) => s.id), attention);
  return {
    model: model.info.name,
    source_tokens: src.read,
    steps: steps.map((s) => ({
      token: vocab.itos[s.id],
      probability: round(Math.exp(s.logProb)),
      forced: s.forced,
      overridden: s.overridden,
      attention: s.attention && s.attention.map(round),
      top_k: s.top.map(([id, lp]) => ({ token: vocab.itos[id], probability: round(Math.exp(lp)) })),
      attribution: null,
      shown: s.shown,
    })),
    text: said.text,
    tokens: said.tokens,
    score: steps.reduce((sum, s) => sum + s.logProb, 0),
  };
}

/* As the server checks a step request: known prefix tokens, </s> last if at all, within the
   output limit; overrides at steps within it and on source positions within the source. */
function checkForcing(prefix, steered, limit, sourceLength, vocab) {
  const unknown = prefix.filter((t) => !vocab.stoi.has(t) || t === SPECIALS.pad || t === SPECIALS.bos);
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

/* GNMT's length penalty, ((5 + |Y|) / 6) ** alpha, in float32 as the searches rank with it. */
const lengthPenalty = (length, alpha) => Math.fround(((5 + length) / 6) ** alpha);

/** /v1/beam: beam search over one sentence, every candidate it weighed kept as a tree. */
async function beam(model, { sentence, beam_size: size = null, constraints = null }) {
  if (constraints) throw new Refused("a constrained search runs on the server (`alignmt serve`)");
  const K = size ?? model.search.beam_size;
  const alpha = model.search.length_penalty;
  const src = source(model, sentence);
  const limit = model.limit(src.tokens.length);
  const V = model.tgt.vocab.size, T = src.ids.length;
  const encoded = await model.encode([src.ids]);
  const repeat = new Array(K).fill(0);
  let state = pick(encoded.state, repeat);
  const memory = pick(encoded.memory, repeat);
  // only beam 0 is live at first, or all K would extend <s> alike
  let scores = Float32Array.from({ length: K }, (_, k) => (k ? -Infinity : 0));
  let prev = new Array(K).fill(model.bos);
  let ended = 0;
  let best = new Array(K).fill(-Infinity); // the K best ended hypotheses' score / lp
  const nodes = [];
  let live = new Array(K).fill(null); // the node in each live slot
  for (let length = 1; ; length++) {
    const out = await model.step(prev, state, memory);
    const cand = candidates(scores, out.logProbs, K, V, model.eos);
    const atLimit = length >= limit;
    const lp = lengthPenalty(length, alpha);
    const ends = cand.map((c, s) => c.rank < K && Number.isFinite(c.score) && (c.token === model.eos || atLimit));
    const endedScores = cand.map((c, s) => (ends[s] ? Math.fround(c.score / lp) : -Infinity));
    best = [...best, ...endedScores].sort((a, b) => b - a).slice(0, K);
    ended += ends.filter(Boolean).length;
    scores = Float32Array.from(cand.slice(0, K), (c) => c.score);
    const bestLive = Math.max(...scores);
    const hopeless = best[K - 1] >= bestLive / lp && best[K - 1] >= bestLive / lengthPenalty(limit, alpha);
    const done = atLimit || ended >= K || hopeless;
    const next = new Array(K).fill(null);
    cand.forEach((c, slot) => {
      if (c.score === -Infinity) return; // an extension of a beam not yet live
      const status = ends[slot] ? "finished" : slot < K ? (done ? "stopped" : "live") : "pruned";
      if (status === "live") next[slot] = nodes.length;
      nodes.push({ id: nodes.length, step: length - 1, parent: length > 1 ? live[c.parent] : null,
        token: c.token, score: c.score, status, final_score: status === "finished" ? endedScores[slot] : null,
        attention: out.alpha ? row(out.alpha, c.parent, T) : null, met: null });
    });
    if (done) break;
    live = next;
    const parents = cand.slice(0, K).map((c) => c.parent);
    state = pick(out.state, parents);
    prev = cand.slice(0, K).map((c) => c.token);
  }
  const finished = nodes.filter((n) => n.status === "finished").map((n) => n.id);
  finished.sort((a, b) => nodes[b].final_score - nodes[a].final_score);
  return {
    model: model.info.name,
    source_tokens: src.read,
    beam_size: K,
    length_penalty: alpha,
    coverage_penalty: model.search.coverage_penalty,
    nodes: nodes.map((n) => ({ ...n, token: model.tgt.vocab.itos[n.token],
      attention: n.attention && n.attention.map(round) })),
    finished: finished.map((id) => hypothesis(model, src, nodes, id)),
    finished_nodes: finished,
    constraints: null,
  };
}

/** The 2K best one-token extensions of the K beams, best first, those ending in </s> moved
    last; `rank` is each one's place before that move (torch_engine/beam.py `candidates`). */
function candidates(scores, logProbs, K, V, eos) {
  const width = Math.min(2 * K, V);
  const all = [];
  for (let k = 0; k < K; k++) {
    for (const [token, lp] of topK(logProbs, k * V, V, width)) {
      all.push({ score: Math.fround(scores[k] + lp), parent: k, token });
    }
  }
  const ranked = all.map((c, i) => [c, i]).sort((a, b) => b[0].score - a[0].score || a[1] - b[1])
    .slice(0, 2 * K).map(([c], rank) => ({ ...c, rank }));
  return [...ranked.filter((c) => c.token !== eos), ...ranked.filter((c) => c.token === eos)];
}

/** The finished hypothesis that ends at node `id`, followed back through its parents. */
function hypothesis(model, src, nodes, id) {
  const path = [];
  for (let at = id; at !== null; at = nodes[at].parent) path.unshift(nodes[at]);
  const sums = path.map((n) => n.score);
  const logProbs = sums.map((s, i) => s - (i ? sums[i - 1] : 0));
  const attention = model.attention ? path.map((n) => n.attention) : null;
  return asHypothesis(model, src, path.map((n) => n.token), logProbs, sums.at(-1), attention);
}

/** An output as the server's Hypothesis: `ids` with each one's log-probability, the summed
    `score`, and the attention rows (null without attention). */
function asHypothesis(model, src, ids, logProbs, score, attention) {
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
  if (sample || constraints) {
    throw new Refused("sampling and constrained search run on the server (`alignmt serve`)");
  }
  const K = size ?? model.search.beam_size;
  if (nbest > K) throw new Invalid(`nbest: ${nbest} hypotheses need a beam of at least ${nbest}, not ${K}`);
  const sources = sentences.map((sentence) => source(model, sentence));
  const found = K === 1 ? await greedy(model, sources)
    : await Promise.all(sentences.map(async (sentence) =>
      (await beam(model, { sentence, beam_size: K })).finished.slice(0, nbest)));
  return {
    model: model.info.name,
    beam_size: K,
    translations: sources.map((src, b) => ({
      source_tokens: src.read,
      hypotheses: found[b].map((h) => ({ ...h, attention: attention ? h.attention : null })),
    })),
  };
}

/** Greedy decoding of `sources` in one batch, each row until its </s> or its length limit,
    the rows still going stepped together (ended ones leave the batch): one hypothesis
    each, as `hypothesis` words it. */
async function greedy(model, sources) {
  let { memory, state } = await model.encode(sources.map((src) => src.ids));
  const V = model.tgt.vocab.size, T = memory.mask.dims[1];
  const limits = sources.map((src) => model.limit(src.tokens.length));
  const rows = sources.map(() => ({ ids: [], logProbs: [], attention: [] }));
  let going = sources.map((_, b) => b); // the sentence of each row of the batch
  let prev = going.map(() => model.bos);
  while (going.length) {
    const out = await model.step(prev, state, memory);
    going.forEach((b, r) => {
      const [[id, logProb]] = topK(out.logProbs, r * V, V, 1);
      rows[b].ids.push(id);
      rows[b].logProbs.push(logProb);
      if (out.alpha) rows[b].attention.push(row(out.alpha, r, T).slice(0, sources[b].ids.length));
    });
    const kept = [...going.keys()].filter((r) => !ended(rows[going[r]], limits[going[r]], model.eos));
    if (kept.length < going.length) {
      memory = pick(memory, kept);
      state = pick(out.state, kept);
    } else {
      state = out.state;
    }
    going = kept.map((r) => going[r]);
    prev = going.map((b) => rows[b].ids.at(-1));
  }
  return rows.map((r, b) => [asHypothesis(model, sources[b], r.ids, r.logProbs,
    r.logProbs.reduce((sum, lp) => sum + lp, 0), model.attention ? r.attention : null)]);
}

const ended = (r, limit, eos) => r.ids.length >= limit || r.ids.at(-1) === eos;

// ---- The messages ------------------------------------------------------------------------------------

let models = null; // name -> Model, once opened

const ANSWERS = {
  open: async ({ folders }) => {
    const opened = await Promise.all(folders.map((f) => Model.open(f)));
    models = new Map(opened.map((m) => [m.info.name, m]));
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
      self.postMessage({ id, answer: await ANSWERS[what](body ?? {}) });
    } catch (error) {
      self.postMessage({ id, error: error.message, needsServer: error instanceof Refused });
    }
  });
};
