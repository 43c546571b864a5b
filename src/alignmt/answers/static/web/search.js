/* Greedy and beam search over a decoder step, in JavaScript: the searches every engine runs
   (alignmt.decoding.rules: the length limit, GNMT's length penalty, the stopping rule), held
   to the golden cases of tests/search_cases.py as the Python searches are. No ONNX Runtime
   here: `model` is whatever runs the step (the worker's exported graphs, or a test's table):

     model.bos, model.eos            the start and end symbols
     model.encode(sentences)         source ids (each ending in </s>) -> { state, memory }:
                                     fields by name, a row per sentence
     model.step(prev, state, memory, steer)
                                     -> { logProbs (N x V, flat), state, alpha (N x T_src,
                                        flat) or null }; steer: a source position that gets
                                        all of every row's attention, or null
     model.tensor(type, data, dims)  a field of that kind (ONNX Runtime's Tensor in the worker)

   A field is { type, data, dims }, its rows along the first axis. */

/** `fields` with their rows (the first axis) taken at `index`, in that order. */
export function pick(model, fields, index) {
  return Object.fromEntries(Object.entries(fields).map(([name, t]) => {
    const width = t.dims.slice(1).reduce((a, b) => a * b, 1);
    const data = new t.data.constructor(index.length * width);
    index.forEach((row, r) => data.set(t.data.subarray(row * width, (row + 1) * width), r * width));
    return [name, model.tensor(t.type, data, [index.length, ...t.dims.slice(1)])];
  }));
}

/** The `k` largest entries of `values[from, from + n)`, best first (ties: the lower index),
    as [index, value] pairs. */
