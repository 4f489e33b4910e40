const SVG_NS = "http://www.w3.org/2000/svg";
function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}
function floats(buf) {
  if (!buf) return new Float32Array(0);
  const b = buf.buffer ? buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) : buf;
  return new Float32Array(b);
}
const fmt = (x) => (x >= 0.001 || x === 0 ? x.toPrecision(3) : x.toExponential(2));
// A token for the readout: its label quoted, and the raw token it was cleaned from where that reads otherwise
// (labels.q_raw / k_raw hold those positions only).
function named(lab, side, i) {
  const raw = (lab[`${side}_raw`] || {})[i];
  return `“${lab[side][i]}”` + (raw === undefined ? "" : ` (token ${raw})`);
}

// A heatmap of rows × cols weights on a canvas, colours from 0 to top on the app's scale; cells hidden by a
// causal mask grey. hover(r, c) and click(r, c) get cell indices.
function heatmap(canvas, w, rows, cols, top, lut, opts = {}) {
  const cell = Math.max(1, Math.min(opts.cell || 14, Math.floor((opts.width || 560) / Math.max(cols, 1))));
  const img = new ImageData(cols, rows);
  const grey = opts.mask || [217, 217, 217];
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
    const i = r * cols + c, o = 4 * i;
    if (opts.hidden && opts.hidden(r, c)) { img.data.set(grey, o); }
    else { const l = Math.max(0, Math.min(255, Math.round(w[i] / top * 255))); img.data.set(lut.slice(3 * l, 3 * l + 3), o); }
    img.data[o + 3] = 255;
  }
  canvas.width = cols; canvas.height = rows;
  canvas.getContext("2d").putImageData(img, 0, 0);
  canvas.style.width = `${cols * cell}px`; canvas.style.height = `${rows * (opts.rowCell || cell)}px`;
  const at = (ev) => {
    const b = canvas.getBoundingClientRect();
    return [Math.floor((ev.clientY - b.top) / b.height * rows), Math.floor((ev.clientX - b.left) / b.width * cols)];
  };
  canvas.onmousemove = (ev) => { const [r, c] = at(ev); if (r >= 0 && r < rows && c >= 0 && c < cols && opts.hover) opts.hover(r, c); };
  canvas.onclick = (ev) => { const [r, c] = at(ev); if (r >= 0 && r < rows && c >= 0 && c < cols && opts.click) opts.click(r, c); };
}

function labelled(canvas, qLabels, kLabels, cell) {
  // Token labels beside and above a heatmap when its cells are tall enough to read them.
  const wrap = el("div", { class: "av-grid" });
  if (cell >= 9 && qLabels.length <= 160) {
    const top = el("div", { class: "av-klabels", style: `margin-left:var(--av-left);height:auto` });
    kLabels.forEach((t) => top.append(el("span", { style: `width:${cell}px` }, t)));
    const left = el("div", { class: "av-qlabels" });
    qLabels.forEach((t) => left.append(el("span", { style: `height:${cell}px;line-height:${cell}px` }, t)));
    const row = el("div", { class: "av-row" }, left, canvas);
    wrap.append(top, row);
    requestAnimationFrame(() => wrap.style.setProperty("--av-left", `${left.offsetWidth}px`));
  } else wrap.append(canvas);
  return wrap;
}

