// The live page: link counters, throughput and drops updated in place from the server's
// stream (server-sent events, one snapshot a second); without it the page still reads and
// its Refresh link reloads it.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live || typeof EventSource === "undefined") return;
  const rate = (bps) => {
    if (bps === undefined || bps === null) return "—";
    const units = [["Gb/s", 1e9], ["Mb/s", 1e6], ["kb/s", 1e3]];
    for (const [u, k] of units) if (bps >= k) return (bps / k).toFixed(bps / k < 10 ? 2 : 1) + " " + u;
    return Math.round(bps) + " b/s";
  };
  const text = (s) => document.createTextNode(s === undefined || s === null ? "" : String(s));
  const cell = (tr, value) => { const td = document.createElement("td"); td.appendChild(text(value)); tr.appendChild(td); return td; };
  function counters(now) {
    const body = document.querySelector("#counters tbody");
    const rows = now.counters || [];
    if (!rows.length) return;
    const seen = {};
    body.querySelectorAll("tr[data-key]").forEach((tr) => { seen[tr.dataset.key] = tr; });
    body.querySelectorAll("tr:not([data-key])").forEach((tr) => tr.remove());
    for (const c of rows) {
      const key = c.link + "|" + c.port + "|" + c.direction;
      let tr = seen[key];
      if (!tr) {
        tr = document.createElement("tr");
        tr.dataset.key = key;
        for (const [f, v] of [[null, c.link], ["state", ""], [null, c.port], [null, c.direction], ["packets_out", ""], ["throughput_bps", ""], ["drops", ""], ["queue_packets", ""]]) {
          const td = cell(tr, v); if (f) td.dataset.f = f;
        }
        body.appendChild(tr);
      }
      const values = { state: c.state, packets_out: c.packets_out, throughput_bps: rate(c.throughput_bps), drops: c.drops, queue_packets: c.queue_packets };
      for (const [f, v] of Object.entries(values)) {
        const td = tr.querySelector(`[data-f="${f}"]`);
        if (td && td.textContent !== String(v)) { td.textContent = v; td.classList.add("changed"); setTimeout(() => td.classList.remove("changed"), 800); }
      }
    }
  }
  function table(id, rows, fields) {
    const body = document.querySelector(`#${id} tbody`);
    if (!rows.length) return;
    body.replaceChildren(...rows.map((r) => { const tr = document.createElement("tr"); fields(r).forEach((v) => cell(tr, v)); return tr; }));
  }
  const source = new EventSource(live.dataset.stream);
  const show = (now) => {
    document.getElementById("live-state").textContent = now.state;
    const elapsed = document.getElementById("elapsed");
    if (elapsed && now.elapsed_s !== undefined) elapsed.textContent = Number(now.elapsed_s).toFixed(1);
    counters(now);
    table("programs", now.programs || [], (p) => [p.program, p.node, p.state, p.invocations, p.exit_code ?? ""]);
    table("events", now.events || [], (e) => [e.actual_s, e.source, `${e.object} ${e.verb} ${e.args}`, e.outcome, e.message]);
  };
  source.addEventListener("snapshot", (e) => show(JSON.parse(e.data)));
  source.addEventListener("end", (e) => { show(JSON.parse(e.data)); source.close(); });
  source.onerror = () => { if (source.readyState === EventSource.CLOSED) return; };
})();