export function topK(values, from, n, k) {
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

export const row = (flat, r, width) => Array.from(flat.subarray(r * width, (r + 1) * width));

/* GNMT's length penalty, ((5 + |Y|) / 6) ** alpha, in float32 as the searches rank with it. */
export const lengthPenalty = (length, alpha) => Math.fround(((5 + length) / 6) ** alpha);

/** Greedy search of `sentences` in one batch, each row until its </s> or its limit (`limits`,
    one per sentence), the rows still going stepped together and ended ones leaving the
    batch: one output each, { ids, logProbs, score, attention (rows cut to its source) }. */
export async function greedy(model, sentences, limits) {
  let { memory, state } = await model.encode(sentences);
  const rows = sentences.map(() => ({ ids: [], logProbs: [], attention: [] }));
  let going = sentences.map((_, b) => b); // the sentence of each row of the batch
  let prev = going.map(() => model.bos);
  while (going.length) {
    const out = await model.step(prev, state, memory, null);
    const width = out.logProbs.length / going.length;
    const T = memory.mask.dims[1];
    going.forEach((b, r) => {
      const [[id, logProb]] = topK(out.logProbs, r * width, width, 1);
      rows[b].ids.push(id);
      rows[b].logProbs.push(logProb);
      if (out.alpha) rows[b].attention.push(row(out.alpha, r, T).slice(0, sentences[b].length));
    });
    const ended = (b) => rows[b].ids.length >= limits[b] || rows[b].ids.at(-1) === model.eos;
    const kept = [...going.keys()].filter((r) => !ended(going[r]));
    if (kept.length < going.length) {
      memory = pick(model, memory, kept);
      state = pick(model, out.state, kept);
    } else {
      state = out.state;
    }
    going = kept.map((r) => going[r]);
    prev = going.map((b) => rows[b].ids.at(-1));
  }
  return rows.map((r) => ({ ids: r.ids, logProbs: r.logProbs,
    score: r.logProbs.reduce((sum, lp) => sum + lp, 0),
    attention: r.attention.length ? r.attention : null }));
}

/** Beam search over one sentence's source ids with K beams, to at most `limit` tokens,
    ranking ended hypotheses by score / lp(alpha) and stopping once K have ended, at the
    limit, or once its `nbest`-th best ended hypothesis ranks at least as high as its best
    live beam ever could. Every candidate weighed is kept as a tree: { nodes, finished (the
    ended hypotheses, best first, as `greedy` gives its outputs), finishedNodes, steps }. */
export async function beam(model, ids, limit, K, nbest, alpha, steer = new Map()) {
  const encoded = await model.encode([ids]);
  const repeat = new Array(K).fill(0);
  let state = pick(model, encoded.state, repeat);
  const memory = pick(model, encoded.memory, repeat);
  const T = ids.length;
  // only beam 0 is live at first, or all K would extend <s> alike
  let scores = Float32Array.from({ length: K }, (_, k) => (k ? -Infinity : 0));
  let prev = new Array(K).fill(model.bos);
  let ended = 0;
  let best = new Array(nbest).fill(-Infinity); // the nbest best ended hypotheses' score / lp
  const nodes = [];
  let live = new Array(K).fill(null); // the node in each live slot
  let length = 1;
  for (; ; length++) {
    const out = await model.step(prev, state, memory, steer.get(length - 1) ?? null);
    const V = out.logProbs.length / K;
    const cand = candidates(scores, out.logProbs, K, V, model.eos);
    const atLimit = length >= limit;
    const lp = lengthPenalty(length, alpha);
    const ends = cand.map((c) => c.rank < K && Number.isFinite(c.score) && (c.token === model.eos || atLimit));
    const endedScores = cand.map((c, s) => (ends[s] ? Math.fround(c.score / lp) : -Infinity));
    best = [...best, ...endedScores].sort((a, b) => b - a).slice(0, nbest);
    ended += ends.filter(Boolean).length;
    scores = Float32Array.from(cand.slice(0, K), (c) => c.score);
    const bestLive = Math.max(...scores);
    const hopeless = best[nbest - 1] >= bestLive / lp &&
      best[nbest - 1] >= bestLive / lengthPenalty(limit, alpha);
    const done = atLimit || ended >= K || hopeless;
    const next = new Array(K).fill(null);
    cand.forEach((c, slot) => {
      if (c.score === -Infinity) return; // an extension of a beam not yet live
      const status = ends[slot] ? "finished" : slot < K ? (done ? "stopped" : "live") : "pruned";
      if (status === "live") next[slot] = nodes.length;
      nodes.push({ id: nodes.length, step: length - 1, parent: length > 1 ? live[c.parent] : null,
        token: c.token, score: c.score, logProb: c.logProb, status,
        final_score: status === "finished" ? endedScores[slot] : null,
        attention: out.alpha ? row(out.alpha, c.parent, T) : null });
    });
    if (done) break;
    live = next;
    state = pick(model, out.state, cand.slice(0, K).map((c) => c.parent));
    prev = cand.slice(0, K).map((c) => c.token);
  }
  const finishedNodes = nodes.filter((n) => n.status === "finished").map((n) => n.id);
  finishedNodes.sort((a, b) => nodes[b].final_score - nodes[a].final_score);
  return { nodes, finishedNodes, finished: finishedNodes.map((id) => path(nodes, id)), steps: length };
}

/** The 2K best one-token extensions of the K beams, best first, those ending in </s> moved
    last; `rank` is each one's place before that move (torch_engine/beam.py `candidates`). */
function candidates(scores, logProbs, K, V, eos) {
  const width = Math.min(2 * K, V);
  const all = [];
  for (let k = 0; k < K; k++) {
    for (const [token, lp] of topK(logProbs, k * V, V, width)) {
      all.push({ score: Math.fround(scores[k] + lp), logProb: lp, parent: k, token });
    }
  }
  const ranked = all.map((c, i) => [c, i]).sort((a, b) => b[0].score - a[0].score || a[1] - b[1])
    .slice(0, 2 * K).map(([c], rank) => ({ ...c, rank }));
  return [...ranked.filter((c) => c.token !== eos), ...ranked.filter((c) => c.token === eos)];
}

/** The ended hypothesis whose last node is `id`, followed back through its parents. */
function path(nodes, id) {
  const kept = [];
  for (let at = id; at !== null; at = nodes[at].parent) kept.unshift(nodes[at]);
  const sums = kept.map((n) => n.score);
  return {
    ids: kept.map((n) => n.token),
    logProbs: sums.map((s, i) => s - (i ? sums[i - 1] : 0)),
    score: sums.at(-1),
    attention: kept[0].attention ? kept.map((n) => n.attention) : null,
  };
}
