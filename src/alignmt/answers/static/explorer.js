/* alignmt explorer: the decoder one step at a time, "what if" by forcing a token or moving a
   step's attention, the beam as a tree, and attention over training.

   One ES module, four hosts, the same drawing:
   - the page `alignmt serve` serves at / asks the server's HTTP API (/v1/step, /v1/beam, ...);
   - the one-file page `alignmt explore` writes reads the same answers from the page itself;
   - the notebook widget (`run.explore()`, an anywidget: this module's default export) asks
     the kernel, and keeps the sentence, the models and the step in sync with Python;
   - the page `alignmt export --web` writes runs the model itself, in a Web Worker
     (web/worker.js, ONNX Runtime Web), with nothing installed and no server.
   Plain JavaScript, no library, no build step; it fetches nothing but the answers (and, in the
   worker, the model's own files).
   Every interaction's time, from the click to the frame that shows its result, is kept in
   window.alignmtTimings; each explorer's element says on data-pending how many answers it
   is waiting for. */

const TOP_K = 5;
const timings = (window.alignmtTimings ??= []);

class NeedsServer extends Error {}

// ---- Where answers come from: the server, the page, or the kernel ---------------------------

/** The HTTP API of `alignmt serve`, at the page's own address. */
export function serverSource() {
  const call = async (method, path, body) => {
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
  };
  return {
    models: async () => (await call("GET", "v1/models")).models,
    step: (model, sentence, prefix = [], override = {}, attribution = null) =>
      call("POST", "v1/step", { model, sentence, prefix, override, top_k: TOP_K, attribution }),
    beam: (model, sentence, beamSize, constraints = null) =>
      call("POST", "v1/beam", { model, sentence, beam_size: beamSize, constraints }),
    snapshots: (model, sentence) => call("POST", "v1/snapshots", { model, sentence }),
  };
}

/** Answers computed in advance (`alignmt explore`): the greedy step-through, one beam size
    and the snapshots of each stored sentence. What-if decodes again, so it cannot be stored. */
export function pageSource(data) {
  const stored = (model, sentence) =>
    data.sentences.find((s) => s.text === sentence).results[model];
  const live = "a live model: `alignmt serve RUN_DIR`, or `run.explore()` in a notebook";
  return {
    stored: data,
    models: async () => data.models,
    step: async (model, sentence, prefix = [], override = {}, attribution = null) => {
      if (prefix.length || Object.keys(override).length) {
        throw new NeedsServer(`what-if decodes again, so it needs the server: ${live}`);
      }
      if (attribution) {
        throw new NeedsServer(`attribution takes the model's gradients, so it needs ${live}`);
      }
      return stored(model, sentence).step;
    },
    beam: async (model, sentence, beamSize, constraints = null) => {
      if (constraints) {
        throw new NeedsServer(`a constrained search decodes again, so it needs the server: ${live}`);
      }
      const beam = stored(model, sentence).beam;
      if (beamSize !== beam.beam_size) {
        throw new NeedsServer(`this page holds beam size ${beam.beam_size}; ` +
          `other sizes need the server: ${live}`);
      }
      return beam;
    },
    snapshots: async (model, sentence) => stored(model, sentence).snapshots,
  };
}

/** The kernel behind a notebook widget: each question a custom message, each answer one back
    with the same id (ids carry a per-view prefix, as two views of one widget share its
    messages). The answers are those of the HTTP API, computed by the same functions. */
export function kernelSource(model) {
  const me = Math.random().toString(36).slice(2);
  const waiting = new Map();
  let last = 0;
  const listen = (msg) => {
    const call = waiting.get(msg.id);
    if (!call) return;
    waiting.delete(msg.id);
    if (msg.error) call.reject(new Error(msg.error));
    else call.resolve(msg.answer);
  };
  model.on("msg:custom", listen);
  const ask = (what, body) => new Promise((resolve, reject) => {
    const id = `${me}:${++last}`;
    waiting.set(id, { resolve, reject });
    model.send({ id, what, body });
  });
  return {
    models: () => ask("models", {}),
    step: (name, sentence, prefix = [], override = {}, attribution = null) =>
      ask("step", { model: name, sentence, prefix, override, top_k: TOP_K, attribution }),
    beam: (name, sentence, beamSize, constraints = null) =>
      ask("beam", { model: name, sentence, beam_size: beamSize, constraints }),
    snapshots: (name, sentence) => ask("snapshots", { model: name, sentence }),
    close: () => model.off("msg:custom", listen),
  };
}

