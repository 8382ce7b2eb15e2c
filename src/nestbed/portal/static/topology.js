// The topology page: the experiment's elements drawn with Cytoscape.js (vendored), link
// shaping on hover, nodes coloured by host, dragged positions saved on the server, and the
// node table filtered as one types. The page reads without it: the tables say the same.
"use strict";
(function () {
  const box = document.getElementById("graph");
  if (!box || typeof cytoscape === "undefined") return;
  const elements = JSON.parse(document.getElementById("elements").textContent);
  const large = box.dataset.large === "yes";
  const palette = ["#0b5cad", "#1a7f37", "#b3261e", "#9a6700", "#8250df", "#0a7e8c", "#bf3989", "#57606a"];
  const hosts = {};
  document.querySelectorAll("#legend .host").forEach((el, i) => {
    hosts[el.dataset.host] = palette[i % palette.length];
    el.style.setProperty("--c", hosts[el.dataset.host]);
  });
  // A selector per host rather than a style function: Cytoscape calls a function for each
  // node at each style pass, which was a third of a 1 000-node graph's first drawing.
  const byHost = Object.entries(hosts).map(([host, c]) => ({ selector: "node[host = " + JSON.stringify(host) + "]",
    style: { "background-color": c } }));
  const style = [
    { selector: "node[kind = 'node']", style: { "background-color": "#0b5cad", width: large ? 6 : 18, height: large ? 6 : 18,
      label: large ? "" : "data(label)", "font-size": 10, "text-valign": "bottom", "text-margin-y": 3 } },
    ...byHost,
    { selector: "node[kind = 'lan']", style: { shape: "diamond", "background-color": "#9a6700", width: large ? 8 : 22, height: large ? 8 : 22,
      label: large ? "" : "data(label)", "font-size": 10 } },
    { selector: "edge", style: { width: large ? 1 : 2, "line-color": "#8c959f", "curve-style": large ? "haystack" : "bezier" } },
    { selector: "edge.hover", style: { "line-color": "#b3261e", width: 4, label: "data(label)", "font-size": 10 } },
    { selector: "node.found", style: { "background-color": "#ff8c00", width: 14, height: 14, label: "data(label)" } },
  ];
  const chosen = box.dataset.preset ? "preset" : box.dataset.layout;
  const options = (name) => ({ name, animate: false, fit: true, padding: 20, directed: false, nodeDimensionsIncludeLabels: !large,
    numIter: large ? 300 : 1000, randomize: false });
  const started = performance.now();
  const cy = cytoscape({ container: box, elements, style, layout: options(chosen), textureOnViewport: large, maxZoom: 2.5,
    hideEdgesOnViewport: large, pixelRatio: large ? 1 : "auto", wheelSensitivity: 0.3 });
  cy.ready(() => {
    window.nestbedTopology = { cy, drawnAt: performance.now(), drawnMs: performance.now() - started, nodes: cy.nodes().length, edges: cy.edges().length };
    box.dataset.drawn = "yes";
  });
  const hover = document.getElementById("hover");
  cy.on("mouseover", "edge", (e) => { e.target.addClass("hover"); hover.textContent = e.target.data("label") + ": " + e.target.data("shaping"); });
  cy.on("mouseout", "edge", (e) => e.target.removeClass("hover"));
  cy.on("mouseover", "node", (e) => { const d = e.target.data(); hover.textContent = d.label + (d.host ? " on " + d.host : "") + (d.shaping ? ": " + d.shaping : ""); });
  const token = document.querySelector("meta[name=csrf-token]").content;
  cy.on("dragfree", "node", (e) => {
    const sent = {};
    e.target.union(cy.$(":selected")).forEach((n) => {
      const key = n.data("kind") === "lan" ? "lan:" + n.data("label") : n.data("label");
      sent[key] = n.position();
    });
    const body = new URLSearchParams({ csrf: token, positions: JSON.stringify(sent) });
    fetch(box.dataset.positions, { method: "POST", body, credentials: "same-origin" })
      .then((r) => { hover.textContent = r.ok ? "Position saved." : "The position could not be saved (" + r.status + ")."; });
  });
  const layout = document.getElementById("layout");
  layout.disabled = false;
  layout.addEventListener("change", () => cy.layout(options(layout.value)).run());
  const search = document.getElementById("q");
  const table = document.getElementById("node-table");
  if (search && table) {
    search.addEventListener("input", () => {
      const needle = search.value.trim().toLowerCase();
      table.querySelectorAll("tbody tr").forEach((tr) => { tr.hidden = needle !== "" && !tr.textContent.toLowerCase().includes(needle); });
      cy.nodes().removeClass("found");
      if (needle) cy.nodes().filter((n) => n.data("label").toLowerCase().includes(needle)).addClass("found");
    });
  }
})();
