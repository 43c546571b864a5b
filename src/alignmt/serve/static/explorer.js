/* alignmt explorer: the decoder one step at a time, "what if" by forcing a token or moving a
   step's attention, the beam as a tree, and attention over training.

   It asks `alignmt serve` (/v1/models, /v1/step, /v1/beam, /v1/snapshots), or, in a page
   written by `alignmt explore`, reads the same answers from the page itself. Plain
   JavaScript, no library, no build step. Every interaction's time, from the click to the
   frame that shows its result, is kept in window.alignmtTimings. */
"use strict";

const TOP_K = 5;
const DATA = embeddedData(); // null when the page is served live
const timings = (window.alignmtTimings = []);

function embeddedData() {
  const node = document.getElementById("alignmt-data");
  return node ? JSON.parse(node.textContent) : null;
}

// ---- Where answers come from: the server, or the page ------------------------------------

class NeedsServer extends Error {}

const server = {
  models: async () => (await call("GET", "v1/models")).models,
  step: (model, sentence, prefix = [], override = {}) =>
    call("POST", "v1/step", { model, sentence, prefix, override, top_k: TOP_K }),
  beam: (model, sentence, beamSize) =>
    call("POST", "v1/beam", { model, sentence, beam_size: beamSize }),
  snapshots: (model, sentence) => call("POST", "v1/snapshots", { model, sentence }),
};

const page = {
  models: async () => DATA.models,
  step: async (model, sentence, prefix = [], override = {}) => {
    if (prefix.length || Object.keys(override).length) {
      throw new NeedsServer("what-if decodes again, so it needs the server: run " +
        "`alignmt serve RUN_DIR` and open http://127.0.0.1:8000/");
    }
    return stored(model, sentence).step;
  },
  beam: async (model, sentence, beamSize) => {
    const beam = stored(model, sentence).beam;
    if (beamSize !== beam.beam_size) {
      throw new NeedsServer(`this page holds beam size ${beam.beam_size}; ` +
        "other sizes need the server (`alignmt serve RUN_DIR`)");
    }
    return beam;
  },
  snapshots: async (model, sentence) => stored(model, sentence).snapshots,
};

const source = DATA ? page : server;

function stored(model, sentence) {
  return DATA.sentences.find((s) => s.text === sentence).results[model];
}