/** A Web Worker that runs the model's graphs in this page (web/worker.js: `alignmt export
    --web`); it answers as the server does, and says why for what it cannot answer
    (attribution, snapshots, constraints), which the explorer then shows as a note. */
export function workerSource(url, folders) {
  const worker = new Worker(url, { type: "module" });
  const waiting = new Map();
  let last = 0;
  worker.onmessage = ({ data }) => {
    const call = waiting.get(data.id);
    waiting.delete(data.id);
    if (data.error === undefined) call.resolve(data.answer);
    else call.reject(data.needsServer ? new NeedsServer(data.error) : new Error(data.error));
  };
  const ask = (what, body) => new Promise((resolve, reject) => {
    waiting.set(++last, { resolve, reject });
    worker.postMessage({ id: last, what, body });
  });
  const opened = ask("open", { folders });
  const live = "a live model: `alignmt serve RUN_DIR`, or `run.explore()` in a notebook";
  return {
    cannot: {
      attribution: `attribution takes the model's gradients, which need ${live}`,
      snapshots: `attention over training reads the run's snapshots, which need ${live}`,
    },
    models: async () => (await opened, ask("models", {})),
    step: async (name, sentence, prefix = [], override = {}, attribution = null) =>
      (await opened, ask("step", { model: name, sentence, prefix, override, top_k: TOP_K, attribution })),
    beam: async (name, sentence, beamSize, constraints = null) =>
      (await opened, ask("beam", { model: name, sentence, beam_size: beamSize, constraints })),
    snapshots: async (name, sentence) => (await opened, ask("snapshots", { model: name, sentence })),
  };
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

function fromHTML(html) {
  const template = document.createElement("template");
  template.innerHTML = html.trim();
  return template.content.firstElementChild;
}

const fixed = (x, digits = 3) => Number(x).toFixed(digits);
const percent = (p) => `${(100 * p).toFixed(1)}%`;
const argmax = (xs) => xs.reduce((best, x, i) => (x > xs[best] ? i : best), 0);
const shade = (a) => `rgba(var(--alpha), ${Math.max(0, Math.min(1, a)).toFixed(3)})`;

/* A hover label that follows the pointer, one per explorer. */
function tooltip(node) {
  return {
    show(event, text) {
      node.textContent = text;
      node.hidden = false;
      node.style.left = `${event.clientX + 12}px`;
      node.style.top = `${event.clientY + 14}px`;
    },
    hide: () => (node.hidden = true),
  };
}

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
   is marked; a click calls onPick(j). `marks` are the positions on the source that the
   model's attention mechanisms show ({ at, reach, label, about }: a local window's centre p_i
   and half-width D, say): each is drawn where it falls, the words within its reach shaded. */
function attentionBars(sourceTokens, alpha,
  { steered = null, onPick = null, coverage = null, marks = [] } = {}) {
  const top = argmax(alpha);
  const last = sourceTokens.length - 1;
  const at = new Map(marks.map((mark) => [Math.min(Math.floor(mark.at), last), mark]));
  const reached = (j) => marks.some((mark) => mark.reach && Math.abs(j - mark.at) <= mark.reach);
  return sourceTokens.map((token, j) =>
    el("div", {
      class: `src${j === top ? " top" : ""}${j === steered ? " steered" : ""}` +
        `${reached(j) ? " reached" : ""}`,
      "data-j": j,
      "data-alpha": alpha[j],
      title: onPick ? `put all of this step's attention on "${token}"` : "",
      onclick: onPick ? () => onPick(j) : null,
    },
    el("span", { class: "val" }, alpha[j] >= 0.005 ? fixed(alpha[j], 2) : ""),
    el("span", { class: "bar-area" },
      el("span", { class: "bar", style: `height: ${Math.round(100 * alpha[j])}%` }),
      at.has(j) ? positionMark(at.get(j), j) : null),
    el("span", { class: "word" }, token),
    coverage ? coverageMeter(coverage[j]) : null));
}

/* How much each source word moved this step's word, as bars scaled to the largest size;
   a negative share (erasure: leaving the word out made the output more likely) in orange. */
