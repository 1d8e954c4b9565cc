/* flopsight HTML report.
 *
 * Reads the embedded result (the JSON renderer's document) and the derived block, builds the
 * module tree's inclusive figures (inclusive = self + children, as flopsight.result.tree does), and
 * draws: an icicle chart on a canvas, a virtualised table, a detail panel, the step anatomy.
 * Every piece of user data (module names, types, reprs, op names) reaches the page through
 * textContent or canvas fillText, never as markup.
 */
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("flopsight-data").textContent);
  const DERIVED = JSON.parse(document.getElementById("flopsight-derived").textContent);
  const PHASES = ["forward", "backward", "recompute", "step"];
  const MACS = 0, FLOPS = 1, LATENCY = 2, CALLS = 3;
  const CHART_ROW = 22;
  const TABLE_ROW = 24;
  const MIN_WIDTH = 0.35; // narrower than this (CSS px) is neither drawn nor laid out further
  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- numbers (flopsight.renderers.numbers)
  const UNITS = [["T", 1e12], ["G", 1e9], ["M", 1e6], ["K", 1e3], ["", 1], ["m", 1e-3], ["u", 1e-6]];

  /* Python's round(x, p): toFixed rounds exact ties away from zero, Python to even. */
  function pyRound(x, p) {
    if (!isFinite(x)) return x;
    let v = Number(x.toFixed(p));
    const full = Math.abs(x).toFixed(100);
    const dot = full.indexOf(".");
    if (/^50*$/.test(full.slice(dot + 1 + p))) {
      const kept = full.slice(0, dot + 1 + p).replace(/\.$/, "");
      if (Number(kept.slice(-1)) % 2 === 0) v = (x < 0 ? -1 : 1) * Number(kept);
    }
    return v;
  }

  function autoUnit(num, p) {
    const size = Math.abs(num);
    for (let i = 0; i < UNITS.length; i++) {
      const [unit, magnitude] = UNITS[i];
      if (size >= magnitude || (unit === "" && size === 0) || unit === "u") {
        // rounding may carry into the next unit up: 999999 -> "1 M", not "1000 K"
        if (i > 0 && pyRound(size / magnitude, p) >= 1000) return UNITS[i - 1];
        return UNITS[i];
      }
    }
    return UNITS[UNITS.length - 1];
  }

  function numberToString(num, p = 2) {
    const [unit, magnitude] = autoUnit(num, p);
    return `${pyRound(num / magnitude, p)} ${unit}`;
  }
  // the meta device runs nothing on hardware: every time and rate reads n/a (the JSON's are null)
  const META = Boolean(DATA && DATA.metadata && DATA.metadata.device_type === "meta");
  const fmt = {
    number: (x) => numberToString(x || 0),
    macs: (x) => numberToString(x || 0) + "MACs",
    flops: (x) => numberToString(x || 0), // a count, as the text report prints "fwd flops"
    rate: (x) => META ? "n/a" : numberToString(pyRound(x || 0, 2)) + "FLOP/s", // a rate: never "FLOPS", which reads as a count
    bytes: (x) => numberToString(x || 0) + "B",
    params: (x) => numberToString(x || 0).replace("G", "B").trim(),
    duration: (x) => META ? "n/a" : numberToString(x || 0) + "s",
    pct: (x) => `${pyRound(x || 0, 2)}%`,
    count: (x) => `${pyRound(x || 0, 2)}`,
  };
  const share = (part, whole) => (whole ? (100 * part) / whole : 0);

  // ---------------------------------------------------------------- DOM helpers (text only)
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    if (props) {
      for (const [key, value] of Object.entries(props)) {
        if (value === undefined || value === null) continue;
        if (key === "text") node.textContent = value;
        else if (key === "cls") node.className = value;
        else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
        else if (key === "style") Object.assign(node.style, value); // CSSOM: allowed by the page's CSP
        else node[key] = value;
      }
    }
    for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  function scroller(child) { return el("div", { cls: "scroll" }, child); }
  function figuresTable(head, rows, id) {
    return el("table", { cls: "figures", id },
      el("thead", null, el("tr", null, ...head.map((h) => el("th", { text: h })))),
      el("tbody", null, ...rows.map((r) => el("tr", null, ...r.map((c, k) =>
        c instanceof Node ? el("td", null, c) : el("td", { text: String(c) }))))));
  }
  function kv(pairs) {
    const dl = el("dl", { cls: "kv" });
    for (const [k, v] of pairs) if (v !== null && v !== undefined) dl.append(el("dt", { text: k }), el("dd", { text: String(v) }));
    return dl;
  }

  // ---------------------------------------------------------------- the tree view
  /* Nodes in the result's pre-order with self and inclusive [macs, flops, latency, calls] per
   * phase ("total" sums the phases), inclusive saved activations. `latencies` (path -> phase ->
   * seconds): inclusive latencies the result gives (several steps: each the median of its
   * samples, which do not add up), in place of the sums. */
  function buildTree(result, latencies) {
    const mods = (result && result.modules) || [];
    const index = new Map();
    mods.forEach((m, i) => index.set(m.name, i));
    const nodes = mods.map((m, i) => {
      const self = {};
      for (const ph of PHASES) {
        const s = m.phases && m.phases[ph];
        self[ph] = s ? [s.macs, s.flops, s.latency, s.calls] : null;
      }
      const parent = m.parent === null || m.parent === undefined ? -1 : index.get(m.parent);
      return {
        i, m, name: m.name, type: m.type_name, depth: m.depth, parent: parent === undefined ? -1 : parent,
        children: [], self, inc: {}, act: (m.memory && m.memory.activations) || 0,
        key: (m.name + "\u0000" + m.type_name).toLowerCase(),
      };
    });
    for (const node of nodes) {
      for (const c of node.m.children || []) { const j = index.get(c); if (j !== undefined) node.children.push(j); }
    }
    for (let i = nodes.length - 1; i >= 0; i--) { // reversed pre-order: children before parents
      const node = nodes[i];
      const total = [0, 0, 0, 0];
      for (const ph of PHASES) {
        const s = node.self[ph];
        let acc = s ? [s[0], s[1], s[2], s[3]] : null;
        for (const j of node.children) {
          const c = nodes[j].inc[ph];
          if (!c) continue;
          if (!acc) acc = [0, 0, 0, 0]; // a child's calls are its own
          acc[0] += c[0]; acc[1] += c[1]; acc[2] += c[2];
        }
        const given = latencies && latencies[node.name];
        if (acc && given && given[ph] !== undefined) acc[2] = given[ph];
        node.inc[ph] = acc;
        if (acc) for (let k = 0; k < 4; k++) total[k] += acc[k];
      }
      node.inc.total = total;
      for (const j of node.children) node.act += nodes[j].act;
    }
    const root = index.has("") ? index.get("") : 0;
    return { nodes, index, root };
  }

  const TREE = buildTree(DATA, DERIVED.module_latencies);
  const NODES = TREE.nodes;
  const ROOT = NODES[TREE.root];
  const PRESENT = PHASES.filter((ph) => NODES.some((n) => n.self[ph]));
  const TRAINING = PRESENT.includes("backward") || PRESENT.includes("step");
  const HAS_MEMORY = NODES.some((n) => n.m.memory && Object.keys(n.m.memory).length);
  const RANKS = Array.isArray(DATA.ranks) && DATA.ranks.length ? DATA.ranks : null;
  const rankTrees = new Map(); // built when a detail panel first needs them

  function stat(node, ph) { return node.inc[ph] || [0, 0, 0, 0]; }
  function value(node, metric, ph) {
    switch (metric) {
      case "params": return node.m.params || 0;
      case "memory": return node.act;
      case "macs": return stat(node, ph)[MACS];
      case "flops": return stat(node, ph)[FLOPS];
      case "latency": return stat(node, ph)[LATENCY];
      default: return 0;
    }
  }
  function formatValue(metric, v) {
    return { params: fmt.params, memory: fmt.bytes, macs: fmt.macs, flops: fmt.flops, latency: fmt.duration }[metric](v);
  }
  function achieved(node, ph) { const s = stat(node, ph); return s[LATENCY] > 0 ? s[FLOPS] / s[LATENCY] : 0; }
  const label = (node) => (node.name === "" ? `(root) ${node.type}` : node.name);
  const leafName = (node) => (node.name === "" ? node.type : node.name.slice(node.name.lastIndexOf(".") + 1));
  /* "encoder.layer.0.attention.self.query" in n characters: its start, "…", and its end (the
   * end tells siblings apart). */
  function elideMiddle(text, n) {
    if (text.length <= n || n < 8) return text;
    const head = Math.ceil((n - 1) * 0.35);
    return text.slice(0, head) + "\u2026" + text.slice(text.length - (n - 1 - head));
  }
  /* How many characters of a path fit in a name cell (its width over a monospace-ish 7 px). */
  function nameChars(cell) { return Math.max(8, Math.floor(((cell.clientWidth || 220) - 12) / 7)); }

  // ---------------------------------------------------------------- efficiency
  /* The efficiency analysis' figures (flopsight.analysis.efficiency.efficiency_dict) when the
   * page has them: the peak used, and per module path and phase achieved FLOPS, fraction of
   * the peak, bytes, intensity and the roofline's verdict. */
  const EFF = DERIVED.efficiency || null;
  const PEAK = EFF && EFF.peak && EFF.peak.flops_per_second > 0 ? EFF.peak.flops_per_second : null;
  /* The peak beside a ratio: "989.5 TFLOP/s bf16, NVIDIA H100 SXM". */
  function effPeakLabel() {
    return PEAK ? `${fmt.flops(PEAK)}FLOP/s ${EFF.peak.dtype || ""}, ${EFF.peak.name || "given"}` : null;
  }
  function effEntry(path, ph) {
    const phases = EFF && EFF.modules && EFF.modules[path];
    return (phases && phases[ph]) || null;
  }
  const bestCache = {};
  function best(ph) {
    if (!(ph in bestCache)) bestCache[ph] = NODES.reduce((b, n) => Math.max(b, achieved(n, ph)), 0);
    return bestCache[ph];
  }
  /* Fraction in [0, 1], or null when the module did no timed arithmetic in the phase. */
  function efficiency(node, ph) {
    const e = effEntry(node.name, ph);
    if (e && typeof e.fraction_of_peak === "number") return Math.max(0, Math.min(1, e.fraction_of_peak));
    const a = achieved(node, ph);
    if (!(a > 0)) return null;
    if (PEAK) return Math.min(1, a / PEAK);
    const b = best(ph);
    return b > 0 ? a / b : null;
  }

  // ---------------------------------------------------------------- colours
  const RAMP = [[215, 48, 39], [244, 109, 67], [253, 174, 97], [254, 224, 139], [217, 239, 139], [166, 217, 106], [102, 189, 99], [26, 152, 80]];
  function ramp(f) {
    const x = Math.max(0, Math.min(1, f)) * (RAMP.length - 1);
    const k = Math.min(RAMP.length - 2, Math.floor(x));
    const t = x - k;
    const c = RAMP[k].map((a, j) => Math.round(a + (RAMP[k + 1][j] - a) * t));
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }
  function hash(text) { let h = 2166136261; for (let i = 0; i < text.length; i++) { h ^= text.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; }
  const typeColours = new Map();
  function typeColour(type) {
    if (!typeColours.has(type)) { const h = hash(type); typeColours.set(type, `hsl(${h % 360},${45 + (h >> 9) % 25}%,${62 + (h >> 17) % 14}%)`); }
    return typeColours.get(type);
  }
  const NEUTRAL = "rgb(200,204,210)";
  function colourOf(node) {
    if (state.colour === "type") return typeColour(node.type);
    if (state.colour === "depth") return `hsl(${(205 + node.depth * 37) % 360},55%,${68 - Math.min(node.depth, 8)}%)`;
    const f = efficiency(node, state.phase);
    return f === null ? NEUTRAL : ramp(f);
  }

  // ---------------------------------------------------------------- state
  const state = {
    metric: "macs", phase: "forward", colour: "efficiency", query: "", zoom: TREE.root, selected: -1,
    sortKey: null, sortDir: -1, maxDepth: null, hideZero: false, opsPhase: null, opsSort: "flops", opsSub: true,
  };
  let matches = null; // Uint8Array of search hits, or null when no search is active

  // ---------------------------------------------------------------- header
  /* metadata.mode names how profile() ran the model ("forward", "generate"); "custom" is any
   * span of the user's code (Profiler, the trainers, `flopsight profile --mode train`): named by
   * what it ran, a training step when it ran a backward or an optimizer step. */
  function modeLabel(mode) {
    if (mode !== "custom") return mode;
    return TRAINING ? "train" : "span";
  }

  function renderHeader() {
    const md = DATA.metadata || {};
    $("title").textContent = document.title;
    const parts = [
      md.model && `model ${md.model}`, md.device && `device ${md.device}`, md.dtype && `dtype ${md.dtype}`,
      md.batch_size && `batch ${md.batch_size_given || md.batch_size}`, md.mode && `mode ${modeLabel(md.mode)}`,
      md.world_size > 1 && `world size ${md.world_size}`,
      md.timing && md.timing.method && `timing ${md.timing.method} (${md.timing.clock})`,
      md.torch_version && `torch ${md.torch_version}`, `${NODES.length} modules`,
    ].filter(Boolean);
    $("meta").textContent = parts.join(" \u00b7 ");
    const it = DERIVED.iteration || {};
    const fwd = stat(ROOT, "forward");
    const cards = [["Params", fmt.params(ROOT.m.params)], ["fwd MACs", fmt.macs(fwd[MACS])], ["fwd FLOPs (count)", fmt.flops(fwd[FLOPS])],
      ["fwd latency", fmt.duration(it.forward ? it.forward.latency : fwd[LATENCY])]];
    if (it.forward && it.forward.latency > 0) cards.push(["fwd FLOP/s", fmt.rate(it.forward.flops / it.forward.latency)]);
    // a forward timed as the device's: the GPU's busy time (its kernels) and the rest, idle (launch-bound)
    if (md.timing && md.timing.method === "device" && DATA.kernels && typeof DATA.kernels.busy === "number") {
      const busy = DATA.kernels.busy, total = fwd[LATENCY];
      cards.push(["fwd GPU busy", fmt.duration(busy)],
        ["fwd GPU idle", fmt.pct(total > 0 ? Math.max(100 * (1 - busy / total), 0) : 0)]);
    }
    if (PRESENT.includes("backward")) {
      const bwd = stat(ROOT, "backward");
      cards.push(["bwd MACs", fmt.macs(bwd[MACS])], ["bwd latency", fmt.duration(it.backward ? it.backward.latency : bwd[LATENCY])]);
    }
    if (PRESENT.includes("recompute")) cards.push(["recompute FLOPs", fmt.flops(stat(ROOT, "recompute")[FLOPS])]);
    if (PRESENT.includes("step")) cards.push(["step latency", fmt.duration(it.step ? it.step.latency : 0)]);
    if (TRAINING && it.latency > 0) cards.push(["iteration", fmt.duration(it.latency)], ["iteration FLOP/s", fmt.rate(it.flops_per_second)]);
    if (it.samples && it.latency > 0) cards.push(["samples/s", META ? "n/a" : fmt.count(it.samples_per_second)]);
    if (DATA.memory) cards.push(["memory peak", fmt.bytes(DATA.memory.peak)]);
    const model = (EFF && EFF.model) || {};
    if (PEAK) {
      cards.push(["peak used", effPeakLabel()]);
      if (typeof model.mfu === "number") cards.push(["MFU", fmt.pct(100 * model.mfu)]);
      if (typeof model.hfu === "number") cards.push(["HFU", fmt.pct(100 * model.hfu)]);
      if (typeof model.forward_fraction_of_peak === "number") cards.push(["fwd of peak", fmt.pct(100 * model.forward_fraction_of_peak)]);
    }
    const cov = DERIVED.coverage;
    if (cov) cards.push(["op coverage", `${cov.ops_with_formula} / ${cov.ops_seen} ops, ${fmt.pct(100 * cov.fraction)} of calls`]);
    const box = clear($("cards"));
    for (const [k, v] of cards) box.append(el("div", { cls: "card" }, el("div", { cls: "label", text: k }), el("div", { cls: "value", text: v })));
    const unsupported = Object.entries(DATA.unsupported_ops || {});
    if (unsupported.length) {
      $("warnings").append(el("div", { cls: "warning", text:
        "Operators without a formula (not counted): " + unsupported.map(([op, n]) => `${op} \u00d7${n}`).join(", ") }));
    }
    if (md.error) $("warnings").append(el("div", { cls: "warning", text: `The profiled call raised: ${md.error}` }));
    if (md.device_type === "meta") {
      $("warnings").append(el("div", { cls: "warning", id: "meta-device", text: "Profiled on the meta device: "
        + "nothing ran on hardware, so latencies and FLOP/s are n/a. The counts (params, MACs, FLOPs, bytes) "
        + "are exact." }));
    }
    $("footer").textContent = `flopsight ${md.flopsight_version || ""} \u00b7 schema ${DATA.schema_version}` +
      (md.python_version ? ` \u00b7 Python ${md.python_version}` : "");
  }

  // ---------------------------------------------------------------- generate()
  /* A generate() profile as the text report splits it: prefill (with an encoder's pass), the
   * decode steps in total, per step and per token, what ran between the calls, each step. */
  function renderGeneration() {
    const g = DERIVED.generation;
    if (!g) return;
    $("generation-section").hidden = false;
    const box = clear($("generation"));
    const row = (name, s, note) => [name, fmt.macs(s.macs), fmt.flops(s.flops), fmt.duration(s.latency), note || ""];
    const rowsOf = [
      row("prefill", g.prefill, g.encoder ? `the prompt, with the encoder's pass (${g.encoder_paths.join(", ")})` : "the prompt"),
      ...(g.encoder ? [row("encoder", g.encoder, "once, inside the prefill")] : []),
      row("decode", g.decode, `${g.decode.calls} step${g.decode.calls === 1 ? "" : "s"}`),
      row("per decode step", g.per_step, "average"),
      row("per token", g.per_token, `per step / batch ${g.batch_size}`),
      row("between calls", g.other, "logits processing, sampling"),
      row("total", g.total, `${g.new_tokens} new token${g.new_tokens === 1 ? "" : "s"} per sequence`),
    ];
    box.append(scroller(figuresTable(["", "MACs", "FLOPs", "latency", ""], rowsOf, "generation-table")));
    if (g.decode_steps.length) {
      const shown = g.decode_steps.slice(0, 64);
      box.append(el("p", { cls: "muted", text: "each decode step's latency: " + shown.map((t) => fmt.duration(t)).join(", ")
        + (g.decode_steps.length > shown.length ? ` and ${g.decode_steps.length - shown.length} more` : "") }));
    }
  }

  // ---------------------------------------------------------------- a model-parallel job
  /* What the JSON derives for a parallel job (rank 0's gathered result): each rank's place on
   * the mesh and its work, a pipeline's stages with their bubbles and neighbours, each MoE
   * layer's tokens per rank. */
  function renderParallel() {
    const job = DATA.job_figures, pipe = DATA.pipeline_figures, experts = DATA.expert_figures || [];
    if (!job && !pipe && !experts.length) return;
    $("parallel-section").hidden = false;
    const box = clear($("parallel"));
    if (job) {
      const place = (c) => Object.entries(c).map(([k, v]) => `${k} ${v}`).join(", ") || "-";
      box.append(el("p", { id: "job-line", text: `the job: ${fmt.flops(job.flops)} FLOPs per step over its ranks, `
        + `${fmt.rate(job.flops_per_second)} over the slowest step, MFU `
        + (job.mfu === null ? `n/a (${job.why})` : fmt.pct(100 * job.mfu))
        + (job.added == null ? "" : `; the parallel plan adds ${fmt.flops(job.added)} FLOPs `
          + "(redistributions, copies of the modules every model-parallel rank runs whole)") }));
      box.append(scroller(figuresTable(["rank", "place", "MACs", "FLOPs", "step", "params"], job.ranks.map((r) =>
        [r.rank, place(r.coordinates), fmt.macs(r.macs), fmt.flops(r.flops), fmt.duration(r.step), fmt.params(r.params)]),
      "job-table")));
    }
    if (pipe) {
      box.append(el("p", { text: `pipeline: ${pipe.schedule}, ${pipe.num_stages} stages on ${pipe.ranks} ranks, `
        + `${pipe.micro_batches} micro-batches; the schedule's ideal bubble ${fmt.pct(100 * pipe.ideal)}` }));
      box.append(scroller(figuresTable(["stages", "rank", "fwd MACs / micro-batch", "bwd MACs / micro-batch",
        "fwd / bwd compute per micro-batch", "bubble", "neighbours (sent / received)"], pipe.stages.map((s) =>
        [s.stages.join(", "), s.rank, fmt.macs(s.fwd_macs), fmt.macs(s.bwd_macs),
          `${fmt.duration(s.fwd_seconds)} / ${fmt.duration(s.bwd_seconds)}`,
          `${fmt.duration(s.bubble)} (${fmt.pct(share(s.bubble, s.step))} of ${fmt.duration(s.step)})`,
          s.boundaries.map((b) => `rank ${b.peer}: ${fmt.bytes(b.sent)} / ${fmt.bytes(b.received)}`).join("; ")]),
      "pipeline-table")));
    }
    if (experts.length) {
      box.append(scroller(figuresTable(["MoE layer", "tokens (per rank, or per expert)", "imbalance (max / mean)",
        "params per token / held"], experts.map((e) => [e.path || "<root>", e.tokens.join(", "),
        fmt.count(e.imbalance), e.params_active === null ? "-" : `${fmt.params(e.params_active)} / ${fmt.params(e.params_total)}`]),
      "experts-table")));
    }
  }

  // ---------------------------------------------------------------- step anatomy and ranks
  // "profiler": flopsight's own time left in the phases, never one of the user's parts
  const ANATOMY_PARTS = ["forward", "backward", "step", "framework", "communication", "other", "profiler"];
  function stackBar(anatomy, scaleTotal) {
    const total = ANATOMY_PARTS.reduce((s, k) => s + (anatomy[k] || 0), 0);
    const bar = el("div", { cls: "stack" });
    bar.style.width = scaleTotal > 0 ? `${(100 * total) / scaleTotal}%` : "100%";
    for (const k of ANATOMY_PARTS) {
      const v = anatomy[k] || 0;
      if (v <= 0) continue;
      bar.append(el("div", { cls: `seg-${k}`, title: `${k}: ${fmt.duration(v)} (${fmt.pct(share(v, total))})`, style: { width: `${share(v, total)}%` } }));
    }
    return bar;
  }
  function renderAnatomy() {
    // an inference profile's anatomy is its forward and a sliver of "other": not worth a section
    const an = DERIVED.anatomy && ["backward", "step", "communication"].some((k) => DERIVED.anatomy[k] > 0) ? DERIVED.anatomy : null;
    const ranks = DERIVED.ranks;
    if (!an && !ranks) return;
    $("anatomy-section").hidden = false;
    if (an) {
      const total = ANATOMY_PARTS.reduce((s, k) => s + (an[k] || 0), 0);
      $("anatomy").append(stackBar(an, 0), el("div", { cls: "legend" }, ...ANATOMY_PARTS.filter((k) => an[k] > 0).map((k) =>
        el("span", null, el("span", { cls: `swatch seg-${k}` }), `${k} ${fmt.duration(an[k] || 0)} (${fmt.pct(share(an[k] || 0, total))})`))));
      const it = DERIVED.iteration;
      if (it && (it.timed || it.median_of)) {
        // one step, one time: which step the anatomy is, and which the latencies are
        const of = it.median_of ? `Of the median of ${it.median_of} profiled steps (${fmt.duration(it.timed ? it.counted_latency : it.latency)}).`
          : `Of the profiled step (${fmt.duration(it.counted_latency)}).`;
        const timed = it.timed ? ` The latencies elsewhere (${fmt.duration(it.latency)} per iteration) are the step before the profiled one's, timed at its phases' boundaries only (not counted).` : "";
        $("anatomy").append(el("p", { cls: "muted", text: of + timed }));
      }
    }
    if (!ranks) return;
    const box = $("rank-bars");
    const it = ranks.iteration;
    const failed = Object.keys(ranks.failed || {});
    const notProfiling = ranks.not_profiling || [];
    box.append(el("h3", { text: `Ranks: ${ranks.world}` + (ranks.missing.length ? `, missing ${ranks.missing.join(", ")}` : "") +
      (failed.length ? `, failed ${failed.join(", ")}` : "") + (notProfiling.length ? `, not profiling ${notProfiling.join(", ")}` : "") +
      (it ? ` \u00b7 iteration min / mean / max ${fmt.duration(it.min)} / ${fmt.duration(it.mean)} / ${fmt.duration(it.max)}` : "") }));
    const st = ranks.straggler;  // by busy time: ranks that wait for each other end their steps together
    if (st) box.append(el("p", { cls: "straggler", text: `Straggler: rank ${st.rank}, busy ${fmt.duration(st.busy)} against the other ranks' ` +
      `${fmt.duration(st.others)}: ${fmt.duration(st.excess)} more (${fmt.pct(st.share)} of its ${fmt.duration(st.step)} step). Busy: all but waiting for other ranks.` }));
    const longest = Math.max(0, ...ranks.per_rank.filter(Boolean).map((r) => r.latency));
    ranks.per_rank.forEach((r, rank) => {
      const row = el("div", { cls: "rankrow" + (st && st.rank === rank ? " slowest" : "") }, el("span", { cls: "label", text: `rank ${rank}` }));
      const failure = (ranks.failed || {})[String(rank)];
      if (failure) row.append(el("span", { cls: "empty", text: `failed: ${failure}` }), el("span"));
      else if (!r) row.append(el("span", { cls: "empty", text: notProfiling.includes(rank) ? "not profiling" : "no result" }), el("span"));
      else row.append(r.anatomy ? stackBar(r.anatomy, longest) : el("div", { cls: "bar", style: { width: `${share(r.latency, longest)}%` } }),
        el("span", { cls: "num", text: fmt.duration(r.latency) }));
      box.append(row);
    });
  }

  // ---------------------------------------------------------------- icicle chart
  const canvas = $("icicle");
  const ctx = canvas.getContext("2d");
  const xs = new Float64Array(NODES.length);
  const ws = new Float64Array(NODES.length);
  let drawn = []; // indices laid out, ancestors of the zoomed module first
  let chartWidth = 0;

  function layout() {
    chartWidth = Math.max(200, $("chart-wrap").clientWidth);
    drawn = [];
    ws.fill(0);
    const { metric, phase } = state;
    for (let a = NODES[state.zoom].parent; a >= 0; a = NODES[a].parent) { xs[a] = 0; ws[a] = chartWidth; drawn.push(a); }
    drawn.reverse();
    xs[state.zoom] = 0; ws[state.zoom] = chartWidth;
    const stack = [state.zoom];
    while (stack.length) {
      const i = stack.pop();
      drawn.push(i);
      const node = NODES[i];
      if (!node.children.length) continue;
      let sum = 0;
      for (const j of node.children) sum += Math.max(0, value(NODES[j], metric, phase));
      // children never outgrow their parent (shared parameters are counted once in it)
      const denom = Math.max(value(node, metric, phase), sum);
      if (!(denom > 0)) continue;
      const k = ws[i] / denom;
      let x = xs[i];
      for (let c = node.children.length - 1; c >= 0; c--) { // pushed in reverse: drawn left to right
        const j = node.children[c];
        const w = Math.max(0, value(NODES[j], metric, phase)) * k;
        if (w >= MIN_WIDTH) { stack.push(j); }
        ws[j] = w;
      }
      for (const j of node.children) { xs[j] = x; x += ws[j]; }
    }
  }

  function draw() {
    const maxDepth = drawn.reduce((d, i) => Math.max(d, NODES[i].depth), 0);
    const height = (maxDepth + 1) * CHART_ROW;
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(chartWidth * ratio);
    canvas.height = Math.round(height * ratio);
    canvas.style.height = `${height}px`;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, chartWidth, height);
    ctx.font = "12px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
    ctx.textBaseline = "middle";
    const zoomDepth = NODES[state.zoom].depth;
    for (const i of drawn) {
      const node = NODES[i];
      const x = xs[i], w = ws[i], y = node.depth * CHART_ROW;
      if (w < MIN_WIDTH) continue;
      const ancestor = node.depth < zoomDepth;
      ctx.globalAlpha = matches && !matches[i] ? 0.22 : 1;
      ctx.fillStyle = ancestor ? "rgb(226,229,234)" : colourOf(node);
      ctx.fillRect(x, y, Math.max(w - 1, MIN_WIDTH), CHART_ROW - 1);
      if (w > 34) {
        ctx.fillStyle = "#1d2330";
        ctx.fillText(fit(`${leafName(node)}${node.name === "" ? "" : " \u00b7 " + node.type}`, w - 8), x + 4, y + CHART_ROW / 2);
      }
    }
    ctx.globalAlpha = 1;
    if (state.selected >= 0 && ws[state.selected] >= MIN_WIDTH && drawn.includes(state.selected)) {
      const node = NODES[state.selected];
      ctx.strokeStyle = "#111827";
      ctx.lineWidth = 2;
      ctx.strokeRect(xs[state.selected] + 1, node.depth * CHART_ROW + 1, Math.max(ws[state.selected] - 3, 1), CHART_ROW - 3);
    }
    renderBreadcrumb();
    renderLegend();
  }

  const charWidth = 6.6;
  function fit(text, width) {
    if (text.length * charWidth <= width) return text;
    let n = Math.max(0, Math.floor(width / charWidth) - 1);
    while (n > 0 && ctx.measureText(text.slice(0, n) + "\u2026").width > width) n--;
    return n > 0 ? text.slice(0, n) + "\u2026" : "";
  }

  function redrawChart() { layout(); draw(); }

  function hit(event) {
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left, y = event.clientY - rect.top;
    const depth = Math.floor(y / CHART_ROW);
    for (const i of drawn) {
      if (NODES[i].depth === depth && ws[i] >= MIN_WIDTH && x >= xs[i] && x < xs[i] + ws[i]) return i;
    }
    return -1;
  }

  function renderBreadcrumb() {
    const box = clear($("breadcrumb"));
    const path = [];
    for (let a = state.zoom; a >= 0; a = NODES[a].parent) path.unshift(a);
    box.append("Zoomed to: ");
    path.forEach((i, k) => {
      if (k) box.append(" \u203a ");
      box.append(el("button", { cls: "link", type: "button", text: k === 0 ? `${NODES[i].type} (root)` : leafName(NODES[i]),
        on: { click: () => zoomTo(i) } }));
    });
  }

  function renderLegend() {
    const box = clear($("legend"));
    const root = NODES[state.zoom];
    box.append(el("span", { text: `width: ${metricLabel()} \u00b7 ${label(root)} = ${formatValue(state.metric, value(root, state.metric, state.phase))}` }));
    if (state.colour === "efficiency") {
      const r = el("span", { cls: "ramp" });
      r.style.background = `linear-gradient(to right, ${RAMP.map((c) => `rgb(${c[0]},${c[1]},${c[2]})`).join(",")})`;
      const basis = PEAK ? `of peak ${effPeakLabel()}` : `of the best module's ${fmt.rate(best(state.phase))}`;
      box.append(el("span", { text: "\u00b7 colour: achieved FLOP/s 0%" }), r, el("span", { text: `100% ${basis}` }),
        el("span", null, el("span", { cls: "swatch", style: { background: NEUTRAL } }), "no timed FLOPs"));
    } else box.append(el("span", { text: `\u00b7 colour: ${state.colour === "type" ? "module type" : "depth"}` }));
  }

  function metricLabel() {
    const m = { params: "params", memory: "activations saved for backward", macs: "MACs", flops: "FLOPs", latency: "latency" }[state.metric];
    return state.metric === "params" || state.metric === "memory" ? m : `${state.phase} ${m}`;
  }

  function zoomTo(i) { state.zoom = i; redrawChart(); }

  function bindChart() {
    const tip = $("tooltip");
    canvas.addEventListener("mousemove", (event) => {
      const i = hit(event);
      if (i < 0) { tip.hidden = true; return; }
      const node = NODES[i];
      const v = value(node, state.metric, state.phase);
      const f = efficiency(node, state.phase);
      tip.textContent = `${label(node)}\n${node.type}\n${metricLabel()}: ${formatValue(state.metric, v)}` +
        ` (${fmt.pct(share(v, value(ROOT, state.metric, state.phase)))} of the model)` +
        (f !== null ? `\nachieved ${fmt.rate(achieved(node, state.phase))}` : "");
      tip.hidden = false;
      const wrap = $("chart-wrap").getBoundingClientRect();
      const left = Math.min(event.clientX - wrap.left + 14, wrap.width - tip.offsetWidth - 4);
      tip.style.left = `${Math.max(0, left)}px`;
      tip.style.top = `${event.clientY - wrap.top + $("chart-wrap").scrollTop + 14}px`;
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (event) => {
      const i = hit(event);
      if (i < 0) return;
      if (NODES[i].depth < NODES[state.zoom].depth) { zoomTo(i); }
      select(i, { scrollTable: true });
    });
    canvas.addEventListener("dblclick", (event) => { const i = hit(event); if (i >= 0) zoomTo(i); });
  }

  // ---------------------------------------------------------------- table
  const COLUMNS = [
    { key: "name", title: "Module" },
    { key: "type", title: "Type" },
    // tied weights count in each module holding them (the model's total once): marked "*"
    { key: "params", title: "Params", num: true, get: (n) => n.m.params || 0,
      show: (v, n) => fmt.params(v) + (n && n.m.params_shared ? "*" : "") },
    { key: "macs", title: "MACs", num: true, get: (n) => stat(n, state.phase)[MACS], show: fmt.number },
    { key: "flops", title: "FLOPs", num: true, get: (n) => stat(n, state.phase)[FLOPS], show: fmt.flops },
    { key: "latency", title: "Latency", num: true, get: (n) => stat(n, state.phase)[LATENCY], show: fmt.duration },
    { key: "rate", title: "FLOP/s", num: true, get: (n) => achieved(n, state.phase), show: (x) => META ? "n/a" : fmt.number(pyRound(x, 2)) },
    { key: "share", title: "% of model", num: true, get: (n) => share(value(n, state.metric, state.phase), value(ROOT, state.metric, state.phase)), show: fmt.pct },
    HAS_MEMORY && { key: "memory", title: "Act. mem", num: true, get: (n) => n.act, show: fmt.bytes },
    { key: "eff", title: "Eff.", num: true, get: (n) => { const f = efficiency(n, state.phase); return f === null ? -1 : f; },
      show: (f) => (f < 0 ? "\u2013" : fmt.pct(100 * f)) },
  ].filter(Boolean);
  $("table").style.setProperty("--cols", `minmax(140px, 2fr) minmax(70px, 1fr) repeat(${COLUMNS.length - 2}, minmax(66px, 1fr))`);
  let rows = [];
  const pool = [];

  function renderTableHead() {
    const head = clear($("table-head"));
    for (const col of COLUMNS) {
      const sorted = state.sortKey === col.key || (col.key === "name" && state.sortKey === null);
      const arrow = sorted ? (state.sortKey === null ? "" : state.sortDir < 0 ? " \u25bc" : " \u25b2") : "";
      const title = col.key === "share" ? `% ${state.metric}` : col.title;
      head.append(el("span", { cls: (col.num ? "num " : "") + (sorted ? "sorted" : ""), role: "columnheader", text: title + arrow,
        title: col.key === "eff" ? (PEAK ? "achieved FLOP/s / peak" : "achieved FLOP/s / the best module's") :
          col.num && col.key !== "params" && col.key !== "memory" ? `${title}, ${state.phase}` : title,
        on: { click: () => sortBy(col.key) } }));
    }
  }

  function sortBy(key) {
    if (key === "name") { state.sortKey = null; state.sortDir = -1; }
    else if (state.sortKey === key) state.sortDir = -state.sortDir;
    else { state.sortKey = key; state.sortDir = COLUMNS.find((c) => c.key === key).num ? -1 : 1; }
    refreshTable();
  }

  function refreshTable() {
    const maxDepth = state.maxDepth;
    rows = [];
    for (const node of NODES) {
      if (matches && !matches[node.i]) continue;
      if (maxDepth !== null && node.depth > maxDepth) continue;
      if (state.hideZero && !(value(node, state.metric, state.phase) > 0)) continue;
      rows.push(node.i);
    }
    if (state.sortKey !== null) {
      const col = COLUMNS.find((c) => c.key === state.sortKey);
      const dir = state.sortDir;
      if (col.num) {
        const keys = new Float64Array(NODES.length);
        for (const i of rows) keys[i] = col.get(NODES[i]);
        rows.sort((a, b) => dir * (keys[a] - keys[b]) || a - b);
      } else {
        rows.sort((a, b) => dir * NODES[a].type.localeCompare(NODES[b].type) || a - b);
      }
    }
    $("row-count").textContent = `${rows.length} of ${NODES.length} modules`;
    $("table-spacer").style.height = `${rows.length * TABLE_ROW}px`;
    renderTableHead();
    renderRows();
  }

  function renderRows() {
    const body = $("table-body");
    const first = Math.max(0, Math.floor(body.scrollTop / TABLE_ROW) - 2);
    const count = Math.ceil((body.clientHeight || 480) / TABLE_ROW) + 5;
    while (pool.length < count) {
      const row = el("div", { cls: "vrow", role: "row" }, ...COLUMNS.map((c) => el("span", { cls: c.num ? "num" : null, role: "cell" })));
      row.addEventListener("click", () => { const i = Number(row.dataset.index); if (i >= 0) select(i, { ensureVisible: true }); });
      body.append(row);
      pool.push(row);
    }
    const treeOrder = state.sortKey === null;
    for (let k = 0; k < pool.length; k++) {
      const row = pool[k];
      const r = first + k;
      if (k >= count || r >= rows.length) { row.hidden = true; row.dataset.index = "-1"; continue; }
      const node = NODES[rows[r]];
      row.hidden = false;
      row.dataset.index = String(node.i);
      row.style.transform = `translateY(${r * TABLE_ROW}px)`;
      row.classList.toggle("selected", node.i === state.selected);
      const cells = row.children;
      // tree order: the leaf name, indented under its parent; sorted: the whole path, its middle
      // elided when too long (encoder.l…self.query), so rows that differ at the end stay apart.
      // The whole path is always the cell's tooltip.
      cells[0].textContent = treeOrder || node.name === "" ? (node.name === "" ? label(node) : leafName(node))
        : elideMiddle(node.name, nameChars(cells[0]));
      cells[0].title = label(node);
      cells[0].style.paddingLeft = `${6 + (treeOrder ? Math.min(node.depth, 12) * 12 : 0)}px`;
      cells[1].textContent = node.type;
      cells[1].title = node.type;
      for (let c = 2; c < COLUMNS.length; c++) cells[c].textContent = COLUMNS[c].show(COLUMNS[c].get(node), node);
    }
  }

  function scrollTableTo(i) {
    const r = rows.indexOf(i);
    if (r < 0) return;
    const body = $("table-body");
    const top = r * TABLE_ROW;
    if (top < body.scrollTop || top > body.scrollTop + body.clientHeight - TABLE_ROW) body.scrollTop = Math.max(0, top - body.clientHeight / 3);
    renderRows();
  }

  function bindTable() {
    let pending = false;
    $("table-body").addEventListener("scroll", () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; renderRows(); });
    });
    $("max-depth").addEventListener("input", (e) => {
      const v = parseInt(e.target.value, 10);
      state.maxDepth = Number.isFinite(v) && v >= 0 ? v : null;
      refreshTable();
    });
    $("hide-zero").addEventListener("change", (e) => { state.hideZero = e.target.checked; refreshTable(); });
  }

  // ---------------------------------------------------------------- search
  function applySearch(query) {
    state.query = query.trim().toLowerCase();
    if (!state.query) { matches = null; $("search-count").textContent = ""; }
    else {
      matches = new Uint8Array(NODES.length);
      let n = 0;
      for (const node of NODES) if (node.key.includes(state.query)) { matches[node.i] = 1; n++; }
      $("search-count").textContent = `${n} match${n === 1 ? "" : "es"}`;
    }
    draw();
    refreshTable();
  }

  function bindControls() {
    const phase = $("phase");
    for (const ph of ["recompute", "step"]) if (PRESENT.includes(ph)) phase.append(el("option", { value: ph, text: ph }));
    for (const opt of phase.options) if (opt.value !== "total" && !PRESENT.includes(opt.value)) opt.textContent += " (none)";
    if (!HAS_MEMORY) $("metric").querySelector("option[value=memory]").textContent += " (none)";
    $("metric").addEventListener("change", (e) => { state.metric = e.target.value; redrawChart(); refreshTable(); });
    phase.addEventListener("change", (e) => { state.phase = e.target.value; redrawChart(); refreshTable(); if (state.selected >= 0) renderDetail(); });
    $("colour").addEventListener("change", (e) => { state.colour = e.target.value; draw(); });
    let timer = 0;
    $("search").addEventListener("input", (e) => { clearTimeout(timer); timer = setTimeout(() => applySearch(e.target.value), NODES.length > 3000 ? 120 : 0); });
    $("search").addEventListener("keydown", (e) => {
      if (e.key === "Enter") { clearTimeout(timer); applySearch(e.target.value); if (rows.length) select(rows[0], { ensureVisible: true, scrollTable: true }); }
      if (e.key === "Escape") { e.target.value = ""; applySearch(""); }
    });
    $("reset-zoom").addEventListener("click", () => zoomTo(TREE.root));
    let resize = 0;
    window.addEventListener("resize", () => { cancelAnimationFrame(resize); resize = requestAnimationFrame(() => { redrawChart(); renderRows(); }); });
  }

  // ---------------------------------------------------------------- selection and detail panel
  function select(i, opts = {}) {
    state.selected = i;
    if (opts.ensureVisible) {
      // a module outside the zoomed subtree, or too narrow to see, is shown from its parent
      let inside = false;
      for (let a = i; a >= 0; a = NODES[a].parent) if (a === state.zoom) { inside = true; break; }
      if (!inside || ws[i] < 2) { state.zoom = NODES[i].parent >= 0 ? NODES[i].parent : i; layout(); }
    }
    draw();
    renderDetail();
    if (opts.scrollTable) scrollTableTo(i); else renderRows();
  }

  /* The module and, with ``all``, every module below it. */
  function subtreeOf(node, all = true) {
    const found = [], stack = [node.i];
    while (stack.length) {
      const n = NODES[stack.pop()];
      found.push(n);
      if (all) for (const j of n.children) stack.push(j);
    }
    return found;
  }

  function opsOf(node, ph, subtree) {
    const totals = new Map();
    for (const n of subtreeOf(node, subtree)) {
      const ops = n.m.ops && n.m.ops[ph];
      if (ops) for (const [name, s] of Object.entries(ops)) {
        const t = totals.get(name) || { macs: 0, flops: 0, latency: 0, calls: 0, bytes: 0, device: 0 };
        t.macs += s.macs; t.flops += s.flops; t.latency += s.latency; t.calls += s.calls;
        const moved = n.m.bytes_moved && n.m.bytes_moved[ph];
        if (moved && typeof moved[name] === "number") t.bytes += moved[name];
        const device = n.m.op_kernel_time && n.m.op_kernel_time[ph];
        if (device && typeof device[name] === "number") t.device += device[name];
        totals.set(name, t);
      }
    }
    return [...totals.entries()];
  }

  function renderDetail() {
    const box = clear($("detail"));
    const node = NODES[state.selected];
    if (!node) { box.append(el("p", { cls: "empty", text: "Click a module in the chart or the table to see its figures." })); return; }
    const m = node.m;
    box.append(el("div", { cls: "path", id: "detail-name", text: label(node) }));
    const nav = el("div", { cls: "tabs" });
    if (node.parent >= 0) nav.append(el("button", { type: "button", text: "\u2191 parent", on: { click: () => select(node.parent, { ensureVisible: true, scrollTable: true }) } }));
    nav.append(el("button", { type: "button", text: "zoom chart here", on: { click: () => zoomTo(node.i) } }));
    box.append(nav);
    box.append(kv([
      ["type", node.type], ["depth", node.depth], ["forward calls", node.self.forward ? node.self.forward[CALLS] : 0],
      ["params", `${fmt.params(m.params)} (${fmt.pct(share(m.params, ROOT.m.params))} of the model)` +
        (m.params !== m.params_trainable ? `, trainable ${fmt.params(m.params_trainable)}` : "") +
        (m.params_shared ? `; * ${fmt.params(m.params_shared)} of them shared with modules outside it (tied weights: `
          + "each module holding them counts them, the model's total once)" : "")],
      ["children", node.children.length || null],
      ["shared with", m.shared_with && m.shared_with.length ? m.shared_with.join(", ") : null],
      ["aliases", m.aliases && m.aliases.length ? m.aliases.join(", ") : null],
      ["ignored", m.ignored ? "yes" : null],
    ]));
    if (m.extra_repr) box.append(el("pre", { text: `${node.type}(${m.extra_repr})` }));

    box.append(el("h3", { text: "Figures (with submodules; self: its own code only)" }));
    const phases = PRESENT.length ? PRESENT : ["forward"];
    const cols = phases.length > 1 ? [...phases, "total"] : phases;
    const selfOf = (ph) => (ph === "total" ? PHASES.reduce((acc, p) => (node.self[p] ? acc.map((v, k) => v + node.self[p][k]) : acc), [0, 0, 0, 0])
      : node.self[ph] || [0, 0, 0, 0]);
    const rate = (s) => (s[LATENCY] > 0 ? s[FLOPS] / s[LATENCY] : 0);
    const metrics = [
      ["MACs", (ph) => fmt.macs(stat(node, ph)[MACS])],
      ["FLOPs", (ph) => fmt.flops(stat(node, ph)[FLOPS])],
      ["latency", (ph) => fmt.duration(stat(node, ph)[LATENCY])],
      ["FLOP/s", (ph) => fmt.rate(rate(stat(node, ph)))],
      ["% of model time", (ph) => fmt.pct(share(stat(node, ph)[LATENCY], stat(ROOT, ph)[LATENCY]))],
      ["self MACs", (ph) => fmt.macs(selfOf(ph)[MACS])],
      ["self latency", (ph) => fmt.duration(selfOf(ph)[LATENCY])],
    ];
    box.append(scroller(figuresTable(["", ...cols], metrics.map(([name, f]) => [name, ...cols.map(f)]), "figures-table")));

    if (m.memory && Object.keys(m.memory).length) {
      box.append(el("h3", { text: "Memory" }), kv([["activations saved (with submodules)", fmt.bytes(node.act)],
        ["forward peak", fmt.bytes(m.memory.peak || 0)], ["backward peak", fmt.bytes(m.memory.peak_backward || 0)]]));
    }
    renderEfficiency(box, node);
    renderOps(box, node);
    renderKernels(box, node);
    renderCollectives(box, node);
    renderRankDetail(box, node);
  }

  function renderEfficiency(box, node) {
    const entries = PRESENT.map((ph) => [ph, effEntry(node.name, ph)]).filter(([, e]) => e);
    if (!entries.length) return;
    box.append(el("h3", { text: `Efficiency${PEAK ? " (peak " + effPeakLabel() + ")" : ""}` }));
    const known = (x) => x !== null && x !== undefined;
    const columns = [
      ["achieved", "flops_per_second", (x) => fmt.rate(x)], ["of peak", "fraction_of_peak", (x) => fmt.pct(100 * x)],
      ["bytes", "bytes", fmt.bytes], ["FLOPs/byte", "intensity", fmt.count], ["bound", "bound", String],
    ].filter(([, key]) => entries.some(([, e]) => known(e[key]))); // only the columns something is known for
    if (columns.length) {
      box.append(scroller(figuresTable(["phase", ...columns.map((c) => c[0])],
        entries.map(([ph, e]) => [ph, ...columns.map(([, key, f]) => (known(e[key]) ? f(e[key]) : "\u2013"))]), "efficiency-table")));
    }
    if (!PEAK && EFF.reason) box.append(el("p", { cls: "muted", text: `No fraction of peak: ${EFF.reason}.` }));
  }

  function renderOps(box, node) {
    const phases = PRESENT.filter((ph) => opsOf(node, ph, true).length);
    if (!phases.length) return;
    if (!phases.includes(state.opsPhase)) state.opsPhase = phases.includes(state.phase) ? state.phase : phases[0];
    const section = el("div", { id: "ops" });
    const rerender = () => { const fresh = el("div"); renderOps(fresh, node); section.replaceWith(fresh.firstChild); };
    section.append(el("h3", { text: "Operators" }));
    const tabs = el("div", { cls: "tabs" });
    for (const ph of phases) tabs.append(el("button", { type: "button", cls: ph === state.opsPhase ? "on" : "", text: ph, on: { click: () => { state.opsPhase = ph; rerender(); } } }));
    tabs.append(el("span", { cls: "muted", text: " by " }));
    for (const [key, text] of [["flops", "FLOPs"], ["latency", "time"]]) {
      tabs.append(el("button", { type: "button", cls: state.opsSort === key ? "on" : "", text, on: { click: () => { state.opsSort = key; rerender(); } } }));
    }
    if (node.children.length) {
      const cb = el("input", { type: "checkbox", checked: state.opsSub, on: { change: (e) => { state.opsSub = e.target.checked; rerender(); } } });
      tabs.append(el("label", null, cb, " with submodules"));
    }
    section.append(tabs);
    const ops = opsOf(node, state.opsPhase, state.opsSub || !node.children.length);
    const key = state.opsSort;
    ops.sort((a, b) => b[1][key] - a[1][key] || b[1].flops - a[1].flops || (a[0] < b[0] ? -1 : 1));
    const totalTime = ops.reduce((s, [, t]) => s + t.latency, 0);
    const totalFlops = ops.reduce((s, [, t]) => s + t.flops, 0);
    const withBytes = ops.some(([, t]) => t.bytes > 0);
    const withDevice = Boolean(DATA.kernels); // kernels recorded: the time of those each operator launched
    const shown = ops.slice(0, 50);
    // where the operators were timed (metadata.timing.ops; older files: the counting pass, apart
    // from the modules' timed calls where those were timed in calls of their own)
    const timing = (DATA.metadata || {}).timing || {};
    const apart = timing.ops ? timing.ops === "counting" : ["separate", "device"].includes(timing.method);
    section.append(el("p", { cls: "muted", text: apart
      ? "time: the operators' own time, measured in the counting pass (the modules were timed in calls of their "
        + "own: there an operator's time can exceed its module's latency)."
      : "time: the operators' own time, measured in the calls that timed the modules." }));
    section.append(scroller(figuresTable(["operator", "calls", "FLOPs", "% FLOPs", apart ? "time (counting pass)" : "time", "% time", ...(withBytes ? ["bytes"] : []),
      ...(withDevice ? ["device time"] : [])],
      shown.map(([name, t]) => [name, t.calls, fmt.flops(t.flops), fmt.pct(share(t.flops, totalFlops)), fmt.duration(t.latency),
        fmt.pct(share(t.latency, totalTime)), ...(withBytes ? [fmt.bytes(t.bytes)] : []),
        ...(withDevice ? [fmt.duration(t.device)] : [])]), "ops-table")));
    if (ops.length > shown.length) section.append(el("p", { cls: "muted", text: `and ${ops.length - shown.length} more operators` }));
    box.append(section);
  }

  function kernelsOf(node, ph) {
    const totals = new Map();
    for (const n of subtreeOf(node)) {
      const kernels = n.m.kernels && n.m.kernels[ph];
      if (kernels) for (const [name, k] of Object.entries(kernels)) {
        const t = totals.get(name) || { calls: 0, seconds: 0 };
        t.calls += k.calls; t.seconds += k.seconds;
        totals.set(name, t);
      }
    }
    return [...totals.entries()].sort((a, b) => b[1].seconds - a[1].seconds || (a[0] < b[0] ? -1 : 1));
  }

  // its kernels with its submodules', per phase: recorded with kernels=True
  function renderKernels(box, node) {
    if (!DATA.kernels) return;
    const section = el("div", { id: "kernels" });
    const what = DATA.kernels.source === "cuda" ? "CUDA kernels, GPU time" : "CPU operators, self time";
    section.append(el("h3", { text: `Kernels (${what}; with submodules)` }));
    let any = false;
    for (const ph of PRESENT) {
      const kernels = kernelsOf(node, ph);
      if (!kernels.length) continue;
      any = true;
      const total = kernels.reduce((s, [, k]) => s + k.seconds, 0);
      const shown = kernels.slice(0, 30);
      section.append(el("p", { text: `${ph}: ${kernels.length} kernel${kernels.length > 1 ? "s" : ""}, ${fmt.duration(total)}` }));
      section.append(scroller(figuresTable(["kernel", "calls", "device time", "share"],
        shown.map(([name, k]) => [name, k.calls, fmt.duration(k.seconds), fmt.pct(share(k.seconds, total))]), "kernels-table")));
      if (kernels.length > shown.length) section.append(el("p", { cls: "muted", text: `and ${kernels.length - shown.length} more kernels` }));
    }
    if (any) box.append(section);
  }

  function renderCollectives(box, node) {
    const mine = (DATA.collectives || []).filter((c) => c.module === node.name);
    if (!mine.length) return;
    box.append(el("h3", { text: "Collectives" }), figuresTable(["kind", "phase", "calls", "bytes", "time", "exposed"],
      mine.map((c) => [c.kind, c.phase, c.count, fmt.bytes(c.bytes), fmt.duration(c.latency), fmt.duration(c.exposed || 0)])));
  }

  function rankTree(r) {
    const given = DERIVED.rank_module_latencies && DERIVED.rank_module_latencies[r];
    if (!rankTrees.has(r)) rankTrees.set(r, RANKS[r] ? buildTree(RANKS[r], given || undefined) : null);
    return rankTrees.get(r);
  }

  function renderRankDetail(box, node) {
    if (!RANKS) return;
    box.append(el("h3", { text: "Per rank" }));
    const spreads = DERIVED.ranks && DERIVED.ranks.modules && DERIVED.ranks.modules[node.name];
    if (spreads) {
      for (const [ph, s] of Object.entries(spreads)) {
        box.append(el("p", { cls: "muted", text: `${ph} latency min / mean / max ${fmt.duration(s.min)} / ${fmt.duration(s.mean)} / ${fmt.duration(s.max)}, slowest rank ${s.slowest}` }));
      }
    }
    const perRank = RANKS.map((_, r) => {
      const t = rankTree(r);
      const n = t && t.index.has(node.name) ? t.nodes[t.index.get(node.name)] : null;
      return n ? { fwd: stat(n, "forward"), bwd: stat(n, "backward") } : null;
    });
    const longest = Math.max(0, ...perRank.filter(Boolean).map((p) => p.fwd[LATENCY] + p.bwd[LATENCY]));
    box.append(figuresTable(["rank", "fwd MACs", "fwd latency", "bwd op time", "fwd + bwd"], perRank.map((p, r) => p
      ? [`rank ${r}`, fmt.macs(p.fwd[MACS]), fmt.duration(p.fwd[LATENCY]), fmt.duration(p.bwd[LATENCY]),
        el("div", { cls: "bar", style: { width: `${Math.max(1, share(p.fwd[LATENCY] + p.bwd[LATENCY], longest))}%`, minWidth: "2px" } })]
      : [`rank ${r}`, "no result", "", "", ""])));
  }

  // ---------------------------------------------------------------- start
  const api = {
    modules: NODES.length,
    drawnAt: null,
    format: fmt, // the number formats, for tests against flopsight.renderers.numbers
    /* The chart rectangle of a module in viewport coordinates (null when not drawn). */
    rectOf(path) {
      const i = TREE.index.get(path);
      if (i === undefined || ws[i] < MIN_WIDTH || !drawn.includes(i)) return null;
      const r = canvas.getBoundingClientRect();
      return { x: r.left + xs[i], y: r.top + NODES[i].depth * CHART_ROW, width: ws[i], height: CHART_ROW - 1 };
    },
    select(path) { const i = TREE.index.get(path); if (i !== undefined) select(i, { ensureVisible: true, scrollTable: true }); },
    zoom(path) { const i = TREE.index.get(path); if (i !== undefined) zoomTo(i); },
  };
  window.flopsightReport = api;

  renderHeader();
  renderGeneration();
  renderAnatomy();
  renderParallel();
  bindControls();
  bindChart();
  bindTable();
  if (!PRESENT.includes("forward") && PRESENT.length) { state.phase = "total"; $("phase").value = "total"; }
  if (!(value(ROOT, "macs", state.phase) > 0)) { // nothing to size by MACs: fall back to latency, then params
    state.metric = value(ROOT, "latency", state.phase) > 0 ? "latency" : "params";
    $("metric").value = state.metric;
  }
  redrawChart();
  refreshTable();
  renderDetail();
  api.drawnAt = performance.now();
  document.documentElement.dataset.state = "drawn";
})();
