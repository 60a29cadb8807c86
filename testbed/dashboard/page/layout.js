// Where each host goes, from topology.json's generator and host attributes. Computed once per set of hosts.
// positions() returns {name: {x, y}}, or null when nothing fits (the page then runs a force layout).
"use strict";

const LAYOUT_STEP = 90;   // pixels between neighbouring hosts; cytoscape fits the whole graph to the view anyway

function circle(names, cx, cy, r) {
  const out = {};
  names.forEach((n, i) => {
    const a = -Math.PI / 2 + 2 * Math.PI * i / Math.max(names.length, 1);
    out[n] = { x: cx + r * Math.cos(a), y: cy + r * Math.sin(a) };
  });
  return out;
}

function ringRadius(count) {
  return Math.max(LAYOUT_STEP, count * LAYOUT_STEP / (2 * Math.PI));
}

function gridLayout(hosts) {
  const out = {};
  for (const h of hosts) {
    const m = /^r(\d+)c(\d+)$/.exec(h.name);
    if (!m) return null;
    out[h.name] = { x: Number(m[2]) * LAYOUT_STEP, y: Number(m[1]) * LAYOUT_STEP };
  }
  return out;
}

function treeLayout(hosts, links) {
  const adj = new Map(hosts.map(h => [h.name, []]));
  for (const l of links) {
    if (adj.has(l.a) && adj.has(l.b)) { adj.get(l.a).push(l.b); adj.get(l.b).push(l.a); }
  }
  const root = (hosts.find(h => h.role === "root") || hosts[0]).name;
  const depth = new Map([[root, 0]]);
  const levels = [[root]];
  const queue = [root];
  while (queue.length) {
    const n = queue.shift();
    for (const m of adj.get(n)) {
      if (depth.has(m)) continue;
      depth.set(m, depth.get(n) + 1);
      (levels[depth.get(m)] = levels[depth.get(m)] || []).push(m);
      queue.push(m);
    }
  }
  if (depth.size !== hosts.length) return null;      // not connected: not a tree to draw by levels
  const widest = Math.max(...levels.map(l => l.length));
  const out = {};
  levels.forEach((level, d) => level.forEach((n, i) => {
    out[n] = { x: (i + 0.5) * widest * LAYOUT_STEP / level.length, y: d * LAYOUT_STEP * 1.5 };
  }));
  return out;
}

// groups (clusters, regions) on a big circle, each group's members on a small circle around its centre
function groupLayout(hosts, key, order) {
  const groups = new Map();
  for (const h of hosts) {
    const g = (h.attrs || {})[key];
    if (g === undefined) return null;
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(h);
  }
  const names = order ? order.filter(g => groups.has(g)) : [...groups.keys()];
  if (names.length !== groups.size) return null;
  const big = ringRadius(names.length * 3);
  const centres = circle(names.map(String), 0, 0, big);
  const out = {};
  for (const g of names) {
    // gateways first: they sit on the side of the circle the group starts from
    const members = groups.get(g).slice().sort((a, b) => (b.role === "gateway") - (a.role === "gateway"));
    const c = centres[String(g)];
    Object.assign(out, circle(members.map(h => h.name), c.x, c.y, Math.max(40, members.length * 12)));
  }
  return out;
}

// Gunduz's six brokers, placed roughly by geography: Korea across the Pacific, then San Diego, the three CGL
// brokers in Indiana, England
const BROKER_PLACES = { Korea: [-3, 0], SanDiego: [-1.5, 0.3], CGL1: [0, -0.5], CGL2: [-0.3, 0.6],
  CGL3: [0.4, 0.2], England: [2, -0.5] };
const REGIONS = ["west", "prairies", "ontario", "quebec", "atlantic"];   // cdnnet15, west to east

function attributeLayout(hosts, generator) {
  if (generator === "intercontinental6") {
    const out = {};
    for (const h of hosts) {
      const p = BROKER_PLACES[(h.attrs || {}).broker];
      if (!p) return null;
      out[h.name] = { x: p[0] * LAYOUT_STEP * 1.5, y: p[1] * LAYOUT_STEP * 1.5 };
    }
    return out;
  }
  // cdnnet15: regions west to east, each region's cities in a small triangle
  const out = {};
  const seen = new Map();
  for (const h of hosts) {
    const r = REGIONS.indexOf((h.attrs || {}).region);
    if (r < 0) return null;
    const i = seen.get(r) || 0;
    seen.set(r, i + 1);
    const a = -Math.PI / 2 + 2 * Math.PI * i / 3;
    out[h.name] = { x: r * LAYOUT_STEP * 2.2 + 45 * Math.cos(a), y: 45 * Math.sin(a) + (r % 2) * 60 };
  }
  return out;
}

function positions(generator, hosts, links) {
  if (!hosts.length) return {};
  const names = hosts.map(h => h.name);
  switch (generator) {
    case "ring": return circle(names, 0, 0, ringRadius(names.length));   // topology.json keeps ring order
    case "star": {
      const centre = names[0];
      const out = circle(names.slice(1), 0, 0, ringRadius(names.length - 1));
      out[centre] = { x: 0, y: 0 };
      return out;
    }
    case "linear": {
      const out = {};
      names.forEach((n, i) => { out[n] = { x: i * LAYOUT_STEP, y: 0 }; });
      return out;
    }
    case "grid": return gridLayout(hosts);
    case "tree": return treeLayout(hosts, links);
    case "clusters": return groupLayout(hosts, "cluster");
    case "intercontinental6": return attributeLayout(hosts, generator);
    case "cdnnet15": return attributeLayout(hosts, generator);
    default: return null;
  }
}

window.dashLayout = { positions };