function attributionBars(sourceTokens, scores) {
  const largest = Math.max(...scores.map(Math.abs)) || 1;
  const top = argmax(scores);
  return sourceTokens.map((token, j) =>
    el("div", {
      class: `src attr${j === top ? " top" : ""}${scores[j] < 0 ? " neg" : ""}`,
      "data-j": j,
      "data-score": scores[j],
      title: `${token}: ${fixed(scores[j], 4)}`,
    },
    el("span", { class: "bar-area" }, el("span", {
      class: "bar", style: `height: ${Math.round(100 * Math.abs(scores[j]) / largest)}%`,
    })),
    el("span", { class: "word" }, token)));
}

/* A shown position as a line over word j's bar, shifted right by its fraction of a word. */
function positionMark(mark, j) {
  const into = Math.min(1, mark.at - j);
  const reach = mark.reach ? `: it reaches the words at ${fixed(mark.at - mark.reach, 1)} ≤ j ≤ ` +
    `${fixed(mark.at + mark.reach, 1)}` : "";
  return el("span", {
    class: "mark",
    "data-at": mark.at,
    title: `${mark.label} = ${fixed(mark.at, 2)}${reach}`,
    style: `left: ${(50 + 100 * into).toFixed(1)}%`,  // at = j at the word's middle
  });
}

/* The (output x source) matrix as a table; hovering a cell tells its value. */
function attentionMatrix(tip, sourceTokens, outputTokens, rows, onRow = null) {
  const head = el("tr", {}, el("th"),
    ...sourceTokens.map((t) => el("th", {}, el("span", {}, t))));
  const body = rows.map((alpha, i) =>
    el("tr", { "data-i": i, onclick: onRow ? () => onRow(i) : null },
      el("th", {}, outputTokens[i]),
      ...alpha.map((a, j) => el("td", { style: `background: ${shade(a)}`, "data-j": j }))));
  const table = el("table", { class: "alpha" }, el("thead", {}, head), el("tbody", {}, ...body));
  table.addEventListener("mousemove", (event) => {
    const cell = event.target.closest("td");
    if (!cell) return tip.hide();
    const i = Number(cell.parentNode.dataset.i), j = Number(cell.dataset.j);
    tip.show(event, `"${outputTokens[i]}" ← "${sourceTokens[j]}": α = ${fixed(rows[i][j], 4)}`);
  });
  table.addEventListener("mouseleave", tip.hide);
  return table;
}

const NO_ATTENTION = "This model has no attention: its decoder sees one fixed summary of " +
  "the source (the encoder's final state) at every step, so there is no weight over " +
  "source words to show, and none to move. Its candidates and forced tokens still work.";

// ---- The markup: the query bar, one panel per model --------------------------------------

const FRAME = `
<header>
  <h1>alignmt <span>explorer</span></h1>
  <form class="query" autocomplete="off">
    <label>model <select class="model"></select></label>
    <label>beside it <select class="other"><option value="">nothing</option></select></label>
    <label class="grow">sentence
      <input class="sentence" type="text" spellcheck="false" placeholder="type a sentence">
      <select class="sentence-pick" hidden></select>
    </label>
    <button class="go" type="submit">Translate</button>
  </form>
  <p class="notice" role="status"></p>
</header>
<main class="panels"></main>
<footer>
  ←/→ step the decoder · click a candidate to force it · click a source word to put all
  of that step's attention on it · hover the matrix and the beam for values
</footer>
<div class="tooltip" role="tooltip" hidden></div>`;

