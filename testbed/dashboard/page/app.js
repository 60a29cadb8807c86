// The full dashboard page: the topology (cytoscape), per-node figures, a timeline, broker and rate panels (uPlot)
// and, for `testbed dashboard RUN_DIR`, a time slider. Everything comes from /events (the state, pushed at most
// once a second) and /state?t= (the run as it stood at a past moment).
"use strict";

const MIN_RENDER_GAP_MS = 1000;   // at most one render a second, whatever arrives
const STALL_S = 5;                // queued messages and nothing delivered for this long: a stall on the timeline
const SERIES_POINTS = 600;        // points kept per panel series
const PANEL_SERIES = 8;           // at most this many lines per panel
const TIMELINE_ROWS = 40;

const dash = { cy: null, state: null, renders: 0, renderMs: 0, hostsKey: "", selected: null, charts: {},
               series: {}, stalls: [], stall: null, replayAt: null, live: null };
window.dash = dash;
dash.rerender = s => render(s);      // for the benchmark: one update, timed

function $(id) { return document.getElementById(id); }
function text(id, value) { $(id).textContent = value; }
function when(ts) { return ts ? new Date(ts * 1000).toLocaleTimeString() : "-"; }
function li(s, kind) {
  const e = document.createElement("li");
  e.textContent = s;
  if (kind) e.dataset.kind = kind;
  return e;
}
function row(cells, tag) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement(tag || "td");
    td.textContent = c;
    tr.appendChild(td);
  }
  return tr;
}

// ---- units ---------------------------------------------------------------------------------------------------

function ms(s) { return s == null ? "-" : `${(s * 1000).toFixed(1)} ms`; }
function pct(p) { return p == null ? "-" : `${(p * 100).toFixed(2)} %`; }
function bits(bps) {
  if (bps == null) return "unlimited";
  if (bps >= 1e9) return `${(bps / 1e9).toFixed(2)} Gbit/s`;
  if (bps >= 1e6) return `${(bps / 1e6).toFixed(2)} Mbit/s`;
  if (bps >= 1e3) return `${(bps / 1e3).toFixed(1)} kbit/s`;
  return `${Math.round(bps)} bit/s`;
}

// utilisation 0..1 -> green, yellow, red; null (unlimited) -> grey
function colour(u) {
  if (u == null) return "#aaaaaa";
  const x = Math.max(0, Math.min(1, u));
  const r = x < 0.5 ? Math.round(0x22 + (0xdd - 0x22) * x * 2) : 0xdd;
  const g = x < 0.5 ? 0xaa : Math.round(0xcc - (0xcc - 0x22) * (x - 0.5) * 2);
  return `rgb(${r},${g},34)`;
}

function linkUtilisation(l) {
  const us = [l.a_to_b, l.b_to_a].map(d => (d || {}).utilisation).filter(u => u != null);
  return us.length ? Math.max(...us) : null;
}

// ---- the graph ---------------------------------------------------------------------------------------------

