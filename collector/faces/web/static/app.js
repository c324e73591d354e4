// gpufleet web page: one EventSource stream (a full state, then deltas), rendered as plain DOM and SVG.
// Shipped with the collector; loads nothing from anywhere else. Model shape: collector/faces/web/model.py.
"use strict";
(function () {
  const U = 0, M = 1, MT = 2, T = 3, S = 4, F = 5, P = 6, N = 7, A = 8;
  // from the rule catalog the server sends (collector/rules/catalog.py): which flags colour a GPU, in what
  // order (the worst first), and the severities' order
  let flagOrder = [], sevRank = {};
  let st = null;           // the model as the server last described it
  let cells = new Map();   // "host/idx" -> cell element
  let hostRows = new Map();
  let selected = null, range = "1h";
  const $ = (id) => document.getElementById(id);

  function esc(v) {
    return String(v == null ? "" : v).replace(/[&<>"']/g,
      (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  const gib = (mib) => (mib == null ? "?" : (mib / 1024).toFixed(1));
  const pct = (a, b) => (a == null || !b ? 0 : Math.max(0, Math.min(100, (100 * a) / b)));
  function ago(ts) {
    if (ts == null) return "";
    const s = Math.max(0, Date.now() / 1000 - ts);
    if (s < 90) return Math.round(s) + " s";
    if (s < 5400) return Math.round(s / 60) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return Math.round(s / 86400) + " d";
  }

  function cellClass(g, hostUp) {
    if (!hostUp || g[S] === "unknown") return "unknown";
    for (const f of flagOrder) if (g[F].includes(f)) return f;
    if (g[S] === "lost") return "lost";
    // unused: a Slurm job holds it and runs nothing on it; coloured as the catalog colours that flag
    return g[S] === "idle" ? "idle" : g[S] === "unused" ? "unused" : "busy";
  }
  function cellTitle(key, g) {
    const lines = [key + (g[N] ? " · " + g[N] : ""),
      "util " + (g[U] == null ? "?" : g[U] + " %") + " · memory " + gib(g[M]) + " / " + gib(g[MT]) + " GiB" +
        (g[T] == null ? "" : " · " + g[T] + " °C"),
      "state " + g[S] + (g[F].length ? " · flags " + g[F].join(", ") : "")];
    if (g[A]) lines.push("held by Slurm " + g[A] + (g[S] === "unused" ? ", unused" : ""));
    for (const p of g[P]) lines.push(p[0] + " " + p[1] + " GiB" + (p[2] ? " · " + p[2] : "") + (p[3] ? " · " + p[3] : ""));
    return lines.join("\n");
  }
  function cellInner(g) {
    const users = [...new Set(g[P].map((p) => p[0]))];
    if (!users.length && g[A]) users.push(g[A]);  // held by a Slurm job that runs nothing on it
    const flags = g[F].map((f) => '<span class="w ' + esc(f) + '">' + esc(f) + "</span>").join("");
    return '<div class="l"><span>' + esc(g[U] == null ? "–" : g[U] + "%") + "</span>" +
      "<span>" + gib(g[M]) + "G</span></div>" +
      '<div class="b"><i style="width:' + pct(g[U], 100) + '%"></i></div>' +
      '<div class="b m"><i style="width:' + pct(g[M], g[MT]) + '%"></i></div>' +
      '<div class="l u"><span>' + esc(users.join(" ")) + "</span><span>" + flags + "</span></div>";
  }
  function cellHtml(key, g, up) {
    return '<div class="g ' + cellClass(g, up) + (key === selected ? " sel" : "") + '" data-k="' + esc(key) +
      '" title="' + esc(cellTitle(key, g)) + '">' + cellInner(g) + "</div>";
  }
  function hostHtml(h) {
    const [name, status, reason, flags, ngpus, lastSeen, tags, maint] = h;
    const up = status === "up";
    let badges = up ? "" : '<span class="badge ' + esc(status) + '">' + esc(status) + "</span>";
    for (const f of flags) if (f !== status) badges += '<span class="badge">' + esc(f) + "</span>";
    let sub = up ? esc(tags.join(", ")) : esc((reason || "") + (lastSeen ? " · seen " + ago(lastSeen) + " ago" : ""));
    if (maint) {  // [by, comment, until]: the collector let go of the host on purpose
      const until = new Date(maint[2] * 1000).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
      sub = esc(maint[1] + " · by " + maint[0] + " · until " + until);
    }
    let gpus = "";
    for (let i = 0; i < ngpus; i++) {
      const key = name + "/" + i, g = st.gpus[key];
      if (g) gpus += cellHtml(key, g, up);
    }
    return '<div class="host ' + esc(status) + '" data-h="' + esc(name) + '"><div class="hname"><b>' + esc(name) +
      "</b>" + badges + "<small>" + sub + '</small></div><div class="gpus">' + gpus + "</div></div>";
  }
  function index() {
    upHosts = new Set(st.hosts.filter((h) => h[1] === "up").map((h) => h[0]));
    cells = new Map();
    hostRows = new Map();
    for (const el of document.querySelectorAll("#fleet .g")) cells.set(el.dataset.k, el);
    for (const el of document.querySelectorAll("#fleet .host")) hostRows.set(el.dataset.h, el);
  }
  function renderFleet() {
    const parts = [];
    for (const h of st.hosts) parts.push(hostHtml(h));
    $("fleet").innerHTML = parts.join("");
    index();
    applyFilter();
  }
  // host rows matching the filter box (host, tag, user or flag) and "problems only"
  function applyFilter() {
    const q = $("filter").value.trim().toLowerCase(), only = $("problems").checked;
    let shown = 0;
    for (const h of st.hosts) {
      const el = hostRows.get(h[0]);
      if (!el) continue;
      const gpus = [];
      for (let i = 0; i < h[4]; i++) { const g = st.gpus[h[0] + "/" + i]; if (g) gpus.push(g); }
      let show = !only || h[1] !== "up" || h[3].length > 0 || gpus.some((g) => g[F].length > 0);
      if (show && q) {
        show = h[0].toLowerCase().includes(q) || h[6].some((t) => t.toLowerCase().includes(q)) ||
          gpus.some((g) => g[F].includes(q) || g[P].some((p) => String(p[0]).toLowerCase().includes(q) ||
            String(p[3] || "").toLowerCase().includes(q)) || String(g[A] || "").toLowerCase().includes(q));
      }
      if (el.hidden === show) el.hidden = !show;
      shown += show;
    }
    $("shown").textContent = q || only ? shown + " of " + st.hosts.length + " hosts" : "";
  }
  function hostOf(key) { return key.slice(0, key.lastIndexOf("/")); }
  let upHosts = new Set();
  function hostUp(name) { return upHosts.has(name); }
  function updateCell(key) {
    const el = cells.get(key), g = st.gpus[key];
    if (!el || !g) return false;
    const cls = "g " + cellClass(g, hostUp(hostOf(key))) + (key === selected ? " sel" : "");
    if (el.className !== cls) el.className = cls;
    el.innerHTML = cellInner(g);
    el.title = cellTitle(key, g);
    return true;
  }
  function renderTotals() {
    const t = st.totals;
    const item = (label, v, cls) => "<span" + (cls ? ' class="' + cls + '"' : "") + ">" + label + "<b>" + esc(v) + "</b></span>";
    $("totals").innerHTML = item("hosts ", t.hosts_up + "/" + t.hosts) + (t.hosts_down ? item("down ", t.hosts_down) : "") +
      (t.hosts_maintenance ? item("maintenance ", t.hosts_maintenance) : "") +
      item("GPUs ", t.gpus) + item("busy ", t.busy) + item("idle ", t.idle) + (t.unused ? item("unused ", t.unused) : "") +
      item("wasted ", t.wasted, "t-wasted") +
      item("stale ", t.stale) + item("hot ", t.hot) + item("lost ", t.lost);
  }
  function renderUsers() {
    const rows = st.users.map((r) => "<tr><td>" + esc(r[0]) + '</td><td class="n">' + r[1] + '</td><td class="n">' +
      r[2] + '</td><td class="n">' + r[3].toFixed(1) + '</td><td class="n">' + r[4].toFixed(r[4] < 10 ? 2 : 1) + "</td></tr>");
    $("users").tBodies[0].innerHTML = rows.join("") || '<tr><td colspan="5">nobody holds a GPU</td></tr>';
  }
  function renderAlerts() {
    const list = Object.entries(st.alerts);
    const worst = (s) => sevRank[s] ?? 1;  // an unknown severity counts as a warning, as on the server
    list.sort((a, b) => worst(b[1][1]) - worst(a[1][1]) || String(a[1][3]).localeCompare(String(b[1][3])));
    const rows = list.map(([fp, a]) => '<tr data-fp="' + esc(fp) + '"><td>' + esc(a[0]) + '</td><td><span class="badge ' +
      esc(a[1]) + '">' + esc(a[1]) + "</span></td><td>" + esc(a[2]) + "</td><td>" + esc(a[3]) + "</td><td>" + esc(a[4]) +
      "</td><td>" + esc(a[5]) + "</td><td>" + esc(ago(a[7])) + "</td><td>" + esc(a[6]) + "</td></tr>");
    $("alerts").tBodies[0].innerHTML = rows.join("") || '<tr><td colspan="8">no active alerts</td></tr>';
  }

  function renderUnreadable() {  // what the collector could not read from its history file
    const notes = st.unreadable || [];
    $("unreadable").textContent = notes.join(" · ");
    $("unreadable").hidden = !notes.length;
  }

  function applyCatalog(c) {
    const coloured = c.flags.filter((f) => f[1]);
    flagOrder = coloured.map((f) => f[0]);
    sevRank = {};
    c.severities.forEach((s, i) => { sevRank[s] = i; });
    const rules = coloured.map(([f, colour]) => {
      const cls = CSS.escape(f), col = colour.replace(/[^#\w(),.% -]/g, "");
      return ".g." + cls + " { border-color: " + col + "; background: color-mix(in srgb, " + col + " 14%, #fff); }\n" +
        ".g .w." + cls + ", i.c." + cls + " { background: " + col + "; }";
    });
    let style = $("flag-colours");
    if (!style) { style = document.createElement("style"); style.id = "flag-colours"; document.head.appendChild(style); }
    style.textContent = rules.join("\n");
    $("legend-flags").innerHTML = flagOrder.map((f) => '<i class="c ' + esc(f) + '"></i>' + esc(f) + " ").join("");
  }
  function applyFull(data) {
    st = data;
    applyCatalog(st.catalog);
    renderTotals(); renderFleet(); renderUsers(); renderAlerts(); renderUnreadable();
    if (window.gpufleetRenderMs === undefined) {
      window.gpufleetRenderMs = performance.now();
      document.body.dataset.ready = "1";
    }
  }
  function applyDelta(d) {
    const t0 = performance.now();
    applyDeltaNow(d);
    const ms = performance.now() - t0;  // for tests/bench/web_bench.py
    window.gpufleetDeltaMsMax = Math.max(window.gpufleetDeltaMsMax || 0, ms);
  }
  function applyDeltaNow(d) {
    let rebuild = false;
    if (d.h) { st.hosts = d.h; rebuild = true; }
    if (d.hc) {
      st.hosts = st.hosts.map((h) => d.hc[h[0]] || h);
      for (const name of Object.keys(d.hc)) {
        const el = hostRows.get(name), h = d.hc[name];
        if (!el || h[4] !== el.querySelectorAll(".g").length) { rebuild = true; continue; }
        // a host's status or flags changed: its row (cells included) is redrawn
        if (d.g) for (const k of Object.keys(d.g)) st.gpus[k] = d.g[k];
        el.outerHTML = hostHtml(h);
      }
      if (!rebuild) { index(); applyFilter(); }
    }
    if (d.gr) { for (const k of d.gr) delete st.gpus[k]; rebuild = true; }
    if (d.g) for (const [k, g] of Object.entries(d.g)) { st.gpus[k] = g; if (!rebuild && !updateCell(k)) rebuild = true; }
    if (d.s) for (const [k, v] of Object.entries(d.s)) {
      const g = st.gpus[k];
      if (!g) continue;
      g[U] = v[0]; g[M] = v[1]; g[T] = v[2];
      if (!rebuild) updateCell(k);
    }
    if (rebuild) renderFleet();
    else if (d.g) applyFilter();  // flags or users changed
    if (d.a || d.ar) {
      if (d.a) Object.assign(st.alerts, d.a);
      if (d.ar) for (const fp of d.ar) delete st.alerts[fp];
      renderAlerts();
    }
    if (d.u) { st.users = d.u; renderUsers(); }
    if (d.t) { st.totals = d.t; renderTotals(); }
    if (d.n) { st.unreadable = d.n; renderUnreadable(); }
    window.gpufleetDeltas = (window.gpufleetDeltas || 0) + 1;
  }

  function connect() {
    const es = new EventSource("/api/stream");
    const conn = $("conn");
    es.addEventListener("full", (e) => { applyFull(JSON.parse(e.data)); conn.textContent = "live"; conn.className = "conn live"; });
    es.addEventListener("delta", (e) => {
      if (st) applyDelta(JSON.parse(e.data));
      conn.textContent = "live · updated " + new Date().toLocaleTimeString();
    });
    es.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "conn down"; };
  }

  // ------------------------------------------------------------------------------------------ history
  const W = 560, H = 140, PAD_L = 38, PAD_B = 18;
  function chart(points, idx, max, cls, since, until, unit) {
    const x = (ts) => PAD_L + ((ts - since) / (until - since)) * (W - PAD_L - 4);
    const y = (v) => 4 + (1 - Math.min(v, max) / max) * (H - PAD_B - 8);
    let d = "", pen = false, n = 0;
    for (const p of points) {
      const v = p[idx];
      if (v == null) { pen = false; continue; }
      d += (pen ? "L" : "M") + x(p[0]).toFixed(1) + " " + y(v).toFixed(1);
      pen = true; n++;
    }
    const t0 = new Date(since * 1000), t1 = new Date(until * 1000);
    const fmt = (t) => (until - since > 172800 ? t.toLocaleDateString() : t.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
    return '<svg width="' + W + '" height="' + H + '" viewBox="0 0 ' + W + " " + H + '">' +
      '<line x1="' + PAD_L + '" y1="' + y(max) + '" x2="' + W + '" y2="' + y(max) + '"/>' +
      '<line x1="' + PAD_L + '" y1="' + y(max / 2) + '" x2="' + W + '" y2="' + y(max / 2) + '"/>' +
      '<line x1="' + PAD_L + '" y1="' + y(0) + '" x2="' + W + '" y2="' + y(0) + '"/>' +
      '<text x="2" y="' + (y(max) + 4) + '">' + esc(max.toFixed(max < 10 ? 1 : 0) + unit) + "</text>" +
      '<text x="2" y="' + (y(0) + 4) + '">0</text>' +
      '<text x="' + PAD_L + '" y="' + (H - 4) + '">' + esc(fmt(t0)) + "</text>" +
      '<text x="' + (W - 4) + '" y="' + (H - 4) + '" text-anchor="end">' + esc(fmt(t1)) + "</text>" +
      '<path class="' + cls + '" data-points="' + n + '" d="' + (d || "M0 0") + '"/></svg>';
  }
  async function loadHistory() {
    if (!selected) return;
    const i = selected.lastIndexOf("/");
    const host = selected.slice(0, i), gpu = selected.slice(i + 1);
    if ($("history").hidden) { $("history").hidden = false; $("history").scrollIntoView({ block: "nearest" }); }
    $("history-title").textContent = "History · " + host + " GPU " + gpu;
    for (const b of document.querySelectorAll(".ranges button")) b.classList.toggle("on", b.dataset.range === range);
    const q = new URLSearchParams({ host, gpu, range });
    let data;
    try {
      const r = await fetch("/api/history?" + q, { credentials: "same-origin" });
      if (!r.ok) throw new Error(await r.text());
      data = await r.json();
    } catch (err) {
      $("history-note").textContent = "history unavailable: " + err.message;
      return;
    }
    const s = data.series;
    if (!s || !s.points.length) {
      $("history-note").textContent = "no samples stored in this range yet";
      $("chart-util").innerHTML = chart([], 1, 100, "u", data.since, data.until, "%");
      $("chart-mem").innerHTML = chart([], 2, 1, "m", data.since, data.until, "");
      return;
    }
    const memMax = (s.memory_total || Math.max(...s.points.map((p) => p[2] || 0), 1)) / 1024;
    const pts = s.points.map((p) => [p[0], p[1], p[2] == null ? null : p[2] / 1024]);
    $("history-note").textContent = s.points.length + " points, " + s.resolution +
      (s.step ? " (" + Math.round(s.step) + " s each)" : "") + (s.name ? " · " + s.name : "");
    $("chart-util").innerHTML = chart(pts, 1, 100, "u", data.since, data.until, "%");
    $("chart-mem").innerHTML = chart(pts, 2, memMax, "m", data.since, data.until, "");
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("fleet").addEventListener("click", (e) => {
      const el = e.target.closest(".g");
      if (!el) return;
      const prev = selected && cells.get(selected);
      if (prev) prev.classList.remove("sel");
      selected = el.dataset.k;
      el.classList.add("sel");
      loadHistory();
    });
    $("filter").addEventListener("input", () => { if (st) applyFilter(); });
    $("problems").addEventListener("change", () => { if (st) applyFilter(); });
    for (const b of document.querySelectorAll(".ranges button")) {
      b.addEventListener("click", () => { range = b.dataset.range; loadHistory(); });
    }
    $("history-close").addEventListener("click", () => { $("history").hidden = true; selected = null; renderFleet(); });
    connect();
    setInterval(() => { if (selected && !$("history").hidden) loadHistory(); }, 30000);
    setInterval(() => { if (st) renderAlerts(); }, 15000);  // the "since" column ages
  });
})();
