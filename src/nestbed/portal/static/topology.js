// The topology page: the experiment's elements drawn, link shaping on hover, nodes coloured
// by host, dragged positions saved on the server, and the node table filtered as one types.
// A small graph is drawn with Cytoscape.js (vendored). A large one (above 200 nodes) comes
// laid out from the server and is drawn on a plain canvas: Cytoscape took 0.5 s for 1 000
// nodes on an idle machine and ten times that under load, where the canvas takes a few
// milliseconds; choosing a layout from the menu hands the graph over to Cytoscape. The page
// reads without this script: the tables say the same.
"use strict";
(function () {
  const box = document.getElementById("graph");
  if (!box) return;
  const started = performance.now();
  const elements = JSON.parse(document.getElementById("elements").textContent);
  const large = box.dataset.large === "yes";
  const palette = ["#0b5cad", "#1a7f37", "#b3261e", "#9a6700", "#8250df", "#0a7e8c", "#bf3989", "#57606a"];
  const hosts = {};
  document.querySelectorAll("#legend .host").forEach((el, i) => {
    hosts[el.dataset.host] = palette[i % palette.length];
    el.style.setProperty("--c", hosts[el.dataset.host]);
  });
  const hover = document.getElementById("hover");
  const token = document.querySelector("meta[name=csrf-token]").content;
  const keyOf = (d) => (d.kind === "lan" ? "lan:" + d.label : d.label);
  function save(sent) {
    const body = new URLSearchParams({ csrf: token, positions: JSON.stringify(sent) });
    fetch(box.dataset.positions, { method: "POST", body, credentials: "same-origin" })
      .then((r) => { hover.textContent = r.ok ? "Position saved." : "The position could not be saved (" + r.status + ")."; });
  }
  const nodeText = (d) => d.label + (d.host ? " on " + d.host : "") + (d.shaping ? ": " + d.shaping : "");
  const edgeText = (d) => d.label + ": " + d.shaping;
  let view = null; // what draws the graph now: { find(needle), position(id), cy? }

  function drawn(extra) {
    window.nestbedTopology = { drawnAt: performance.now(), drawnMs: performance.now() - started,
      nodes: elements.filter((e) => !e.data.source).length, edges: elements.filter((e) => e.data.source).length,
      renderedPosition: (id) => view.position(id), ...extra };
    box.dataset.drawn = "yes";
  }

  // -- a large graph on a canvas: positions from the server, pan, zoom, hover, drag ----------
  function plain() {
    const canvas = document.createElement("canvas");
    canvas.className = "plain";
    canvas.setAttribute("aria-hidden", "true");
    box.appendChild(canvas);
    const width = box.clientWidth, height = box.clientHeight;
    canvas.width = width; canvas.height = height;
    const g = canvas.getContext("2d");
    const nodes = [], byId = {}, edges = [];
    for (const e of elements) {
      if (e.data.source) continue;
      const n = { d: e.data, x: e.position ? e.position.x : 0, y: e.position ? e.position.y : 0 };
      nodes.push(n); byId[e.data.id] = n;
    }
    for (const e of elements) if (e.data.source && byId[e.data.source] && byId[e.data.target]) edges.push({ d: e.data, a: byId[e.data.source], b: byId[e.data.target] });
    let scale = 1, dx = 0, dy = 0, found = new Set(), over = null;
    (function fit() {
      let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (const n of nodes) { x0 = Math.min(x0, n.x); y0 = Math.min(y0, n.y); x1 = Math.max(x1, n.x); y1 = Math.max(y1, n.y); }
      if (!nodes.length) return;
      scale = Math.min((width - 40) / Math.max(x1 - x0, 1), (height - 40) / Math.max(y1 - y0, 1), 2.5);
      dx = width / 2 - scale * (x0 + x1) / 2; dy = height / 2 - scale * (y0 + y1) / 2;
    })();
    const sx = (n) => n.x * scale + dx, sy = (n) => n.y * scale + dy;
    function paint() {
      g.clearRect(0, 0, width, height);
      g.lineWidth = 1; g.strokeStyle = "#8c959f"; g.beginPath();
      for (const e of edges) { g.moveTo(sx(e.a), sy(e.a)); g.lineTo(sx(e.b), sy(e.b)); }
      g.stroke();
      if (over && over.a) {
        g.lineWidth = 4; g.strokeStyle = "#b3261e"; g.beginPath();
        g.moveTo(sx(over.a), sy(over.a)); g.lineTo(sx(over.b), sy(over.b)); g.stroke();
      }
      for (const n of nodes) {
        const big = found.has(n), r = big ? 7 : n.d.kind === "lan" ? 4 : 3;
        g.fillStyle = big ? "#ff8c00" : n.d.kind === "lan" ? "#9a6700" : hosts[n.d.host] || "#0b5cad";
        if (n.d.kind === "lan") { g.beginPath(); g.moveTo(sx(n), sy(n) - r); g.lineTo(sx(n) + r, sy(n)); g.lineTo(sx(n), sy(n) + r); g.lineTo(sx(n) - r, sy(n)); g.fill(); }
        else { g.beginPath(); g.arc(sx(n), sy(n), r, 0, 2 * Math.PI); g.fill(); }
      }
      g.fillStyle = "#1f2328"; g.font = "10px sans-serif"; g.textAlign = "center";
      for (const n of found) g.fillText(n.d.label, sx(n), sy(n) + 18);
    }
    function at(ev) { const r = canvas.getBoundingClientRect(); return { x: ev.clientX - r.left, y: ev.clientY - r.top }; }
    function nodeAt(p) {
      let best = null, bestD = 49; // within 7 pixels
      for (const n of nodes) { const d = (sx(n) - p.x) ** 2 + (sy(n) - p.y) ** 2; if (d < bestD) { best = n; bestD = d; } }
      return best;
    }
    function edgeAt(p) {
      let best = null, bestD = 16; // within 4 pixels
      for (const e of edges) {
        const ax = sx(e.a), ay = sy(e.a), bx = sx(e.b), by = sy(e.b), lx = bx - ax, ly = by - ay;
        const t = Math.max(0, Math.min(1, ((p.x - ax) * lx + (p.y - ay) * ly) / (lx * lx + ly * ly || 1)));
        const d = (ax + t * lx - p.x) ** 2 + (ay + t * ly - p.y) ** 2;
        if (d < bestD) { best = e; bestD = d; }
      }
      return best;
    }
    let held = null; // { node, moved } or { pan: {x, y} }
    canvas.addEventListener("mousedown", (ev) => {
      const p = at(ev), n = nodeAt(p);
      held = n ? { node: n, moved: false } : { pan: p };
    });
    window.addEventListener("mousemove", (ev) => {
      const p = at(ev);
      if (held && held.node) {
        held.node.x = (p.x - dx) / scale; held.node.y = (p.y - dy) / scale; held.moved = true; paint();
      } else if (held) {
        dx += p.x - held.pan.x; dy += p.y - held.pan.y; held.pan = p; paint();
      } else if (ev.target === canvas) {
        const n = nodeAt(p), e = n ? null : edgeAt(p), was = over;
        over = n || e;
        if (n) hover.textContent = nodeText(n.d);
        else if (e) hover.textContent = edgeText(e.d);
        if (was !== over) paint();
      }
    });
    window.addEventListener("mouseup", () => {
      if (held && held.node && held.moved) {
        const n = held.node;
        save({ [keyOf(n.d)]: { x: n.x, y: n.y } });
      }
      held = null;
    });
    canvas.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const p = at(ev), k = Math.exp(-ev.deltaY * 0.0015), s = Math.min(Math.max(scale * k, 0.05), 2.5);
      dx = p.x - (p.x - dx) * (s / scale); dy = p.y - (p.y - dy) * (s / scale); scale = s; paint();
    }, { passive: false });
    paint();
    return {
      canvas,
      find(needle) { found = new Set(needle ? nodes.filter((n) => n.d.label.toLowerCase().includes(needle)) : []); paint(); },
      position(id) { const n = byId[id]; return { x: sx(n), y: sy(n) }; },
      positions() { const kept = {}; for (const n of nodes) kept[n.d.id] = { x: n.x, y: n.y }; return kept; },
    };
  }

  // -- Cytoscape: a small graph, or a large one once a layout is chosen ---------------------
  const style = [
    { selector: "node[kind = 'node']", style: { "background-color": "#0b5cad", width: large ? 6 : 18, height: large ? 6 : 18,
      label: large ? "" : "data(label)", "font-size": 10, "text-valign": "bottom", "text-margin-y": 3 } },
    // A selector per host rather than a style function, which Cytoscape calls per node at each pass.
    ...Object.entries(hosts).map(([host, c]) => ({ selector: "node[host = " + JSON.stringify(host) + "]", style: { "background-color": c } })),
    { selector: "node[kind = 'lan']", style: { shape: "diamond", "background-color": "#9a6700", width: large ? 8 : 22, height: large ? 8 : 22,
      label: large ? "" : "data(label)", "font-size": 10 } },
    { selector: "edge", style: { width: large ? 1 : 2, "line-color": "#8c959f", "curve-style": large ? "haystack" : "bezier" } },
    { selector: "edge.hover", style: { "line-color": "#b3261e", width: 4, label: "data(label)", "font-size": 10 } },
    { selector: "node.found", style: { "background-color": "#ff8c00", width: 14, height: 14, label: "data(label)" } },
  ];
  const options = (name) => ({ name, animate: false, fit: true, padding: 20, directed: false, nodeDimensionsIncludeLabels: !large,
    numIter: large ? 300 : 1000, randomize: false });
  function graph(layout, at) {
    const placed = at ? elements.map((e) => (at[e.data.id] ? { ...e, position: at[e.data.id] } : e)) : elements;
    const cy = cytoscape({ container: box, elements: placed, style, layout: options(layout), textureOnViewport: large, maxZoom: 2.5,
      hideEdgesOnViewport: large, pixelRatio: large ? 1 : "auto", wheelSensitivity: 0.3 });
    cy.on("mouseover", "edge", (e) => { e.target.addClass("hover"); hover.textContent = edgeText(e.target.data()); });
    cy.on("mouseout", "edge", (e) => e.target.removeClass("hover"));
    cy.on("mouseover", "node", (e) => { hover.textContent = nodeText(e.target.data()); });
    cy.on("dragfree", "node", (e) => {
      const sent = {};
      e.target.union(cy.$(":selected")).forEach((n) => { sent[keyOf(n.data())] = n.position(); });
      save(sent);
    });
    return {
      cy,
      layout(name) { cy.layout(options(name)).run(); },
      find(needle) {
        cy.nodes().removeClass("found");
        if (needle) cy.nodes().filter((n) => n.data("label").toLowerCase().includes(needle)).addClass("found");
      },
      position(id) { return cy.$id(id).renderedPosition(); },
    };
  }
  function withCytoscape(then) {
    if (typeof cytoscape !== "undefined") return then();
    const script = document.createElement("script");
    script.src = box.dataset.cytoscape;
    script.onload = then;
    document.head.appendChild(script);
  }

  const chosen = box.dataset.preset ? "preset" : box.dataset.layout;
  const layout = document.getElementById("layout");
  if (large) {
    view = plain();
    drawn({ canvas: true });
  } else {
    if (typeof cytoscape === "undefined") return;
    view = graph(chosen);
    view.cy.ready(() => drawn({ cy: view.cy }));
  }
  layout.disabled = false;
  layout.addEventListener("change", () => {
    if (view.cy) return view.layout(layout.value);
    const at = view.positions(); // a large graph moves to Cytoscape, keeping what was dragged
    layout.disabled = true;
    withCytoscape(() => {
      view.canvas.remove();
      view = graph(layout.value, at);
      window.nestbedTopology.cy = view.cy;
      layout.disabled = false;
      if (search) view.find(search.value.trim().toLowerCase());
    });
  });
  const search = document.getElementById("q");
  const table = document.getElementById("node-table");
  if (search && table) {
    search.addEventListener("input", () => {
      const needle = search.value.trim().toLowerCase();
      table.querySelectorAll("tbody tr").forEach((tr) => { tr.hidden = needle !== "" && !tr.textContent.toLowerCase().includes(needle); });
      view.find(needle);
    });
    if (search.value.trim()) view.find(search.value.trim().toLowerCase()); // a search sent as a form
  }
})();