function buildGraph(s) {
  const hosts = s.hosts.filter(h => h.name);
  const pos = window.dashLayout.positions(s.generator, hosts, s.links);
  const elements = hosts.map(h => ({ group: "nodes", data: { id: h.name, label: h.name, role: h.role || "" },
                                     position: pos ? { ...(pos[h.name] || { x: 0, y: 0 }) } : undefined }));
  for (const l of s.links) {
    if (l.name && l.a && l.b) elements.push({ group: "edges", data: { id: `link:${l.name}`, name: l.name,
                                                                       source: l.a, target: l.b } });
  }
  if (dash.cy) dash.cy.destroy();
  dash.cy = cytoscape({
    container: $("graph"), elements, minZoom: 0.1, maxZoom: 5, wheelSensitivity: 0.3,
    layout: pos ? { name: "preset", fit: true, padding: 20 } : { name: "cose", animate: false, randomize: false,
                                                                      fit: true, padding: 20 },
    style: [
      { selector: "node", style: { "label": "data(label)", "font-size": 10, "width": 16, "height": 16,
                                   "background-color": "#6a7fa0", "text-valign": "top" } },
      { selector: "node[role = 'gateway'], node[role = 'broker'], node[role = 'root']",
        style: { "shape": "diamond" } },
      { selector: "node[queued > 0]", style: { "background-color": "#e09020" } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": "#222" } },
      { selector: "edge", style: { "width": 3, "line-color": "data(colour)", "curve-style": "bezier" } },
      { selector: "edge[state != 'up']", style: { "line-style": "dashed", "line-color": "#dd2222" } },
    ],
  });
  dash.cy.on("mouseover", "edge", ev => showTip(ev, linkTip(ev.target.data("name"))));
  dash.cy.on("mouseover", "node", ev => { if (!dash.selected) showNode(ev.target.id()); });
  dash.cy.on("mouseout", "edge", hideTip);
  dash.cy.on("tap", "node", ev => { dash.selected = ev.target.id(); showNode(dash.selected); });
  dash.cy.on("tap", ev => { if (ev.target === dash.cy) { dash.selected = null; } });
}

function updateGraph(s) {
  const key = s.hosts.map(h => h.name).join(" ") + "|" + s.links.map(l => l.name).join(" ");
  if (key !== dash.hostsKey) {          // a new set of hosts or links: lay out once more, else only restyle
    dash.hostsKey = key;
    buildGraph(s);
  }
  const cy = dash.cy;
  cy.batch(() => {
    for (const l of s.links) {
      const e = cy.getElementById(`link:${l.name}`);
      if (e.empty()) continue;
      e.data({ state: l.state, colour: colour(linkUtilisation(l)) });
    }
    for (const h of s.hosts) {
      const n = cy.getElementById(h.name);
      if (!n.empty()) n.data("queued", ((s.nodes || {})[h.name] || {}).queue_messages || 0);
    }
  });
}

function linkTip(name) {
  const l = (dash.state.links || []).find(x => x.name === name);
  if (!l) return null;
  const t = document.createElement("table");
  t.appendChild(row([`${l.name} (${l.state})`, `${l.a} → ${l.b}`, `${l.b} → ${l.a}`], "th"));
  const d = [l.a_to_b || {}, l.b_to_a || {}];
  const drops = x => Object.values(x.drops || {}).reduce((a, b) => a + (b || 0), 0);
  for (const [label, f] of [["delay", x => ms(x.delay)], ["jitter", x => ms(x.jitter)], ["loss", x => pct(x.loss)],
                            ["rate", x => bits(x.rate)], ["queue", x => x.queue == null ? "-" : `${x.queue} pkt`],
                            ["traffic", x => bits(x.bps || 0)],
                            ["utilisation", x => x.utilisation == null ? "-" : pct(x.utilisation)],
                            ["drops", x => String(drops(x))]]) {
    t.appendChild(row([label, f(d[0]), f(d[1])]));
  }
  return t;
}

function showTip(ev, content) {
  const tip = $("tip");
  if (!content) return;
  tip.replaceChildren(content);
  // an event without a pointer position (emitted, or by keyboard) is placed at the element
  const at = ev.renderedPosition || (ev.target.isEdge() ? ev.target.renderedMidpoint() : ev.target.renderedPosition());
  tip.style.left = `${at.x + 12}px`;
  tip.style.top = `${at.y + 12}px`;
  tip.hidden = false;
}
function hideTip() { $("tip").hidden = true; }

// ---- per node ----------------------------------------------------------------------------------------------

function showNode(name) {
  const s = dash.state;
  if (!s || !name) return;
  text("node-name", name);
  const m = (s.nodes || {})[name];
  const t = $("node");
  t.replaceChildren();
  if (!m) {
    t.appendChild(row(["no metrics yet"]));
  } else {
    t.appendChild(row(["queued", `${m.queue_messages} messages`]));
    for (const [nb, q] of Object.entries(m.queues || {})) {
      t.appendChild(row([`  to ${nb}`, `${q} (${(m.neighbours_up || {})[nb] ? "up" : "down"})`]));
    }
    t.appendChild(row(["spool", `${m.spool_messages} messages, ${m.spool_bytes} bytes`]));
    t.appendChild(row(["held", String(m.held_messages)]));
    t.appendChild(row(["orphans", String(m.orphans)]));
    t.appendChild(row(["delivered", String(m.delivered)]));
  }
  const routes = (s.routes || []).filter(r => r.node === name).slice(-10).reverse();
  $("node-routes").replaceChildren(...(routes.length ? routes.map(r =>
    li(`${when(r.ts)} to ${r.dst} via ${r.next_hop} cost ${r.cost} (${r.reason})`)) : [li("none")]));
}

// ---- timeline ----------------------------------------------------------------------------------------------

// a stall: messages queued and the delivered total still for STALL_S seconds (derived here, from the metrics)
function noteStall(s) {
  if (dash.replayAt !== null) return;
  const nodes = Object.values(s.nodes || {});
  const queued = nodes.reduce((a, n) => a + (n.queue_messages || 0), 0);
  const delivered = nodes.reduce((a, n) => a + (n.delivered || 0), 0);
  const now = s.last_ts;
  const st = dash.stall;
  if (!st || delivered !== st.delivered || queued === 0) {
    dash.stall = { delivered, since: now, marked: false };
    return;
  }
  if (!st.marked && now - st.since >= STALL_S) {
    st.marked = true;
    dash.stalls.push({ ts: st.since, kind: "stall", text: `stall: ${queued} queued, nothing delivered` });
  }
}

function showTimeline(s) {
  const entries = (s.timeline || []).concat(dash.replayAt === null ? dash.stalls : [])
    .sort((a, b) => a.ts - b.ts);
  const t0 = s.first_ts || (entries[0] || {}).ts || 0;
  const t1 = Math.max(s.last_ts || 0, t0 + 1);
  const svg = $("timeline-strip");
  const width = svg.clientWidth || 800;
  const ns = "http://www.w3.org/2000/svg";
  const marks = entries.map(e => {
    const m = document.createElementNS(ns, "rect");
    m.setAttribute("x", String(Math.round((e.ts - t0) / (t1 - t0) * (width - 4))));
    m.setAttribute("y", "2");
    m.setAttribute("width", "3");
    m.setAttribute("height", "24");
    m.setAttribute("class", e.kind);
    m.setAttribute("fill", e.kind === "fault" ? "#d22" : e.kind === "route" ? "#36c" : "#e90");
    const title = document.createElementNS(ns, "title");
    title.textContent = `${when(e.ts)} ${e.text}`;
    m.appendChild(title);
    return m;
  });
  svg.replaceChildren(...marks);
  $("timeline").replaceChildren(...entries.slice(-TIMELINE_ROWS).reverse()
    .map(e => li(`${when(e.ts)} ${e.kind}: ${e.text}`, e.kind)));
}

// ---- panels (only when the run has them) -------------------------------------------------------------------

function panelSeries(s) {
  const out = {};
  const broker = (s.panels || {}).broker;
  const sum = k => Object.values(broker || {}).reduce((a, b) => a + (b[k] || 0), 0);
  // every daemon reports a broker section; a run without pub/sub keeps it at zero and gets no panel
  if (broker && (dash.series.broker || ["published", "copies_out", "duplicates", "expired"].some(k => sum(k)))) {
    out.broker = { title: "broker (all nodes)", names: ["published", "copies out", "duplicates", "expired"],
                   values: [sum("published"), sum("copies_out"), sum("duplicates"), sum("expired")] };
  }
  const rate = (s.panels || {}).rate;
  if (rate) {
    const keys = Object.keys(rate).sort().slice(0, PANEL_SERIES);
    out.rate = { title: "rate control: granted rate (bit/s)", names: keys,
                 values: keys.map(k => rate[k].rate_bps || 0) };
  }
  return out;
}

function showPanels(s) {
  const wanted = panelSeries(s);
  for (const name of Object.keys(dash.charts)) {
    if (!(name in wanted)) {            // a replay before the panel's first record: not shown
      dash.charts[name].destroy();
      dash.charts[name].root.parentElement.remove();
      delete dash.charts[name];
      delete dash.series[name];
    }
  }
  for (const [name, p] of Object.entries(wanted)) {
    let data = dash.series[name];
    if (!data || data.length !== p.values.length + 1) {
      data = dash.series[name] = [[], ...p.values.map(() => [])];
    }
    const ts = s.last_ts || Date.now() / 1000;
    if (!data[0].length || ts > data[0][data[0].length - 1]) {
      data[0].push(ts);
      p.values.forEach((v, i) => data[i + 1].push(v));
      if (data[0].length > SERIES_POINTS) data.forEach(a => a.shift());
    }
    if (!dash.charts[name]) {
      const div = document.createElement("div");
      div.className = "panel";
      div.id = `panel-${name}`;
      const h = document.createElement("h3");
      h.textContent = p.title;
      div.appendChild(h);
      $("panels").appendChild(div);
      const palette = ["#36c", "#d22", "#2a2", "#e90", "#939", "#099", "#663", "#c39"];
      dash.charts[name] = new uPlot({ width: 420, height: 150, legend: { show: true },
        series: [{}, ...p.names.map((n, i) => ({ label: n, stroke: palette[i % palette.length] }))] }, data, div);
    } else {
      dash.charts[name].setData(data);
    }
  }
}

// ---- header ------------------------------------------------------------------------------------------------

function showHeader(s) {
  const exp = s.experiment;
  text("run", (exp && exp.showing ? `${exp.showing} of ` : "") + s.run_dir);
  const p = s.phase || {};
  text("phase", p.phase ? `${p.cell} rep ${p.rep}: ${p.phase}` : (exp ? "-" : "network up"));
  const t = s.progress || {};
  if (t.total) {
    $("progress-bar").value = Math.min(1, t.elapsed / t.total);
    text("progress", `${t.elapsed.toFixed(0)} / ${t.total.toFixed(0)} s, ${t.delivered} of ${t.submitted} delivered`);
  } else {
    text("progress", "-");
  }
  const h = s.host || {};
  text("host", h.cpu_percent == null ? ""
    : `host cpu ${h.cpu_percent.toFixed(0)} %, mem ${h.mem_percent.toFixed(0)} %`);
  $("problems").replaceChildren(...(s.problems || []).slice(-10).reverse().map(e => li(e.text)));
}

// ---- updates -----------------------------------------------------------------------------------------------

function render(s) {
  const t0 = performance.now();
  dash.state = s;
  if (dash.replayAt === null) noteStall(s);
  showHeader(s);
  updateGraph(s);
  showTimeline(s);
  showPanels(s);
  showNode(dash.selected || (dash.cy && dash.cy.nodes().length ? dash.cy.nodes()[0].id() : null));
  if (s.replay) showSlider(s);
  dash.renders += 1;
  dash.renderMs = performance.now() - t0;
  dash.renderedAt = Date.now();
}

let pending = null;
let timer = null;
let lastRender = 0;

function schedule(s) {
  pending = s;
  if (timer) return;
  const wait = Math.max(0, lastRender + MIN_RENDER_GAP_MS - performance.now());
  timer = setTimeout(() => {
    timer = null;
    lastRender = performance.now();
    const next = pending;
    pending = null;
    if (next) render(next);
  }, wait);
}

// ---- replay ------------------------------------------------------------------------------------------------

const FRAMES = window.DASH_FRAMES || null;   // topology.html: the run's sampled states, inlined; no server

function showSlider(s) {
  $("replay").hidden = false;
  if (dash.replayAt !== null) return;
  const slider = $("slider");
  if (FRAMES) {
    slider.min = "0";
    slider.max = String(FRAMES.length - 1);
    slider.step = "1";
    slider.value = slider.max;
    text("slider-time", `end (${when(s.last_ts)})`);
    return;
  }
  slider.min = String(s.first_ts || s.last_ts || 0);
  slider.max = String(s.last_ts || 0);
  slider.value = slider.max;
  text("slider-time", `end (${when(s.last_ts)})`);
}

let replayTimer = null;
$("slider").addEventListener("input", () => {
  const slider = $("slider");
  if (FRAMES) {
    const i = Number(slider.value);
    dash.replayAt = i === FRAMES.length - 1 ? null : i;
    text("slider-time", dash.replayAt === null ? `end (${when(FRAMES[i].last_ts)})` : when(FRAMES[i].last_ts));
    render(FRAMES[i]);
    return;
  }
  clearTimeout(replayTimer);
  replayTimer = setTimeout(async () => {
    const at = Number(slider.value);
    if (at >= Number(slider.max)) {          // the end: follow the stream again
      dash.replayAt = null;
      if (dash.live) render(dash.live);
      return;
    }
    dash.replayAt = at;
    text("slider-time", when(at));
    try {
      const r = await fetch(`/state?t=${at}`);
      if (!r.ok) { text("conn", `(replay: HTTP ${r.status})`); return; }
      const s = await r.json();
      if (dash.replayAt === at) render(s);
    } catch (err) {
      text("conn", "(replay unavailable)");
    }
  }, 200);
});

if (FRAMES) {
  // every sampled state in order: the series fill, the last one stays on screen
  text("conn", "(saved)");
  FRAMES.forEach(render);
} else {
  const stream = new EventSource("/events");
  stream.addEventListener("state", ev => {
    text("conn", "(live)");
    const s = JSON.parse(ev.data);
    dash.live = s;
    dash.receivedAt = Date.now();
    if (dash.replayAt === null) schedule(s);
  });
  stream.onerror = () => text("conn", "(reconnecting)");
}