function render({ model, el: root }) {
  root.classList.add("attnviz");
  const get = (k) => model.get(k);
  const ask = (change) => { model.set("view", { ...get("view"), ...change }); model.save_changes(); };
  const title = el("div", { class: "av-title" });
  const error = el("div", { class: "av-error" });
  const controls = el("div", { class: "av-controls" });
  const overview = el("div", { class: "av-overview" });
  const detail = el("div", { class: "av-detail" });
  const focus = el("div", { class: "av-focus" });
  const links = el("div", { class: "av-links" });
  const readout = el("div", { class: "av-readout" }, "\u00a0");
  root.append(title, error, controls, overview, el("div", { class: "av-cols" }, detail, focus), links, readout);
  const lut = () => Uint8Array.from(get("info").lut);
  const mask = () => { const m = get("info").mask; return [1, 3, 5].map((i) => parseInt(m.slice(i, i + 2), 16)); };

  function select(options, value, onchange, cls) {
    const s = el("select", { class: cls, onchange: (e) => onchange(e.target.value) });
    options.forEach(([v, t]) => { const o = el("option", { value: String(v) }, t); if (String(v) === String(value)) o.selected = true; s.append(o); });
    return s;
  }
  function tokenPicker(labels, value, onchange, cls) {
    if (labels.length <= 512) return select(labels.map((t, i) => [i, `${i}: ${t}`]), value, (v) => onchange(+v), cls);
    const n = el("input", { type: "number", min: 0, max: labels.length - 1, value, class: cls });
    n.onchange = () => onchange(Math.max(0, Math.min(labels.length - 1, +n.value | 0)));
    return n;
  }

  function drawControls() {
    const info = get("info"), v = get("view"), L = info.L, H = info.H;
    controls.replaceChildren();
    if (info.stacks.length > 1)
      controls.append(el("label", {}, "stack ", select(info.stacks.map((s) => [s, s]), v.stack, (s) => ask({ stack: s }), "av-stack")));
    controls.append(el("label", {}, "layer ", select([...Array(L).keys()].map((l) => [l, l]), v.layer, (l) => ask({ layer: +l }), "av-layer")));
    controls.append(el("label", {}, "head ", select([["mean", "mean"], ...[...Array(H).keys()].map((h) => [h, h])],
      v.head === null ? "mean" : v.head, (h) => ask({ head: h === "mean" ? null : +h }), "av-head")));
    if (info.long) {
      const size = el("input", { type: "number", min: 1, max: info.window_max, value: v.size, class: "av-size" });
      size.onchange = () => ask({ size: +size.value | 0 });
      const start = el("input", { type: "number", min: 0, max: info.Tq - 1, value: v.start, class: "av-start" });
      start.onchange = () => ask({ start: +start.value | 0 });
      controls.append(el("label", {}, "window from ", start), el("label", {}, " size ", size));
    }
  }

  function drawTitle() {
    const info = get("info");
    title.textContent = `attnviz · ${info.model || "attention"} · ${info.Tq.toLocaleString()} tokens` +
      (info.stacks.length > 1 ? ` · ${info.stack}` : "");
    error.textContent = get("error");
  }

  function drawOverview() {
    const o = get("overview"), v = get("view"), info = get("info");
    const img = el("img", { src: o.png, alt: o.title, class: "av-mosaic" });
    const width = Math.min(900, Math.max(240, o.size[1] * 3));
    img.style.width = `${width}px`; img.style.height = `${o.size[0] * width / o.size[1]}px`;
    const headAt = (ev) => {
      const b = img.getBoundingClientRect();
      const x = (ev.clientX - b.left) / b.width * o.size[1], y = (ev.clientY - b.top) / b.height * o.size[0];
      return [Math.min(info.L - 1, Math.floor(y / o.pitch[0])), Math.min(info.H - 1, Math.floor(x / o.pitch[1]))];
    };
    img.onclick = (ev) => { const [l, h] = headAt(ev); ask({ layer: l, head: h }); };
    img.onmousemove = (ev) => { const [l, h] = headAt(ev); readout.textContent = `layer ${l}, head ${h} · click to open`; };
    const box = el("div", { class: "av-box" });
    const k = width / o.size[1];
    const [pq, pk] = o.pitch;
    if (v.head === null) Object.assign(box.style, { left: "0px", top: `${v.layer * pq * k}px`, width: `${width}px`, height: `${(pq - 1) * k}px` });
    else Object.assign(box.style, { left: `${v.head * pk * k}px`, top: `${v.layer * pq * k}px`, width: `${(pk - 1) * k}px`, height: `${(pq - 1) * k}px` });
    overview.replaceChildren(el("div", { class: "av-caption" }, o.title), el("div", { class: "av-mosaic-wrap" }, img, box));
  }

  function drawDetail() {
    const d = get("detail"), info = get("info"), lab = get("labels"), v = get("view");
    if (!d.rows) return;
    const rows = d.rows[1] - d.rows[0], cols = d.cols[1] - d.cols[0];
    const w = floats(d.weights);
    const canvas = el("canvas", { class: "av-heatmap" });
    const cell = Math.max(1, Math.min(14, Math.floor(520 / Math.max(cols, 1))));
    const offset = info.Tk - info.Tq;
    heatmap(canvas, w, rows, cols, d.top, lut(), {
      width: 520, mask: mask(),
      hidden: d.causal ? (r, c) => c + d.cols[0] > r + d.rows[0] + offset : null,
      hover: (r, c) => { readout.textContent = `query ${r + d.rows[0]} ${named(lab, "q", r + d.rows[0])} · key ${c + d.cols[0]} ${named(lab, "k", c + d.cols[0])} · weight ${fmt(w[r * cols + c])}`; },
      click: (r) => ask({ direction: "to", focus: r + d.rows[0] }),
    });
    const parts = [el("div", { class: "av-caption av-detail-title" }, d.title),
      el("div", { class: "av-note" }, `dark = ${fmt(d.top)} or more (the head's own high quantile) · click a row to focus its token`),
      labelled(canvas, lab.q.slice(d.rows[0], d.rows[1]), lab.k.slice(d.cols[0], d.cols[1]), cell)];
    if (d.blocks) {
      const b = d.blocks, bw = floats(b.weights), bc = el("canvas", { class: "av-blocks" });
      heatmap(bc, bw, b.shape[0], b.shape[1], b.top, lut(), {
        width: 360, cell: 3,
        hover: (r, c) => { readout.textContent = `queries from ${r * b.block[0]} · keys from ${c * b.block[1]} · block max ${fmt(bw[r * b.shape[1] + c])}`; },
        click: (r, c) => ask({ start: Math.min(r, c) * b.block[0] }),
      });
      parts.unshift(el("div", { class: "av-caption" }, b.title), bc);
    }
    detail.replaceChildren(...parts);
  }

  function drawFocus() {
    const f = get("focus"), info = get("info"), lab = get("labels"), v = get("view");
    if (!f.weights) return;
    const side = f.direction === "to" ? "k" : "q", along = lab[side], own = f.direction === "to" ? lab.q : lab.k;
    const w = floats(f.weights), every = floats(f.heads), n = along.length;
    const bars = el("canvas", { class: "av-bars" });
    const width = Math.max(n, Math.min(480, n * 14)), height = 120, ctx = bars.getContext("2d");
    bars.width = width; bars.height = height;
    const top = Math.max(...w, 1e-6);
    ctx.fillStyle = "#2171b5";
    for (let i = 0; i < n; i++) { const h = w[i] / top * (height - 4); ctx.fillRect(i * width / n, height - h, Math.max(1, width / n - 1), h); }
    bars.onmousemove = (ev) => { const b = bars.getBoundingClientRect(); const i = Math.floor((ev.clientX - b.left) / b.width * n);
      if (i >= 0 && i < n) readout.textContent = `${f.direction === "to" ? "key" : "query"} ${i} ${named(lab, side, i)} · weight ${fmt(w[i])}`; };
    const grid = el("canvas", { class: "av-focus-heads" });
    heatmap(grid, every, info.H, n, f.top, lut(), { width: 480, rowCell: 10,
      hover: (h, i) => { readout.textContent = `head ${h} · ${named(lab, side, i)} · weight ${fmt(every[h * n + i])}`; },
      click: (h) => ask({ head: h }) });
    const dir = select([["to", "attends to"], ["from", "attended by"]], f.direction, (d) => ask({ direction: d }), "av-direction");
    focus.replaceChildren(el("div", { class: "av-sub" }, "Token focus"),
      el("label", {}, "the token ", dir, " ", tokenPicker(own, f.index, (i) => ask({ focus: i }), "av-token")),
      el("div", { class: "av-caption av-focus-title" }, f.title), bars,
      el("div", { class: "av-caption" }, f.heads_title), grid);
  }

  function drawLinks() {
    const k = get("links"), info = get("info"), lab = get("labels");
    if (!k.weights) return;
    const w = floats(k.weights), canvas = el("canvas", { class: "av-link-grid" });
    heatmap(canvas, w, info.L, info.H, k.top, lut(), { width: 360, cell: 24,
      hover: (l, h) => { readout.textContent = `layer ${l}, head ${h} · weight ${fmt(w[l * info.H + h])} · click to open`; },
      click: (l, h) => ask({ layer: l, head: h }) });
    links.replaceChildren(el("div", { class: "av-sub" }, "Which heads link two tokens?"),
      el("label", {}, "query ", tokenPicker(lab.q, k.query, (i) => ask({ query: i }), "av-query")),
      el("label", {}, " key ", tokenPicker(lab.k, k.key, (i) => ask({ key: i }), "av-key")),
      el("div", { class: "av-caption av-links-title" }, k.title), el("div", { class: "av-note" }, k.note), canvas);
  }

  const all = () => { drawTitle(); drawControls(); drawOverview(); drawDetail(); drawFocus(); drawLinks(); };
  all();
  model.on("change:info", all);
  model.on("change:view", () => { drawControls(); drawOverview(); });
  model.on("change:overview", drawOverview);
  model.on("change:detail", drawDetail);
  model.on("change:focus", drawFocus);
  model.on("change:links", drawLinks);
  model.on("change:error", drawTitle);
}
export default { render };