async function call(method, path, body) {
  pending(+1);
  try {
    const response = await fetch(path, {
      method,
      headers: body ? { "content-type": "application/json" } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) {
      throw new Error(answer.error ? answer.error.message : `HTTP ${response.status}`);
    }
    return answer;
  } finally {
    pending(-1);
  }
}

/* The count of requests in flight, on <body data-pending>, so that a test can wait for 0. */
function pending(delta) {
  document.body.dataset.pending = String(Number(document.body.dataset.pending) + delta);
}

/* Run an interaction and record how long it took to show: until the frame after it. */
async function timed(kind, work) {
  const start = performance.now();
  try {
    await work();
    await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
    timings.push({ kind, ms: performance.now() - start });
  } catch (error) {
    notice(error.message, !(error instanceof NeedsServer));
  }
}

// ---- Small DOM helpers ------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

const fixed = (x, digits = 3) => Number(x).toFixed(digits);
const percent = (p) => `${(100 * p).toFixed(1)}%`;
const argmax = (xs) => xs.reduce((best, x, i) => (x > xs[best] ? i : best), 0);
const shade = (a) => `rgba(var(--alpha), ${Math.max(0, Math.min(1, a)).toFixed(3)})`;

function notice(text, isError = false) {
  const node = document.getElementById("notice");
  node.textContent = text;
  node.classList.toggle("error", isError);
}

const tooltip = document.getElementById("tooltip");
function showTip(event, text) {
  tooltip.textContent = text;
  tooltip.hidden = false;
  tooltip.style.left = `${event.clientX + 12}px`;
  tooltip.style.top = `${event.clientY + 14}px`;
}
const hideTip = () => (tooltip.hidden = true);

// ---- Drawing attention ------------------------------------------------------------------

/* Each source word's coverage after step `at`: its attention summed over steps 0..at
   (Tu et al. 2016). A word still under 0.5 at the end is what the under-translation rate counts. */
const coverageAt = (steps, at) => steps[0].attention.map((_, j) =>
  steps.slice(0, at + 1).reduce((sum, step) => sum + step.attention[j], 0));

function coverageMeter(c) {
  return el("span", {
    class: `cov${c < 0.5 ? " under" : ""}`,
    "data-coverage": c,
    title: `attention so far: ${fixed(c, 2)}`,
    style: `--cov: ${Math.min(1, c).toFixed(3)}`,
  }, fixed(c, 1));
}

/* α over the source words as bars, each word's coverage under it when given; the largest α
   is marked; a click calls onPick(j). */
function attentionBars(sourceTokens, alpha, { steered = null, onPick = null, coverage = null } = {}) {
  const top = argmax(alpha);
  return sourceTokens.map((token, j) =>
    el("div", {
      class: `src${j === top ? " top" : ""}${j === steered ? " steered" : ""}`,
      "data-j": j,
      "data-alpha": alpha[j],
      title: onPick ? `put all of this step's attention on "${token}"` : "",
      onclick: onPick ? () => onPick(j) : null,
    },
    el("span", { class: "val" }, alpha[j] >= 0.005 ? fixed(alpha[j], 2) : ""),
    el("span", { class: "bar-area" },
      el("span", { class: "bar", style: `height: ${Math.round(100 * alpha[j])}%` })),
    el("span", { class: "word" }, token),
    coverage ? coverageMeter(coverage[j]) : null));
}

/* The (output x source) matrix as a table; hovering a cell tells its value. */
function attentionMatrix(sourceTokens, outputTokens, rows, onRow = null) {
  const head = el("tr", {}, el("th"),
    ...sourceTokens.map((t) => el("th", {}, el("span", {}, t))));
  const body = rows.map((alpha, i) =>
    el("tr", { "data-i": i, onclick: onRow ? () => onRow(i) : null },
      el("th", {}, outputTokens[i]),
      ...alpha.map((a, j) => el("td", { style: `background: ${shade(a)}`, "data-j": j }))));
  const table = el("table", { class: "alpha" }, el("thead", {}, head), el("tbody", {}, ...body));
  table.addEventListener("mousemove", (event) => {
    const cell = event.target.closest("td");
    if (!cell) return hideTip();
    const i = Number(cell.parentNode.dataset.i), j = Number(cell.dataset.j);
    showTip(event, `"${outputTokens[i]}" ← "${sourceTokens[j]}": α = ${fixed(rows[i][j], 4)}`);
  });
  table.addEventListener("mouseleave", hideTip);
  return table;
}

const NO_ATTENTION = "This model has no attention: its decoder sees one fixed summary of " +
  "the source (the encoder's final state) at every step, so there is no weight over " +
  "source words to show, and none to move. Its candidates and forced tokens still work.";

// ---- One model's panel --------------------------------------------------------------------

class Panel {
  constructor(info) {
    this.info = info;
    this.root = document.getElementById("panel-template").content.firstElementChild.cloneNode(true);
    this.root.dataset.model = info.name;
    this.q = (selector) => this.root.querySelector(selector);
    this.result = null; // the /v1/step answer shown
    this.request = { prefix: [], override: {} }; // what produced it
    this.at = 0; // the output step shown
    this.undo = []; // earlier (result, request) pairs, for "back"
    this.whatifAt = null; // the step a what-if changed the output from
    this.q(".title").textContent = info.name;
    this.q(".about").textContent = describe(info);
    this.wire();
  }

  get hasAttention() {
    return this.info.attention !== "none";
  }

  wire() {
    this.q(".prev").onclick = () => timed("step", () => this.go(this.at - 1));
    this.q(".next").onclick = () => timed("step", () => this.go(this.at + 1));
    this.q(".slider").oninput = (e) => timed("step", () => this.go(Number(e.target.value)));
    const beamSize = this.q(".beam-size");
    beamSize.value = DATA ? DATA.beam_size : this.info.beam_size;
    beamSize.disabled = Boolean(DATA);
    this.q(".beam-go").onclick = () => timed("beam", () => this.searchBeam());
    this.q(".beam-box").ontoggle = (e) => {
      if (e.target.open && !this.beam && this.sentence) timed("beam", () => this.searchBeam());
    };
    this.q(".training-box").ontoggle = (e) => {
      if (e.target.open && !this.training && this.sentence) timed("training", () => this.follow());
    };
    if (!this.hasAttention) this.q(".training-box").hidden = true;
  }

  async translate(sentence) {
    this.sentence = sentence;
    this.undo = [];
    this.whatifAt = null;
    this.beam = this.training = null;
    this.q(".whatif").hidden = true;
    this.show(await source.step(this.info.name, sentence), { prefix: [], override: {} }, 0);
    if (this.q(".beam-box").open) await this.searchBeam();
    else this.q(".beam").replaceChildren();
    if (this.q(".training-box").open) await this.follow();
    else this.q(".training").replaceChildren();
  }

  show(result, request, at) {
    this.result = result;
    this.request = request;
    const slider = this.q(".slider");
    slider.max = String(result.steps.length - 1);
    this.drawMatrix();
    this.go(at);
  }

  go(at) {
    const steps = this.result.steps;
    this.at = Math.max(0, Math.min(steps.length - 1, at));
    const step = steps[this.at];
    this.q(".slider").value = String(this.at);
    this.q(".where").textContent =
      `step ${this.at + 1} of ${steps.length}: "${step.token}" (p = ${fixed(step.probability)})` +
      (step.forced ? ", forced" : "") + (step.overridden ? ", attention moved" : "");
    this.drawOutput();
    this.drawSource(step);
    this.drawCandidates(step);
    for (const row of this.q(".matrix").querySelectorAll("tbody tr")) {
      row.classList.toggle("current", Number(row.dataset.i) === this.at);
    }
  }

  drawOutput() {
    // After a what-if, the tokens that differ from the output before it are marked.
    const before = this.undo.length ? this.undo[this.undo.length - 1][0].tokens : null;
    const changed = (i) => before !== null && i >= this.whatifAt && before[i] !== this.result.tokens[i];
    this.q(".output").replaceChildren(...this.result.steps.map((s, i) =>
      el("span", {
        class: `tok${i === this.at ? " current" : ""}${s.forced ? " forced" : ""}` +
          `${s.overridden ? " overridden" : ""}${changed(i) ? " new" : ""}`,
        "data-i": i,
        "data-p": fixed(s.probability),
        title: `p = ${fixed(s.probability)}`,
        style: `--doubt: ${(1 - s.probability).toFixed(3)}`,
        onclick: () => timed("step", () => this.go(i)),
      }, s.token)));
  }

  drawSource(step) {
    const box = this.q(".source");
    if (!this.hasAttention) {
      box.replaceChildren(el("p", { class: "novanilla" }, NO_ATTENTION));
      return;
    }
    const steered = step.overridden ? this.request.override[this.at] : null;
    box.replaceChildren(...attentionBars(this.result.source_tokens, step.attention, {
      steered,
      coverage: coverageAt(this.result.steps, this.at),
      onPick: (j) => timed("override", () => this.steer(j)),
    }));
  }

  drawCandidates(step) {
    this.q(".topk").replaceChildren(...step.top_k.map((c) =>
      el("li", {
        class: c.token === step.token ? "taken" : "",
        "data-token": c.token,
        title: `force "${c.token}" here and decode the rest`,
        onclick: () => timed("force", () => this.force(c.token)),
      },
      el("span", {}, c.token),
      el("span", { class: "p-bar" }, el("i", { style: `width: ${100 * c.probability}%` })),
      el("span", { class: "p" }, percent(c.probability)))));
  }

  drawMatrix() {
    const box = this.q(".matrix");
    if (!this.hasAttention) {
      box.replaceChildren(el("p", { class: "novanilla" }, NO_ATTENTION));
      return;
    }
    const rows = this.result.steps.map((s) => s.attention);
    box.replaceChildren(attentionMatrix(this.result.source_tokens, this.result.tokens, rows,
      (i) => timed("step", () => this.go(i))));
  }

  /* What if the decoder had output `token` at this step? */
  async force(token) {
    const at = this.at;
    const prefix = [...this.result.tokens.slice(0, at), token];
    const override = keep(this.request.override, (step) => step <= at);
    await this.whatIf("force", at, { prefix, override }, `forced "${token}" at step ${at + 1}`);
  }

  /* What if this step had put all of its attention on source word j? */
  async steer(j) {
    const at = this.at;
    const prefix = this.result.tokens.slice(0, at);
    const override = { ...keep(this.request.override, (step) => step < at), [at]: j };
    const word = this.result.source_tokens[j];
    await this.whatIf("override", at, { prefix, override },
      `all of step ${at + 1}'s attention on "${word}"`);
  }

  async whatIf(kind, at, request, what) {
    const before = this.result;
    const after = await source.step(this.info.name, this.sentence, request.prefix,
      request.override);
    this.undo.push([before, this.request]);
    this.whatifAt = at;
    this.show(after, request, at);
    this.drawComparison(kind, at, before, after, what);
  }

  drawComparison(kind, at, before, after, what) {
    const box = this.q(".whatif");
    const side = (label, result, other) => el("div", {},
      el("b", {}, label),
      el("span", {}, ...result.tokens.map((t, i) =>
        el("span", { class: i >= at && t !== other.tokens[i] ? "diff" : "" }, `${t} `))),
      el("div", { class: "score" }, `score ${fixed(result.score)} (log p, summed)`));
    const same = before.tokens.join(" ") === after.tokens.join(" ");
    let verdict = "";
    if (same && kind === "override") {
      const step = after.steps[at];
      verdict = `The output did not change: even so, the decoder chose "${step.token}" ` +
        `(p = ${fixed(step.probability)}) at step ${at + 1}, and the rest followed as before.`;
    } else if (same) {
      verdict = "The output did not change: that was already the decoder's choice.";
    }
    box.replaceChildren(...[
      el("div", {}, `What if: ${what}.`),
      el("div", { class: "pair" }, side("before", before, after), side("after", after, before)),
      verdict ? el("p", { class: "verdict" }, verdict) : null,
      el("button", { type: "button", onclick: () => timed("back", () => this.back()) }, "back"),
    ].filter(Boolean));
    box.dataset.kind = kind;
    box.dataset.changed = String(!same);
    box.hidden = false;
  }

  back() {
    const [result, request] = this.undo.pop();
    this.whatifAt = null;
    this.show(result, request, this.at);
    if (!this.undo.length) this.q(".whatif").hidden = true;
  }

  // -- The beam ---------------------------------------------------------------------------

  async searchBeam() {
    const size = Number(this.q(".beam-size").value);
    this.beam = await source.beam(this.info.name, this.sentence, size);
    this.drawBeam();
    this.chooseNode(this.beam.finished_nodes[0] ?? null);
  }

  drawBeam() {
    const beam = this.beam;
    const COL = 78, ROW = 22, W = 66, H = 17, TOP = 16;
    const place = new Map();
    const perStep = [];
    for (const node of beam.nodes) {
      const row = (perStep[node.step] = (perStep[node.step] ?? 0) + 1) - 1;
      place.set(node.id, { x: 4 + node.step * COL, y: TOP + row * ROW });
    }
    const width = 8 + perStep.length * COL, height = TOP + Math.max(...perStep) * ROW + 4;
    const edges = [], boxes = [];
    const labels = perStep.map((_, t) =>
      svg("text", { x: 4 + t * COL, y: 10, class: "step" }, `step ${t + 1}`));
    for (const node of beam.nodes) {
      const { x, y } = place.get(node.id);
      if (node.parent !== null) {
        const p = place.get(node.parent);
        edges.push(svg("line", { x1: p.x + W, y1: p.y + H / 2, x2: x, y2: y + H / 2,
          "data-from": node.parent, "data-to": node.id }));
      }
      const label = node.token.length > 9 ? `${node.token.slice(0, 8)}…` : node.token;
      const box = svg("g", { class: `node ${node.status}`, "data-id": node.id,
        transform: `translate(${x},${y})` },
      svg("rect", { width: W, height: H, rx: 3 }),
      svg("text", { x: 4, y: 12.5 }, label));
      box.addEventListener("mousemove", (e) => showTip(e, this.describeNode(node)));
      box.addEventListener("mouseleave", hideTip);
      box.addEventListener("click", () => timed("beam node", () => this.chooseNode(node.id)));
      boxes.push(box);
    }
    this.q(".beam").replaceChildren(svg("svg", { class: "tree", width, height },
      ...labels, ...edges, ...boxes));
    this.q(".nbest").replaceChildren(...beam.finished.map((h, rank) =>
      el("li", { "data-node": beam.finished_nodes[rank],
        onclick: () => timed("beam node", () => this.chooseNode(beam.finished_nodes[rank])) },
      h.text || "(empty)",
      el("span", { class: "score" }, `${fixed(beam.nodes[beam.finished_nodes[rank]].final_score)}` +
        ` (log p ${fixed(h.score)} ÷ length penalty` +
        (beam.coverage_penalty ? " + coverage penalty)" : ")")))));
  }

  hypothesisOf(id) {
    const path = [];
    for (let at = id; at !== null; at = this.beam.nodes[at].parent) path.unshift(at);
    return path;
  }

  describeNode(node) {
    const words = this.hypothesisOf(node.id).map((i) => this.beam.nodes[i].token).join(" ");
    const final = node.final_score === null ? "" : `, final ${fixed(node.final_score)}`;
    return `${words} · ${node.status} · log p ${fixed(node.score)}${final}`;
  }

  chooseNode(id) {
    const tree = this.q(".beam svg");
    if (!tree || id === null) return;
    const path = new Set(this.hypothesisOf(id));
    for (const g of tree.querySelectorAll(".node")) {
      g.classList.toggle("chosen", Number(g.dataset.id) === id);
    }
    for (const line of tree.querySelectorAll("line[data-to]")) {
      line.classList.toggle("on-path", path.has(Number(line.dataset.to)));
    }
    for (const li of this.q(".nbest").children) {
      li.classList.toggle("chosen", Number(li.dataset.node) === id);
    }
    const node = this.beam.nodes[id];
    const box = this.q(".beam-node");
    const said = el("p", {}, `${this.describeNode(node)}`);
    box.replaceChildren(said, this.hasAttention
      ? el("div", { class: "source" }, ...attentionBars(this.beam.source_tokens, node.attention))
      : el("p", { class: "novanilla" }, NO_ATTENTION));
  }

  // -- Attention over training --------------------------------------------------------------

  async follow() {
    const box = this.q(".training");
    if (!this.info.snapshots.length) {
      box.replaceChildren(el("p", { class: "muted" }, "This run kept no snapshots of its " +
        "weights. Train with train.snapshot_every=N to see attention form (the demo keeps " +
        "some)."));
      return;
    }
    this.training = await source.snapshots(this.info.name, this.sentence);
    const snaps = this.training.snapshots;
    const slider = el("input", { type: "range", min: 0, max: snaps.length - 1,
      value: snaps.length - 1, "aria-label": "snapshot" });
    const label = el("span", { class: "where" });
    const said = el("div", { class: "said" });
    const matrix = el("div", { class: "matrix" });
    const final = this.training.snapshots[snaps.length - 1].attention.map(argmax);
    const draw = (k) => {
      const snap = snaps[k];
      const agree = snap.attention.filter((row, i) => argmax(row) === final[i]).length;
      label.textContent = `training step ${snap.step}`;
      said.textContent = `It would output: "${snap.text}". Its most-attended word matches ` +
        `the last snapshot's at ${agree} of ${final.length} output steps.`;
      matrix.replaceChildren(attentionMatrix(this.training.source_tokens, this.training.tokens,
        snap.attention));
    };
    slider.addEventListener("input", () => timed("snapshot", () => draw(Number(slider.value))));
    box.replaceChildren(el("p", { class: "muted" }, "Each snapshot reads this model's output " +
      "(teacher-forced), so every matrix has the same rows."),
    el("div", { class: "slider-row" }, slider, label), said, matrix);
    draw(snaps.length - 1);
  }
}

function keep(override, wanted) {
  return Object.fromEntries(Object.entries(override).filter(([step]) => wanted(Number(step))));
}

function describe(info) {
  const attention = info.attention === "none" ? "no attention (vanilla)"
    : `${info.attention} attention, ${info.order} order` +
      (info.coverage && info.coverage !== "none" ? `, ${info.coverage} coverage` : "");
  const bleu = info.validation_bleu === null ? ""
    : `, validation BLEU ${info.validation_bleu.toFixed(1)}`;
  const languages = info.tokenizer === "char" ? "characters"
    : `${info.source_language}→${info.target_language}`;
  return `${languages} · ${attention} · ${info.cell}` +
    `${info.bidirectional ? ", bidirectional" : ""} · step ${info.training_step}${bleu}`;
}

// ---- The page: models, sentence, panels side by side ----------------------------------------

const panels = [];
const byName = new Map();

async function start() {
  const models = await source.models();
  for (const info of models) byName.set(info.name, info);
  const pick = document.getElementById("model"), other = document.getElementById("other");
  for (const info of models) {
    pick.append(el("option", { value: info.name }, info.name));
    other.append(el("option", { value: info.name }, info.name));
  }
  const params = new URLSearchParams(location.search);
  if (byName.has(params.get("model"))) pick.value = params.get("model");
  if (byName.has(params.get("other"))) other.value = params.get("other");
  document.getElementById("query").addEventListener("submit", (event) => {
    event.preventDefault();
    timed("translate", translate);
  });
  document.addEventListener("keydown", onKey);
  if (DATA) {
    usePageSentences();
  } else if (params.get("sentence")) {
    document.getElementById("sentence").value = params.get("sentence");
  }
  if (DATA || params.get("sentence")) await timed("translate", translate);
}

function usePageSentences() {
  document.getElementById("sentence").hidden = true;
  const pick = document.getElementById("sentence-pick");
  pick.hidden = false;
  for (const entry of DATA.sentences) pick.append(el("option", { value: entry.text }, entry.text));
  pick.addEventListener("change", () => timed("translate", translate));
  notice(`Written by \`${DATA.command}\`: everything here was computed in advance. What-if ` +
    "(forcing a token, moving attention) and other beam sizes need `alignmt serve`.");
}

function sentence() {
  return (DATA ? document.getElementById("sentence-pick") : document.getElementById("sentence"))
    .value.trim();
}

async function translate() {
  const text = sentence();
  if (!text) throw new Error("type a sentence first");
  const names = [document.getElementById("model").value, document.getElementById("other").value]
    .filter((name, i) => name && (i === 0 || name !== document.getElementById("model").value));
  if (panels.map((p) => p.info.name).join() !== names.join()) {
    panels.splice(0, panels.length, ...names.map((name) => new Panel(byName.get(name))));
    document.getElementById("panels").replaceChildren(...panels.map((p) => p.root));
  }
  if (!DATA) notice("");
  await Promise.all(panels.map((p) => p.translate(text)));
}

function onKey(event) {
  if (event.target.closest("input, select, textarea") || !panels.length) return;
  const move = { ArrowLeft: -1, ArrowRight: +1 }[event.key];
  if (!move || !panels[0].result) return;
  event.preventDefault();
  timed("step", () => panels.forEach((p) => p.go(p.at + move)));
}

start().catch((error) => notice(error.message, true));