const PANEL = `
<section class="panel">
  <h2 class="title"></h2>
  <p class="about"></p>
  <div class="stepper">
    <button class="prev" type="button" title="previous step (←)">◀</button>
    <input class="slider" type="range" min="0" max="0" value="0" aria-label="decoder step">
    <button class="next" type="button" title="next step (→)">▶</button>
    <span class="where"></span>
  </div>
  <div class="output" aria-label="output tokens"></div>
  <p class="legend">Output tokens are shaded by doubt: the less probable the model found a
    token, the deeper its shade (hover for p).</p>
  <h3>Attention at this step <small>(click a word to put all of it there)</small></h3>
  <div class="source" aria-label="source tokens"></div>
  <p class="legend">Under each word, its coverage: the attention it has had up to this step.
    Words still under 0.5 when the output ends (orange) are likely left untranslated.</p>
  <div class="attribution-box">
    <label>Beside attention: <select class="attribution-pick" aria-label="attribution">
      <option value="">nothing</option>
      <option value="shift">attention one step later (shift-att)</option>
      <option value="gradient">gradient × input</option>
      <option value="integrated">integrated gradients</option>
      <option value="erasure">erasure (one word left out)</option>
    </select></label>
    <div class="attribution" aria-label="attribution over the source tokens"></div>
  </div>
  <h3>Candidates at this step <small>(click one to force it)</small></h3>
  <ol class="topk"></ol>
  <div class="whatif" hidden></div>
  <details class="matrix-box" open>
    <summary>Alignment matrix</summary>
    <div class="matrix"></div>
  </details>
  <details class="beam-box">
    <summary>Beam search</summary>
    <div class="beam-controls">
      <label>beam size <input class="beam-size" type="number" min="1" max="16" value="5"></label>
      <label>must say <input class="beam-include" type="text" placeholder="phrase, phrase"></label>
      <label>must not say <input class="beam-exclude" type="text" placeholder="phrase"></label>
      <button class="beam-go" type="button">Search</button>
      <span class="beam-legend"><i class="live"></i>live <i class="finished"></i>finished
        <i class="pruned"></i>pruned <i class="stopped"></i>live at the end
        <b class="dot met"></b>constraints met <b class="dot pending"></b>pending</span>
    </div>
    <div class="beam"></div>
    <div class="beam-node"></div>
    <ol class="nbest"></ol>
  </details>
  <details class="training-box">
    <summary>Attention over training</summary>
    <div class="training"></div>
  </details>
</section>`;
// ---- One model's panel --------------------------------------------------------------------

class Panel {
  constructor(explorer, info) {
    this.x = explorer; // the explorer it sits in: its source, clock, tooltip and notice
    this.info = info;
    this.root = fromHTML(PANEL);
    this.root.dataset.model = info.name;
    this.q = (selector) => this.root.querySelector(selector);
    this.result = null; // the /v1/step answer shown
    this.request = { prefix: [], override: {} }; // what produced it
    this.at = 0; // the output step shown
    this.undo = []; // earlier (result, request) pairs, for "back"
    this.whatifAt = null; // the step a what-if changed the output from
    this.attribution = null; // the attribution asked beside attention, if any
    this.q(".title").textContent = info.name;
    this.q(".about").textContent = describe(info);
    this.wire();
  }

  get hasAttention() {
    return this.info.attention !== "none";
  }

  wire() {
    this.q(".prev").onclick = () => this.x.timed("step", () => this.go(this.at - 1));
    this.q(".next").onclick = () => this.x.timed("step", () => this.go(this.at + 1));
    this.q(".slider").oninput = (e) => this.x.timed("step", () => this.go(Number(e.target.value)));
    const beamSize = this.q(".beam-size");
    const stored = this.x.source.stored;
    beamSize.value = stored ? stored.beam_size : this.info.beam_size;
    beamSize.disabled = Boolean(stored);
    this.q(".beam-go").onclick = () => this.x.timed("beam", () => this.searchBeam());
    this.q(".beam-box").ontoggle = (e) => {
      if (e.target.open && !this.beam && this.sentence) this.x.timed("beam", () => this.searchBeam());
    };
    this.q(".training-box").ontoggle = (e) => {
      if (e.target.open && !this.training && this.sentence) this.x.timed("training", () => this.follow());
    };
    const cannot = this.x.source.cannot ?? {};
    if (!this.hasAttention || cannot.snapshots) this.q(".training-box").hidden = true;
    const pick = this.q(".attribution-pick");
    if (!this.hasAttention) pick.querySelector('option[value="shift"]').remove();
    if (stored || cannot.attribution) {
      pick.disabled = true;
      pick.title = cannot.attribution ?? "attribution takes the model's gradients: it needs a live model";
    }
    pick.onchange = () => this.x.timed("attribution", () => this.attribute(pick.value || null));
  }

  /* Ask the shown output again, with `method`'s attribution beside its attention. */
  async attribute(method) {
    this.attribution = method;
    if (!this.result) return;
    const { prefix, override } = this.request;
    this.show(await this.ask(prefix, override), this.request, this.at);
  }

