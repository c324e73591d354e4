// gpufleet web page: one EventSource stream (a full state, then deltas), rendered as plain DOM and SVG.
// Shipped with the collector; loads nothing from anywhere else. Model shape: collector/faces/web/model.py.
"use strict";
(function () {
  const U = 0, M = 1, MT = 2, T = 3, S = 4, F = 5, P = 6, N = 7, A = 8;
  // from the rule catalog the server sends (collector/rules/catalog.py): which flags colour a GPU, in what
  // order (the worst first), and the severities' order
  let flagOrder = [], sevRank = {}, flagColour = {};
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
  // round half to even, as Python's format does: the page writes a number as the CLI writes it
  const r0 = (x) => { const f = Math.floor(x), d = x - f; return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f; };
  // "40/80G": memory used/total in GiB, one decimal on cards under 10 GiB (cli/columns.py fmt_mem_pair)
  function memPair(used, total) {
    if (used == null && total == null) return "-";
    if (total != null && total < 10 * 1024) return ((used || 0) / 1024).toFixed(1) + "/" + r0(total / 1024) + "G";
    return (used == null ? "?" : r0(used / 1024)) + "/" + (total == null ? "?" : r0(total / 1024)) + "G";
  }
  const temp = (t) => (t == null ? "-" : t + "°C");
  // 24-hour times, as the CLI writes them
  const clock = (d, secs) => d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23",
    ...(secs ? { second: "2-digit" } : {}) });
  const day = (d) => d.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  function ago(ts) {
    if (ts == null) return "";
    const s = Math.max(0, Date.now() / 1000 - ts);
    if (s < 90) return Math.round(s) + " s";
    if (s < 5400) return Math.round(s / 60) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return Math.round(s / 86400) + " d";
  }

  function cellClass(g, hostUp) {
    if (!hostUp || ["unknown", "maintenance", "unreadable"].includes(g[S])) return "unknown";
    for (const f of flagOrder) if (g[F].includes(f)) return f;
    if (g[S] === "lost" || g[S] === "hung") return "lost";
    // unused: a Slurm job holds it and runs nothing on it; coloured as the catalog colours that flag
    return g[S] === "idle" ? "idle" : g[S] === "unused" ? "unused" : "busy";
  }
  function cellTitle(key, g) {
    const lines = [key + (g[N] ? " · " + g[N] : ""),
      "util " + (g[U] == null ? "?" : g[U] + "%") + " · memory " + memPair(g[M], g[MT]) +
        " (" + gib(g[M]) + " of " + gib(g[MT]) + " GiB) · " + temp(g[T]),
      "state " + g[S] + (g[F].length ? " · flags " + g[F].join(", ") : "")];
    if (g[A]) lines.push("held by Slurm " + g[A] + (g[S] === "unused" ? ", unused" : ""));
    for (const p of g[P]) lines.push(p[0] + " " + p[1] + " GiB" + (p[2] ? " · " + p[2] : "") + (p[3] ? " · " + p[3] : ""));
    return lines.join("\n");
  }
  // a card names its GPU, its user(s) and its worst flag in full (issue 36: "idle_peers wastec", no user)
  function cellInner(key, g) {
    const users = [...new Set(g[P].map((p) => p[0]))];
    if (!users.length && g[A]) users.push(g[A]);  // held by a Slurm job that runs nothing on it
    const idx = key.slice(key.lastIndexOf("/") + 1);
    const flag = g[F].length ? '<span class="w ' + esc(g[F][0]) + '">' + esc(g[F][0]) + "</span>" +
      (g[F].length > 1 ? ' <span class="more">+' + (g[F].length - 1) + "</span>" : "") : "";
    const who = users.length ? esc(users[0]) + (users.length > 1 ? ' <span class="more">+' + (users.length - 1) + "</span>" : "") : "";
    // lean: 8,000 of these are parsed on the first state (tests/bench/web_bench.py)
    return '<div class="l"><span class="ix">GPU ' + esc(idx) + "</span><span>" + esc(g[U] == null ? "–" : g[U] + "%") + "</span></div>" +
      '<div class="b"><i style="width:' + pct(g[U], 100) + '%"></i></div>' +
      '<div class="l"><span>' + esc(memPair(g[M], g[MT])) + "</span><span>" + esc(temp(g[T])) + "</span></div>" +
      '<div class="b m"><i style="width:' + pct(g[M], g[MT]) + '%"></i></div>' +
      (who ? '<div class="who">' + who + "</div>" : "") + (flag ? '<div class="fl">' + flag + "</div>" : "");
  }
  function cellHtml(key, g, up) {
    return '<div class="g ' + cellClass(g, up) + (key === selected ? " sel" : "") + '" data-k="' + esc(key) +
      '" title="' + esc(cellTitle(key, g)) + '">' + cellInner(key, g) + "</div>";
  }
  function hostHtml(h) {
    const [name, status, reason, flags, ngpus, lastSeen, tags, maint] = h;
    const up = status === "up";
    let badges = up ? "" : '<span class="badge ' + esc(status) + '">' + esc(status) + "</span>";
    for (const f of flags) if (f !== status) badges += '<span class="badge">' + esc(f) + "</span>";
    let sub = up ? esc(tags.join(", ")) : esc((reason || "") + (lastSeen ? " · seen " + ago(lastSeen) + " ago" : ""));
    if (maint) {  // [by, comment, until]: the collector let go of the host on purpose
      sub = esc(maint[1] + " · by " + maint[0] + " · until " + day(new Date(maint[2] * 1000)));
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
    el.innerHTML = cellInner(key, g);
    el.title = cellTitle(key, g);
    return true;
  }
  // each GPU in one state (the status line's): busy + wasted + idle + lost + ... = GPUs
  const STATES = ["busy", "wasted", "idle", "unused", "lost", "hung", "unreadable", "unknown", "maintenance"];
  function renderTotals() {
    const t = st.totals;
    const item = (label, v, cls) => "<span" + (cls ? ' class="' + cls + '"' : "") + ">" + label + "<b>" + esc(v) + "</b></span>";
    let gpus = item("GPUs ", t.gpus);
    for (const s of STATES) if (t[s] || ["busy", "wasted", "idle"].includes(s)) gpus += item(s + " ", t[s] || 0, "t-" + s);
    $("totals").innerHTML = item("hosts ", t.hosts_up + "/" + t.hosts) + (t.hosts_down ? item("down ", t.hosts_down) : "") +
      (t.hosts_maintenance ? item("maintenance ", t.hosts_maintenance) : "") + gpus + (t.hot ? item("hot ", t.hot) : "");
  }
  function renderUsers() {
    const rows = st.users.map((r) => "<tr><td>" + esc(r[0]) + '</td><td class="n">' + r[1] + '</td><td class="n">' +
      r[2] + '</td><td class="n">' + r[3].toFixed(1) + '</td><td class="n">' + r[4].toFixed(r[4] < 10 ? 2 : 1) + "</td></tr>");
    $("users").tBodies[0].innerHTML = rows.join("") || '<tr><td colspan="5">nobody holds a GPU</td></tr>';
  }
  // one row per problem (a job's idle GPUs are one); info ones under their own heading, not counted as firing
  const COLS = ["flags", "severity", "state", "host", "GPU", "user", "since", "summary"];
  function alertRow(fp, a) {
    const cell = (i, html, cls) => '<td data-label="' + COLS[i] + '"' + (cls ? ' class="' + cls + '"' : "") + ">" + html + "</td>";
    return '<tr data-fp="' + esc(fp) + '">' + cell(0, esc(a[0]), "nw") +
      cell(1, '<span class="badge ' + esc(a[1]) + '">' + esc(a[1]) + "</span>", "nw") + cell(2, esc(a[2]), "nw") +
      cell(3, esc(a[3]), "nw") + cell(4, esc(a[4]), "nw") + cell(5, esc(a[5]), "nw") + cell(6, esc(ago(a[7])), "nw") +
      cell(7, esc(a[6]), "sum") + "</tr>";
  }
  function renderAlerts() {
    const list = Object.entries(st.alerts);
    const worst = (s) => sevRank[s] ?? 1;  // an unknown severity counts as a warning, as on the server
    list.sort((a, b) => worst(b[1][1]) - worst(a[1][1]) || String(a[1][3]).localeCompare(String(b[1][3]), undefined, { numeric: true }) ||
      String(a[1][4]).localeCompare(String(b[1][4]), undefined, { numeric: true }));
    const serious = list.filter(([, a]) => a[1] !== "info"), info = list.filter(([, a]) => a[1] === "info");
    const firing = serious.filter(([, a]) => a[2] === "firing").length;
    $("alerts-head").textContent = "Active alerts: " + firing + " firing, " + (serious.length - firing) + " pending" +
      (info.length ? " · " + info.length + " info" : "");
    $("alerts").tBodies[0].innerHTML = serious.map(([fp, a]) => alertRow(fp, a)).join("") ||
      '<tr><td colspan="8">no active alerts</td></tr>';
    $("alerts").tBodies[1].innerHTML = info.length ? '<tr class="sub"><th colspan="8">Info, not counted as firing</th></tr>' +
      info.map(([fp, a]) => alertRow(fp, a)).join("") : "";
  }

  function renderUnreadable() {  // what the collector could not read from its history file
    const notes = st.unreadable || [];
    $("unreadable").textContent = notes.join(" · ");
    $("unreadable").hidden = !notes.length;
  }

  function applyCatalog(c) {
    const coloured = c.flags.filter((f) => f[1]);
    flagColour = Object.fromEntries(coloured);
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
    const first = st === null;
    st = data;
    applyCatalog(st.catalog);
    if (first) loadFleet();  // its wasted and lost areas take their flags' colours from the catalog
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
      conn.textContent = "live · updated " + clock(new Date(), true);
    });
    es.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "conn down"; };
  }

  // ------------------------------------------------------------------------------------------ history
  const W = 560, H = 140, PAD_L = 38, PAD_B = 18;
  function frame(max, since, until, unit) {
    const y = (v) => 4 + (1 - Math.min(v, max) / max) * (H - PAD_B - 8);
    const fmt = (t) => (until - since > 172800 ? t.toLocaleDateString() : clock(t, false));
    return '<line x1="' + PAD_L + '" y1="' + y(max) + '" x2="' + W + '" y2="' + y(max) + '"/>' +
      '<line x1="' + PAD_L + '" y1="' + y(max / 2) + '" x2="' + W + '" y2="' + y(max / 2) + '"/>' +
      '<line x1="' + PAD_L + '" y1="' + y(0) + '" x2="' + W + '" y2="' + y(0) + '"/>' +
      '<text x="2" y="' + (y(max) + 4) + '">' + esc(max.toFixed(max < 10 ? 1 : 0) + unit) + "</text>" +
      '<text x="2" y="' + (y(0) + 4) + '">0</text>' +
      '<text x="' + PAD_L + '" y="' + (H - 4) + '">' + esc(fmt(new Date(since * 1000))) + "</text>" +
      '<text x="' + (W - 4) + '" y="' + (H - 4) + '" text-anchor="end">' + esc(fmt(new Date(until * 1000))) + "</text>";
  }
  // an SVG that scales to its card (viewBox; CSS width 100 %): charts never overflow at 400 px
  const svg = (inner) => '<svg viewBox="0 0 ' + W + " " + H + '" preserveAspectRatio="none">' + inner + "</svg>";
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
    return svg(frame(max, since, until, unit) + '<path class="' + cls + '" data-points="' + n + '" d="' + (d || "M0 0") + '"/>');
  }
  async function loadHistory() {
    if (!selected) return;
    const i = selected.lastIndexOf("/");
    const host = selected.slice(0, i), gpu = selected.slice(i + 1);
    if ($("history").hidden) { $("history").hidden = false; $("history").scrollIntoView({ block: "nearest" }); }
    $("history-title").textContent = "History · " + host + " GPU " + gpu;
    for (const b of document.querySelectorAll("#history .ranges button")) b.classList.toggle("on", b.dataset.range === range);
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
    $("history-note").textContent = s.points.length + " points, " +
      (s.resolution === "raw" ? "every sample" : s.resolution + (s.step ? " (" + Math.round(s.step) + " s each)" : "")) +
      (s.name ? " · " + s.name : "");
    $("chart-util").innerHTML = chart(pts, 1, 100, "u", data.since, data.until, "%");
    $("chart-mem").innerHTML = chart(pts, 2, memMax, "m", data.since, data.until, "");
  }

  // the fleet over time: GPUs busy, wasted, idle and lost, stacked (collector/faces/web/fleetchart.py)
  const FLEET = ["busy", "wasted", "idle", "lost"];
  let fleetRange = "1h";
  async function loadFleet() {
    for (const b of document.querySelectorAll("#fleet-chart .ranges button")) b.classList.toggle("on", b.dataset.range === fleetRange);
    let data;
    try {
      const r = await fetch("/api/fleet?" + new URLSearchParams({ range: fleetRange }), { credentials: "same-origin" });
      if (!r.ok) throw new Error(await r.text());
      data = await r.json();
    } catch (err) {
      $("fleet-note").textContent = "fleet history unavailable: " + err.message;
      return;
    }
    const n = data.ts.length, tot = Array.from({ length: n }, (_, k) => FLEET.reduce((a, s) => a + data[s][k], 0));
    const max = Math.max(1, ...tot);
    // a history shorter than a quarter of the range fills the chart from its first point (as `history` does)
    const first = data.ts.find((t, k) => tot[k] > 0);
    const since = first != null && data.until - first < (data.until - data.since) / 4 ? first : data.since;
    const xt = (t) => (PAD_L + ((Math.min(t, data.until) - since) / (data.until - since)) * (W - PAD_L - 4)).toFixed(1);
    const y = (v) => (4 + (1 - v / max) * (H - PAD_B - 8)).toFixed(1);
    // each point a step as wide as the time it covers
    const edge = (vals, ks) => ks.map((k) => xt(data.ts[k]) + " " + y(vals[k]) + "L" + xt(data.ts[k] + data.step) + " " + y(vals[k]));
    let base = new Array(n).fill(0), paths = "";
    for (const s of FLEET) {
      const top = base.map((b, k) => b + data[s][k]);
      const seen = [...Array(n).keys()].filter((k) => tot[k] > 0);
      if (seen.length) {
        const back = seen.slice().reverse().map((k) => xt(data.ts[k] + data.step) + " " + y(base[k]) + "L" +
          xt(data.ts[k]) + " " + y(base[k]));
        const d = "M" + edge(top, seen).join("L") + "L" + back.join("L") + "Z";
        const fill = flagColour[s] ? ' style="fill:' + esc(flagColour[s]) + '"' : "";  // wasted, lost: the flags'
        paths += '<path class="f s-' + s + '" data-state="' + s + '"' + fill + ' d="' + d + '"/>';
      }
      base = top;
    }
    $("chart-fleet").innerHTML = svg(frame(max, since, data.until, "") + paths);
    const last = [...Array(n).keys()].reverse().find((k) => tot[k] > 0);
    $("fleet-note").innerHTML = last == null ? "no samples stored in this range yet" :
      "GPUs at " + esc(clock(new Date(data.ts[last] * 1000), false)) + ": " +
      FLEET.map((s) => '<i class="c ' + (flagColour[s] ? "" : s) + '"' + (flagColour[s] ? ' style="background:' +
        esc(flagColour[s]) + '"' : "") + "></i>" + esc(s) + " <b>" + data[s][last] + "</b>").join(" ");
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
    for (const b of document.querySelectorAll("#history .ranges button")) {
      b.addEventListener("click", () => { range = b.dataset.range; loadHistory(); });
    }
    for (const b of document.querySelectorAll("#fleet-chart .ranges button")) {
      b.addEventListener("click", () => { fleetRange = b.dataset.range; loadFleet(); });
    }
    setInterval(loadFleet, 30000);
    $("history-close").addEventListener("click", () => { $("history").hidden = true; selected = null; renderFleet(); });
    connect();
    setInterval(() => { if (selected && !$("history").hidden) loadHistory(); }, 30000);
    setInterval(() => { if (st) renderAlerts(); }, 15000);  // the "since" column ages
  });
})();
