/* The inferscope report's timeline: lanes of typed-array columns (see reporters/lanes.py) drawn on a canvas.
 * Only what the view needs is drawn: events found by binary search on start (and on the running
 * maximum of end), drawn one by one when few are in view, else binned per pixel (from a per-lane
 * prefix sum of busy time when the pixel is wider than its bins). window.inferscopeTimeline exposes the
 * view, a draw counter and timings for tests and benchmarks. */
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const api = (window.inferscopeTimeline = { draws: 0, timing: {}, view: null });
  const LABEL_W = 200, AXIS_H = 22, ROW_H = 14, STREAM_H = 18, IDLE_H = 9, GAP = 5, DETAIL = 3, MAX_LINKS = 400, BINS = 16384;
  const TYPES = { u1: Uint8Array, u2: Uint16Array, u4: Uint32Array, i4: Int32Array, f4: Float32Array, f8: Float64Array };
  const COLORS = {
    rounds: ["#d5dce5", "#7f9cc9", "#c3c9d1", "#d97706"],
    scopes: ["#2e9e7e"], modules: ["#8b6cc4"], python: ["#e08a3c", "#c9772c"],
    runtime: ["#5a88d6", "#d6453d", "#e9a23b", "#9aa3ad"],
    stream: ["#3d7cc9", "#e67e22", "#8e44ad", "#16a085", "#7f8c8d", "#9aa6b2", "#c0392b", "#0e9aa7"],
    idle: ["#9aa5b1", "#e5533d", "#f0b429", "#8e44ad", "#8fb3d9", "#607080", "#0e9aa7"], // as .idle-N in report.css
  };
  const CATS = /* lanes.CATS */ {}; // what each lane's `cat` column means: written in by reporters/html.py
  const NAMED = { scopes: ["#2e9e7e", "#3fb28f", "#23876a", "#57c0a0"], modules: ["#8b6cc4", "#a083d6", "#7559b0", "#b59be0"],
    python: ["#e08a3c", "#eba15f", "#c9772c", "#f2b77f"], stream0: ["#3d7cc9", "#5591d6", "#2f69b0", "#6ea3de", "#2a5c9c"] };

  // The toolbar, the same in every page (built here, so that no page repeats it, and none shows it without script).
  const TOOLS = [["in", "zoom in (+)", "+"], ["out", "zoom out (−)", "−"], ["left", "pan left (←)", "←"],
    ["right", "pan right (→)", "→"], ["fit", "whole test (0)", "fit"]];
  $("is-toolbar").innerHTML = TOOLS.map(([a, t, s]) => `<button type="button" data-act="${a}" title="${t}">${s}</button>`)
    .join(" ") + ' <span id="is-range" class="range"></span> ' +
    "<span class=\"hint\">wheel: zoom · drag: pan · click a finding's event to go there</span>";
  const t0Load = performance.now();
  const M = JSON.parse($("is-manifest").textContent);
  const bytes = decode($("is-data").textContent.trim());
  api.timing.decode_ms = performance.now() - t0Load;
  const lanes = M.lanes.map((L) => makeLane(L, bytes.buffer));
  const runtimeStarts = []; // [global offset, lane] of each runtime lane, for the launch links
  let off = 0;
  for (const i of M.runtime_lanes) { runtimeStarts.push([off, lanes[i]]); off += lanes[i].n; }
  let tMin = Infinity, tMax = -Infinity;
  for (const l of lanes) if (l.n) { tMin = Math.min(tMin, l.s[0]); tMax = Math.max(tMax, l.endMax[l.n - 1]); }
  if (!isFinite(tMin)) { tMin = 0; tMax = 1; }
  if (tMax <= tMin) tMax = tMin + 1000;
  api.timing.build_ms = performance.now() - t0Load - api.timing.decode_ms;
  api.events = M.events;

  const box = $("is-timeline"), canvas = $("is-canvas"), tip = $("is-tip"), ctx = canvas.getContext("2d");
  let view = fitView(), layout = [], plotW = 600, pending = false, drag = null;

  function decode(text) {
    if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text);
    const bin = atob(text), out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function makeLane(L, buf) {
    const col = (k) => (L.cols[k] ? new TYPES[L.cols[k][0]](buf, L.cols[k][1], L.cols[k][2]) : null);
    const n = L.n, raw = col("start"), dur = col("dur"), s = new Float64Array(n), endMax = new Float64Array(n);
    let t = L.base, e = -Infinity;
    for (let i = 0; i < n; i++) {
      t = L.start_mode === "delta" ? t + raw[i] : raw[i];
      s[i] = t;
      e = Math.max(e, t + dur[i]);
      endMax[i] = e;
    }
    const c = (k) => (L.consts[k] !== undefined ? L.consts[k] : 0);
    return { ...L, n, s, dur, endMax, name: col("name"), cat: col("cat"), catC: c("cat"), depth: col("depth"),
      depthC: c("depth"), link: col("link"), value: col("value"), peer: col("peer"), peerC: c("peer"), pyr: null };
  }

  // ---- finding events -----------------------------------------------------------------
  function firstEndingAfter(l, t) { // first i with endMax[i] > t (endMax never decreases)
    let lo = 0, hi = l.n;
    while (lo < hi) { const m = (lo + hi) >> 1; if (l.endMax[m] > t) hi = m; else lo = m + 1; }
    return lo;
  }
  function firstStartingAt(l, t) { // first i with s[i] >= t
    let lo = 0, hi = l.n;
    while (lo < hi) { const m = (lo + hi) >> 1; if (l.s[m] >= t) hi = m; else lo = m + 1; }
    return lo;
  }
  const catOf = (l, i) => (l.cat ? l.cat[i] : l.catC);
  const rowOf = (l, i) => Math.min(l.rows - 1, l.depth ? l.depth[i] : l.depthC);
  function colorOf(l, i) {
    const c = catOf(l, i);
    if (l.name && (l.kind === "scopes" || l.kind === "modules" || l.kind === "python")) {
      const p = NAMED[l.kind]; return p[l.name[i] % p.length];
    }
    if (l.kind === "stream" && c === 0 && l.name) return NAMED.stream0[l.name[i] % NAMED.stream0.length];
    return COLORS[l.kind][c] || "#888";
  }
  function label(l, i) {
    if (!l.name) return CATS.idle[catOf(l, i)] + " (GPU idle)";
    const full = M.strings[l.name[i]];
    return l.kind === "python" ? full.slice(full.lastIndexOf(";") + 1) : full;
  }

  // ---- the view ----------------------------------------------------------------------
  function fitView() { const pad = (tMax - tMin) * 0.01; return { t0: tMin - pad, t1: tMax + pad }; }
  function setView(a, b) {
    const span = tMax - tMin, w = Math.min(Math.max(b - a, 1000), span * 1.5);
    const mid = Math.min(Math.max((a + b) / 2, tMin - span * 0.25), tMax + span * 0.25);
    view = { t0: mid - w / 2, t1: mid + w / 2 };
    request();
  }
  function zoom(factor, at) {
    const c = at === undefined ? (view.t0 + view.t1) / 2 : at;
    setView(c - (c - view.t0) * factor, c + (view.t1 - c) * factor);
  }
  const pan = (frac) => setView(view.t0 + (view.t1 - view.t0) * frac, view.t1 + (view.t1 - view.t0) * frac);
  api.getView = () => [view.t0, view.t1];
  api.setView = setView;
  api.zoom = zoom;
  function request() { if (!pending) { pending = true; requestAnimationFrame(draw); } }

  // ---- drawing -----------------------------------------------------------------------
  function doLayout() {
    layout = [];
    let y = AXIS_H, group = null;
    for (const l of lanes) {
      if (l.group !== group) { y += group === null ? 0 : 16; group = l.group; }
      const rowH = l.kind === "idle" ? IDLE_H : l.kind === "stream" ? STREAM_H : ROW_H, h = l.rows * rowH;
      layout.push({ l, y, h, rowH });
      y += h + GAP;
    }
    for (const e of layout) { // a device's idle gaps shade its streams
      if (e.l.kind !== "idle") continue;
      const own = layout.filter((o) => o.l.kind === "stream" && o.l.device === e.l.device);
      e.band = own.length ? [own[0].y, own[own.length - 1].y + own[own.length - 1].h] : null;
    }
    return y + 4;
  }

  function draw() {
    pending = false;
    const start = performance.now(), dpr = window.devicePixelRatio || 1, cssW = Math.max(300, box.clientWidth);
    const cssH = doLayout();
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
      canvas.width = Math.round(cssW * dpr); canvas.height = Math.round(cssH * dpr); canvas.style.height = cssH + "px";
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    plotW = cssW - LABEL_W - 8;
    const links = [];
    ctx.save(); ctx.beginPath(); ctx.rect(LABEL_W, 0, plotW, cssH); ctx.clip();
    drawAxis(cssH);
    for (const e of layout) if (e.band) paint(e.l, e.band[0], e.band[1] - e.band[0], true, null);
    for (const e of layout) paint(e.l, e.y, e.rowH, false, links);
    drawLinks(links);
    ctx.restore();
    drawLabels();
    api.draws += 1;
    api.view = [view.t0, view.t1];
    api.timing.last_draw_ms = performance.now() - start;
    if (api.draws === 1) { api.timing.first_draw_ms = api.timing.last_draw_ms; api.timing.ready_ms = performance.now(); }
    $("is-range").textContent = `${fmtT(view.t0)} – ${fmtT(view.t1)} (${fmtDur(view.t1 - view.t0)} in view)`;
  }

  const X = (t) => LABEL_W + ((t - view.t0) / (view.t1 - view.t0)) * plotW;

  function paint(l, y, rowH, shade, links) {
    if (!l.n) return;
    const i0 = firstEndingAfter(l, view.t0), i1 = firstStartingAt(l, view.t1);
    if (i1 - i0 <= plotW * DETAIL) detail(l, i0, i1, y, rowH, shade, links);
    else binned(l, i0, i1, y, rowH, shade);
  }

  function detail(l, i0, i1, y, rowH, shade, links) {
    const last = new Float64Array(l.rows).fill(-1);
    let labels = 0, style = "";
    ctx.globalAlpha = shade ? 0.16 : 1;
    ctx.font = "10px system-ui, sans-serif";
    for (let i = i0; i < i1; i++) {
      const x0 = X(l.s[i]), x1 = X(l.s[i] + l.dur[i]), row = shade ? 0 : rowOf(l, i);
      if (x1 < LABEL_W) continue;
      const px = Math.floor(x0);
      if (x1 - x0 < 1 && px <= last[row]) continue; // this pixel is drawn already
      last[row] = Math.floor(x1);
      const c = colorOf(l, i);
      if (c !== style) { ctx.fillStyle = c; style = c; }
      const yy = y + row * rowH, h = shade ? rowH : rowH - 1;
      if (l.kind === "rounds" && catOf(l, i) === 3) { ctx.fillRect(px - 1, yy, 3, h); continue; } // a mark
      ctx.fillRect(x0, yy, Math.max(1, x1 - x0), h);
      if (!shade && x1 - x0 > 40 && labels < 400 && l.name) {
        labels += 1;
        const text = label(l, i), room = Math.floor((Math.min(x1, LABEL_W + plotW) - Math.max(x0, LABEL_W) - 6) / 5.6);
        if (room > 2) {
          ctx.fillStyle = "#fff"; ctx.fillText(text.length > room ? text.slice(0, room - 1) + "…" : text, Math.max(x0, LABEL_W) + 3, yy + rowH - 4);
          ctx.fillStyle = style;
        }
      }
      if (links && l.link && l.link[i] >= 0) links.push([l, i, y + row * rowH]);
    }
    ctx.globalAlpha = 1;
  }

  function pyramid(l) { // per (row, cat): prefix sums of busy ns over BINS bins of the whole test
    const binNs = (tMax - tMin) / BINS, keys = new Map();
    for (let i = 0; i < l.n; i++) {
      const k = rowOf(l, i) * 16 + catOf(l, i);
      let cov = keys.get(k);
      if (!cov) { cov = new Float64Array(BINS + 1); keys.set(k, cov); }
      const a = (l.s[i] - tMin) / binNs, b = (l.s[i] + l.dur[i] - tMin) / binNs;
      let ia = Math.min(BINS - 1, Math.floor(a));
      const ib = Math.min(BINS - 1, Math.floor(b));
      if (ia === ib) { cov[ia + 1] += l.dur[i]; continue; }
      cov[ia + 1] += (ia + 1 - a) * binNs;
      for (ia += 1; ia < ib; ia++) cov[ia + 1] += binNs;
      cov[ib + 1] += (b - ib) * binNs;
    }
    for (const cov of keys.values()) for (let k = 1; k <= BINS; k++) cov[k] += cov[k - 1];
    return { binNs, keys };
  }

  function binned(l, i0, i1, y, rowH, shade) {
    const W = Math.ceil(plotW), pxNs = (view.t1 - view.t0) / plotW, bins = new Map();
    const get = (k) => { let a = bins.get(k); if (!a) { a = new Float64Array(W); bins.set(k, a); } return a; };
    if (!l.pyr) l.pyr = pyramid(l);
    if (pxNs >= l.pyr.binNs) {
      const at = (cov, t) => {
        const f = Math.min(BINS, Math.max(0, (t - tMin) / l.pyr.binNs)), k = Math.min(BINS - 1, Math.floor(f));
        return cov[k] + (cov[k + 1] - cov[k]) * (f - k);
      };
      for (const [k, cov] of l.pyr.keys) {
        const a = get(k);
        let prev = at(cov, view.t0);
        for (let p = 0; p < W; p++) { const next = at(cov, view.t0 + (p + 1) * pxNs); a[p] = next - prev; prev = next; }
      }
    } else {
      for (let i = i0; i < i1; i++) {
        const a = get(rowOf(l, i) * 16 + catOf(l, i));
        const f0 = (l.s[i] - view.t0) / pxNs, f1 = (l.s[i] + l.dur[i] - view.t0) / pxNs;
        const p0 = Math.max(0, Math.floor(f0)), p1 = Math.min(W - 1, Math.floor(f1));
        if (p0 === p1) { a[p0] += l.dur[i]; continue; }
        for (let p = p0; p <= p1; p++) a[p] += (Math.min(f1, p + 1) - Math.max(f0, p)) * pxNs;
      }
    }
    const byRow = new Map();
    for (const [k, a] of bins) { const r = shade ? 0 : k >> 4; (byRow.get(r) || byRow.set(r, []).get(r)).push([k & 15, a]); }
    for (const [row, list] of byRow) {
      const yy = y + row * rowH;
      for (let p = 0; p < W; p++) {
        let total = 0;
        for (const [, a] of list) total += a[p];
        if (total <= 0) continue;
        const fill = Math.min(1, total / pxNs), h = shade ? rowH : Math.max(2, (rowH - 1) * Math.max(0.2, fill));
        let top = yy + (shade ? 0 : rowH - 1 - h);
        ctx.globalAlpha = shade ? 0.2 * fill : 1;
        for (const [cat, a] of list) {
          if (!a[p]) continue;
          const part = (h * a[p]) / total;
          ctx.fillStyle = COLORS[l.kind][cat] || "#888";
          ctx.fillRect(LABEL_W + p, top, 1, part);
          top += part;
        }
      }
    }
    ctx.globalAlpha = 1;
  }

  function launchOf(g) { // a global runtime index -> [lane, index]
    for (let k = runtimeStarts.length - 1; k >= 0; k--) if (g >= runtimeStarts[k][0]) return [runtimeStarts[k][1], g - runtimeStarts[k][0]];
    return null;
  }

  function drawLinks(links) {
    if (!links.length || links.length > MAX_LINKS) return;
    const yOf = new Map(layout.map((e) => [e.l, e.y]));
    ctx.strokeStyle = "rgba(40, 48, 60, 0.45)"; ctx.lineWidth = 1; ctx.beginPath();
    for (const [l, i, y] of links) {
      const hit = launchOf(l.link[i]);
      if (!hit) continue;
      const [rl, j] = hit, ry = yOf.get(rl) + (rowOf(rl, j) + 1) * ROW_H - 1;
      ctx.moveTo(X(rl.s[j] + rl.dur[j] / 2), ry); ctx.lineTo(X(l.s[i]), y);
    }
    ctx.stroke();
  }

  function drawAxis(h) {
    const span = view.t1 - view.t0, step = niceStep(span / 8);
    ctx.fillStyle = "#66707c"; ctx.strokeStyle = "#e6e9ed"; ctx.lineWidth = 1; ctx.font = "11px system-ui, sans-serif";
    for (let t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
      const x = Math.round(X(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, AXIS_H - 4); ctx.lineTo(x, h); ctx.stroke();
      ctx.fillText(fmtT(t), x + 3, 13);
    }
  }

  function drawLabels() {
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, LABEL_W, canvas.height);
    ctx.font = "11px system-ui, sans-serif";
    let group = null;
    for (const e of layout) {
      if (e.l.group !== group) {
        group = e.l.group;
        ctx.fillStyle = "#2f5fb3";
        ctx.fillText(group === "gpu" ? "GPU" : "CPU (host)", 6, group === "gpu" ? e.y - 3 : 13);
      }
      ctx.fillStyle = e.l.kind === "idle" ? "#8a939e" : "#1d232b";
      const text = e.l.label.length > 34 ? "…" + e.l.label.slice(-33) : e.l.label;
      ctx.fillText(text, 8, e.y + Math.min(e.h, e.rowH) - 3);
    }
    ctx.strokeStyle = "#dde2e8"; ctx.beginPath(); ctx.moveTo(LABEL_W - 0.5, 0); ctx.lineTo(LABEL_W - 0.5, canvas.height); ctx.stroke();
  }

  // ---- formatting --------------------------------------------------------------------
  function niceStep(x) { const m = Math.pow(10, Math.floor(Math.log10(x))); return [1, 2, 5, 10].map((k) => k * m).find((v) => v >= x); }
  function fmtDur(ns) {
    if (ns >= 1e9) return (ns / 1e9).toPrecision(3) + " s";
    if (ns >= 1e6) return (ns / 1e6).toPrecision(3) + " ms";
    if (ns >= 1e3) return (ns / 1e3).toPrecision(3) + " µs";
    return Math.round(ns) + " ns";
  }
  function fmtT(ns) {
    const span = view.t1 - view.t0, digits = Math.max(0, Math.min(6, Math.ceil(-Math.log10(span / 1e6 / 10))));
    return (ns / 1e6).toFixed(digits) + " ms";
  }

  // ---- interaction -------------------------------------------------------------------
  function hit(ev) {
    const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    if (x < LABEL_W) return null;
    const e = layout.find((o) => y >= o.y && y < o.y + o.h);
    if (!e) return null;
    const t = view.t0 + ((x - LABEL_W) / plotW) * (view.t1 - view.t0), tol = (2 * (view.t1 - view.t0)) / plotW;
    const row = Math.floor((y - e.y) / e.rowH), l = e.l;
    const i0 = firstEndingAfter(l, t - tol), i1 = Math.min(firstStartingAt(l, t + tol), i0 + 20000);
    let best = -1;
    for (let i = i0; i < i1; i++) {
      if (rowOf(l, i) !== row || l.s[i] + l.dur[i] < t - tol) continue;
      if (best < 0 || l.dur[i] < l.dur[best]) best = i;
    }
    return best < 0 ? null : { l, i: best, x, y };
  }
  function describe(l, i) {
    const lines = [label(l, i)];
    if (l.kind === "python" && l.name) lines.push(M.strings[l.name[i]].split(";").reverse().slice(1, 8).map((f) => "  ← " + f).join("\n"));
    lines.push(`${CATS[l.kind][catOf(l, i)]} · ${l.label}`);
    lines.push(`start ${(l.s[i] / 1e6).toFixed(3)} ms · duration ${fmtDur(l.dur[i])}`);
    if (l.value && l.value[i]) lines.push(`${(l.value[i] / 1e6).toFixed(3)} MB`);
    const peer = l.peer ? l.peer[i] : l.peerC; // lanes.py: a peer copy's devices, or the device a gap waited for
    if (peer && l.kind === "idle") lines.push(`waiting for GPU ${peer - 1}`);
    else if (peer) lines.push(`PtoP ${(peer & 15) - 1}\u2192${(peer >> 4) - 1} (on GPU ${l.device})`);
    const launch = l.link && l.link[i] >= 0 ? launchOf(l.link[i]) : null;
    if (launch) lines.push(`launched by ${label(launch[0], launch[1])} at ${(launch[0].s[launch[1]] / 1e6).toFixed(3)} ms`);
    return lines.filter(Boolean).join("\n");
  }

  box.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left;
    const at = x > LABEL_W ? view.t0 + ((x - LABEL_W) / plotW) * (view.t1 - view.t0) : undefined;
    zoom(Math.exp(Math.max(-3, Math.min(3, ev.deltaY * 0.002))), at);
  }, { passive: false });
  box.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, t0: view.t0, t1: view.t1 }; box.classList.add("dragging"); });
  window.addEventListener("mouseup", () => { drag = null; box.classList.remove("dragging"); });
  box.addEventListener("mousemove", (ev) => {
    if (drag) {
      const dt = ((drag.x - ev.clientX) / plotW) * (drag.t1 - drag.t0);
      setView(drag.t0 + dt, drag.t1 + dt); tip.hidden = true; return;
    }
    const h = hit(ev);
    if (!h) { tip.hidden = true; return; }
    tip.textContent = describe(h.l, h.i); tip.hidden = false;
    tip.style.left = Math.min(h.x + 14, box.clientWidth - 330) + "px"; tip.style.top = h.y + 16 + "px";
  });
  box.addEventListener("mouseleave", () => { tip.hidden = true; });
  box.addEventListener("keydown", (ev) => {
    const act = { "+": "in", "=": "in", "-": "out", _: "out", 0: "fit", ArrowLeft: "left", ArrowRight: "right" }[ev.key];
    if (act) { ev.preventDefault(); act_(act); }
  });
  function act_(a) {
    if (a === "in") zoom(0.5); else if (a === "out") zoom(2); else if (a === "left") pan(-0.25);
    else if (a === "right") pan(0.25); else if (a === "fit") { view = fitView(); request(); }
  }
  for (const b of document.querySelectorAll(".toolbar button[data-act]")) b.addEventListener("click", () => act_(b.dataset.act));
  document.addEventListener("click", (ev) => { // rows of findings and marks (further down the page than this script)
    const row = ev.target instanceof Element ? ev.target.closest("tr.goto") : null;
    if (!row) return;
    const s = parseFloat(row.dataset.startMs) * 1e6, d = parseFloat(row.dataset.durMs) * 1e6, w = Math.max(d * 3, 2e5);
    setView(s + d / 2 - w / 2, s + d / 2 + w / 2);
    box.scrollIntoView({ block: "center" });
  });
  const legend = [];
  for (const [kind, title] of [["stream", "GPU"], ["runtime", "runtime"], ["idle", "GPU idle"]]) {
    if (!lanes.some((l) => l.kind === kind)) continue;
    legend.push(`<b>${title}:</b>` + CATS[kind].map((c, i) => `<span><i style="background:${COLORS[kind][i]}"></i>${c}</span>`).join(""));
  }
  $("is-legend").innerHTML = legend.join(" ");
  window.addEventListener("resize", request);
  draw();
})();