  /* The step-through of this sentence, with the attribution asked where it can be given:
     it explains the model's own attention, so not under an override. */
  ask(prefix = [], override = {}) {
    const steered = Object.keys(override).length > 0;
    return this.x.source.step(this.info.name, this.sentence, prefix, override,
      steered ? null : this.attribution);
  }

  async translate(sentence) {
    this.sentence = sentence;
    this.undo = [];
    this.whatifAt = null;
    this.beam = this.training = null;
    this.q(".whatif").hidden = true;
    this.show(await this.ask(), { prefix: [], override: {} }, 0);
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
    this.x.changed(this);
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
        onclick: () => this.x.timed("step", () => this.go(i)),
      }, s.token)));
  }

  drawSource(step) {
    const box = this.q(".source");
    if (!this.hasAttention) {
      box.replaceChildren(el("p", { class: "novanilla" }, NO_ATTENTION));
      return;
    }
    const steered = step.overridden ? this.request.override[this.at] : null;
    // the values the model's mechanisms show, as its description declares them: positions
    // are marked on the source, probabilities only written below it
    const shown = (this.info.shown ?? []).filter((s) => step.shown?.[s.slot] !== undefined)
      .map((s) => ({ ...s, at: step.shown[s.slot] }));
    box.replaceChildren(...attentionBars(this.result.source_tokens, step.attention, {
      steered,
      coverage: coverageAt(this.result.steps, this.at),
      onPick: (j) => this.x.timed("override", () => this.steer(j)),
      marks: shown.filter((s) => (s.kind ?? "position") === "position"),
    }), ...shown.map((s) => this.shownValue(s)));
    this.drawAttribution(step);
  }

  /* A declared value below the source: a number written out, or rows of weights (one per
     head, or a copying model's one row of what it copies) drawn as a matrix over the source
     words. */
  shownValue(s) {
    if (s.kind !== "weights") {
      return el("p", { class: "mark-note", "data-slot": s.slot },
        `${s.label} = ${fixed(s.at, 2)}, ${s.about}`);
    }
    const one = s.at.length === 1;
    const labels = s.at.map((_, n) => (one ? s.label : `${s.label} ${n + 1}`));
    const note = one ? `${s.label}: ${s.about}` : `${labels.length} ${s.label}s: ${s.about}`;
    return el("div", { class: "shown-weights", "data-slot": s.slot },
      el("p", { class: "mark-note" }, note),
      attentionMatrix(this.x.tip, this.result.source_tokens, labels, s.at));
  }

  drawAttribution(step) {
    const box = this.q(".attribution");
    if (!step.attribution) {
      const steered = this.attribution && Object.keys(this.request.override).length;
      box.replaceChildren(steered ? el("p", { class: "muted" },
        "Attribution explains the model's own decoding: go back before the what-if to see it.")
        : "");
      return;
    }
    box.replaceChildren(...attributionBars(this.result.source_tokens, step.attribution));
  }

  drawCandidates(step) {
    this.q(".topk").replaceChildren(...step.top_k.map((c) =>
      el("li", {
        class: c.token === step.token ? "taken" : "",
        "data-token": c.token,
        title: `force "${c.token}" here and decode the rest`,
        onclick: () => this.x.timed("force", () => this.force(c.token)),
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
    box.replaceChildren(attentionMatrix(this.x.tip, this.result.source_tokens, this.result.tokens, rows,
      (i) => this.x.timed("step", () => this.go(i))));
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
    const after = await this.ask(request.prefix, request.override);
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
      el("button", { type: "button", onclick: () => this.x.timed("back", () => this.back()) }, "back"),
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

  /** The phrases typed under the beam, comma-separated, as the API's constraints; null for none. */
  constraints() {
    const phrases = (selector) => this.q(selector).value.split(",").map((p) => p.trim())
      .filter(Boolean);
    const include = phrases(".beam-include"), exclude = phrases(".beam-exclude");
    return include.length || exclude.length ? { include, exclude } : null;
  }

  async searchBeam() {
    const size = Number(this.q(".beam-size").value);
    this.beam = await this.x.source.beam(this.info.name, this.sentence, size, this.constraints());
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
      if (node.met) {  // a constrained search: has this path met every include phrase yet?
        const all = node.met.every(Boolean);
        box.append(svg("circle", { cx: W - 5, cy: 5, r: 3.5, class: all ? "met" : "pending" }));
      }
      box.addEventListener("mousemove", (e) => this.x.tip.show(e, this.describeNode(node)));
      box.addEventListener("mouseleave", this.x.tip.hide);
      box.addEventListener("click", () => this.x.timed("beam node", () => this.chooseNode(node.id)));
      boxes.push(box);
    }
    this.q(".beam").replaceChildren(svg("svg", { class: "tree", width, height },
      ...labels, ...edges, ...boxes));
    this.q(".nbest").replaceChildren(...beam.finished.map((h, rank) =>
      el("li", { "data-node": beam.finished_nodes[rank],
        onclick: () => this.x.timed("beam node", () => this.chooseNode(beam.finished_nodes[rank])) },
      h.text || "(empty)",
      el("span", { class: "score" }, `${fixed(beam.nodes[beam.finished_nodes[rank]].final_score)}` +
        ` (log p ${fixed(h.score)} ÷ length penalty` +
        (beam.coverage_penalty ? " + coverage penalty)" : ")") + this.describeMet(h.met)))));
  }

  hypothesisOf(id) {
    const path = [];
    for (let at = id; at !== null; at = this.beam.nodes[at].parent) path.unshift(at);
    return path;
  }

  describeNode(node) {
    const words = this.hypothesisOf(node.id).map((i) => this.beam.nodes[i].token).join(" ");
    const final = node.final_score === null ? "" : `, final ${fixed(node.final_score)}`;
    return `${words} · ${node.status} · log p ${fixed(node.score)}${final}` +
      this.describeMet(node.met);
  }

  describeMet(met) {
    if (!met || !met.length) return "";
    const include = this.beam.constraints.include;
    return " · " + include.map((p, i) => `"${p}" ${met[i] ? "met" : "pending"}`).join(", ");
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
    this.training = await this.x.source.snapshots(this.info.name, this.sentence);
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
      matrix.replaceChildren(attentionMatrix(this.x.tip, this.training.source_tokens, this.training.tokens,
        snap.attention));
    };
    slider.addEventListener("input", () => this.x.timed("snapshot", () => draw(Number(slider.value))));
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
    : `${(info.mechanisms ?? [info.attention]).join(", ")}; ${info.order} order`;
  const bleu = info.validation_bleu === null ? ""
    : `, validation BLEU ${info.validation_bleu.toFixed(1)}`;
  const languages = info.tokenizer === "char" ? "characters"
    : `${info.source_language}→${info.target_language}`;
  return `${languages} · ${attention} · ${info.cell}` +
    `${info.bidirectional ? ", bidirectional" : ""} · step ${info.training_step}${bleu}`;
}


// ---- One explorer: models, a sentence, panels side by side -------------------------------------

/* Each answer awaited is counted on root's data-pending, so that a test can wait for 0. */
function counted(source, root) {
  const pending = (delta) => {
    root.dataset.pending = String(Number(root.dataset.pending) + delta);
  };
  const wrapped = { ...source };
  for (const what of ["models", "step", "beam", "snapshots"]) {
    wrapped[what] = async (...args) => {
      pending(+1);
      try {
        return await source[what](...args);
      } finally {
        pending(-1);
      }
    };
  }
  return wrapped;
}

export class Explorer {
  /** Draw an explorer into `root`, answered by `source`; arrow keys pressed in `keys` step
      the decoder; `onChange(state)` hears where the first panel is after each change. */
  constructor(root, source, { keys = root, onChange = null } = {}) {
    this.root = root;
    root.classList.add("alignmt");
    root.dataset.pending = "0";
    const frame = document.createElement("template");
    frame.innerHTML = FRAME;
    root.replaceChildren(frame.content);
    this.q = (selector) => root.querySelector(selector);
    this.source = counted(source, root);
    this.tip = tooltip(this.q(".tooltip"));
    this.panels = [];
    this.byName = new Map();
    this.onChange = onChange;
    this.onKey = this.onKey.bind(this);
    this.keys = keys;
    keys.addEventListener("keydown", this.onKey);
  }

  close() {
    this.keys.removeEventListener("keydown", this.onKey);
  }

  notice(text, isError = false) {
    const node = this.q(".notice");
    node.textContent = text;
    node.classList.toggle("error", isError);
  }

  /* Run an interaction and record how long it took to show: until the frame after it. */
  async timed(kind, work) {
    const start = performance.now();
    try {
      await work();
      await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
      const shown = performance.now(); // ms since the page began to load
      timings.push({ kind, ms: shown - start, shown });
    } catch (error) {
      this.notice(error.message, !(error instanceof NeedsServer));
    }
  }

  /** Fill the model lists and show the first sentence: `sentences` are offered (in a list
      to pick from where the answers are stored, as suggestions otherwise). */
  async start({ sentences = [], model = null, other = null, sentence = null } = {}) {
    const models = await this.source.models();
    for (const info of models) this.byName.set(info.name, info);
    const pick = this.q(".model"), beside = this.q(".other");
    for (const info of models) {
      pick.append(el("option", { value: info.name }, info.name));
      beside.append(el("option", { value: info.name }, info.name));
    }
    if (this.byName.has(model)) pick.value = model;
    if (this.byName.has(other)) beside.value = other;
    this.q(".query").addEventListener("submit", (event) => {
      event.preventDefault();
      this.timed("translate", () => this.translate());
    });
    // where the page runs the model itself: how (ONNX Runtime Web, its threads)
    if (models[0]?.runtime) this.q(".query").after(el("p", { class: "runtime" }, models[0].runtime));
    const stored = this.source.stored;
    if (stored) this.offerStored(stored);
    else this.offer(sentences, sentence ?? sentences[0] ?? "");
    if (this.sentence()) await this.timed("translate", () => this.translate());
  }

  offer(sentences, first) {
    const list = el("datalist", { id: `alignmt-sentences-${Math.random().toString(36).slice(2)}` },
      ...sentences.map((text) => el("option", { value: text })));
    this.q(".query").append(list);
    this.q(".sentence").setAttribute("list", list.id);
    this.q(".sentence").value = first;
  }

  offerStored(stored) {
    this.q(".sentence").hidden = true;
    const pick = this.q(".sentence-pick");
    pick.hidden = false;
    for (const entry of stored.sentences) pick.append(el("option", { value: entry.text }, entry.text));
    pick.addEventListener("change", () => this.timed("translate", () => this.translate()));
    this.notice(`Computed in advance by \`${stored.command}\`. What-if (forcing a token, ` +
      "moving attention) and other beam sizes need a live model.");
  }

  sentence() {
    return this.q(this.source.stored ? ".sentence-pick" : ".sentence").value.trim();
  }

  async translate() {
    const text = this.sentence();
    if (!text) throw new Error("type a sentence first");
    const first = this.q(".model").value;
    const names = [first, this.q(".other").value].filter((name, i) => name && (i === 0 || name !== first));
    if (this.panels.map((p) => p.info.name).join() !== names.join()) {
      this.panels = names.map((name) => new Panel(this, this.byName.get(name)));
      this.q(".panels").replaceChildren(...this.panels.map((p) => p.root));
    }
    if (!this.source.stored) this.notice("");
    await Promise.all(this.panels.map((p) => p.translate(text)));
  }

  onKey(event) {
    if (event.target.closest("input, select, textarea") || !this.panels.length) return;
    const move = { ArrowLeft: -1, ArrowRight: +1 }[event.key];
    if (!move || !this.panels[0].result) return;
    event.preventDefault();
    this.timed("step", () => this.panels.forEach((p) => p.go(p.at + move)));
  }

  /* Where the first panel is: what a notebook keeps in sync with Python. */
  changed(panel) {
    if (panel !== this.panels[0] || !this.onChange) return;
    this.onChange({
      sentence: panel.sentence,
      model: panel.info.name,
      other: this.panels[1] ? this.panels[1].info.name : "",
      step: panel.at,
      tokens: panel.result.tokens,
      prefix: panel.request.prefix,
    });
  }

  // -- Asked from outside (a notebook's Python): the same as the controls do ----------------

  async show({ sentence = null, model = null, other = null }) {
    if (sentence !== null) this.q(".sentence").value = sentence;
    if (model !== null) this.q(".model").value = model;
    if (other !== null) this.q(".other").value = other;
    await this.translate();
  }

  async stepTo(at) {
    for (const panel of this.panels) panel.go(at);
  }

  /* Decode the first panel again with `prefix` forced (none: as the model would). */
  async force(prefix) {
    const panel = this.panels[0];
    if (!prefix.length) return panel.translate(panel.sentence);
    const at = prefix.length - 1;
    await panel.whatIf("force", at, { prefix, override: {} }, `forced "${prefix.join(" ")}"`);
  }
}

// ---- In a notebook: the anywidget ------------------------------------------------------------

/* The traits the widget keeps in sync with Python (alignmt.notebook.explorer.Explorer). */
const SYNCED = { sentence: "sentence", model: "model_name", other: "beside", step: "step",
  tokens: "tokens", prefix: "prefix" };
/* How long a widget waits for the kernel before it shows the answers stored with it. */
const KERNEL_WAIT_MS = 4000;

/* The widget: live once the kernel answers; until then, or with no kernel at all (a page
   that runs widgets from their saved state), the answers stored for the given sentences. */
function render({ model, el: root }) {
  const kernel = kernelSource(model);
  let explorer = null;
  const show = (source, said = "") => {
    explorer?.close();
    explorer = new Explorer(root, source, {
      onChange(state) {
        for (const [key, trait] of Object.entries(SYNCED)) model.set(trait, state[key]);
        model.save_changes();
      },
    });
    explorer.start({
      sentences: model.get("sentences"),
      model: model.get("model_name") || null,
      other: model.get("beside") || null,
      sentence: model.get("sentence") || null,
    }).then(() => said && explorer.notice(said), (error) => explorer.notice(error.message, true));
  };
  kernel.models().then(() => show(kernel));
  const stored = model.get("offline");
  const wait = setTimeout(() => explorer || !stored || show(pageSource(stored),
    `No kernel answered in ${KERNEL_WAIT_MS / 1000} s, so this shows the answers stored ` +
    "with the widget; run its cell again for a live explorer."), KERNEL_WAIT_MS);
  // Keys pressed in the explorer are its own, not the notebook's shortcuts.
  root.tabIndex = 0;
  root.dataset.lmSuppressShortcuts = "true";
  const first = () => explorer?.panels[0];
  // For each trait Python may set: whether a value is news to the explorer (its own changes
  // come back as change events too), and what showing it takes.
  const asked = {
    sentence: [(text) => first()?.sentence !== text, (text) => explorer.show({ sentence: text })],
    model_name: [(name) => first()?.info.name !== name, (name) => explorer.show({ model: name })],
    beside: [(name) => (explorer.panels[1]?.info.name ?? "") !== name,
      (name) => explorer.show({ other: name })],
    step: [(at) => first() && first().at !== at, (at) => explorer.stepTo(at)],
    prefix: [(prefix) => first() && JSON.stringify(first().request.prefix) !== JSON.stringify(prefix),
      (prefix) => explorer.force(prefix)],
  };
  const listeners = Object.entries(asked).map(([trait, [isNews, act]]) => {
    const listen = () => {
      const value = model.get(trait);
      if (explorer && isNews(value)) explorer.timed(trait, () => act(value));
    };
    model.on(`change:${trait}`, listen);
    return [`change:${trait}`, listen];
  });
  return () => {
    clearTimeout(wait);
    for (const [name, listen] of listeners) model.off(name, listen);
    kernel.close();
    explorer?.close();
  };
}

export default { render };

// ---- On a page of its own: `alignmt serve` or `alignmt explore` -------------------------------

const pageRoot = document.getElementById("alignmt-page");
if (pageRoot) {
  const data = document.getElementById("alignmt-data");
  const stored = data ? JSON.parse(data.textContent) : null;
  // a page `alignmt export --web` wrote names its model folders and runs them itself
  const folders = pageRoot.dataset.models;
  const params = new URLSearchParams(location.search);
  // the exported site's page may reload once, cross-origin isolated (site.py): start after
  const isolated = window.alignmtIsolated ?? Promise.resolve(true);
  isolated.then((go) => {
    if (!go) return;
    const source = stored ? pageSource(stored)
      : folders ? workerSource(new URL("web/worker.js", import.meta.url),
        folders.split(" ").map((folder) => new URL(folder, location.href).href))
      : serverSource();
    const explorer = new Explorer(pageRoot, source, { keys: document });
    explorer.start({
      model: params.get("model"),
      other: params.get("other") ?? stored?.beside,
      sentence: params.get("sentence"),
    }).catch((error) => explorer.notice(error.message, true));
  });
}
