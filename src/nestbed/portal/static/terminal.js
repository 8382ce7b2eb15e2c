// The web terminal: xterm.js on the server's session WebSocket (docs/server.md, "Exec and
// shell"). The first message asks for a pty of the terminal's size; keys go out as bytes,
// resizes as {"resize": [cols, rows]}; output comes as bytes after one byte of stream, and
// the session ends with {"exit": N} or {"error": "..."}.
"use strict";
(function () {
  const box = document.getElementById("terminal");
  const status = document.getElementById("terminal-status");
  if (!box || typeof Terminal === "undefined") return;
  const say = (text) => { status.textContent = text; };
  const term = new Terminal({ cursorBlink: true, convertEol: false, scrollback: 5000 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(scheme + "//" + location.host + box.dataset.socket);
  ws.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  let ended = false;
  ws.onopen = () => {
    ws.send(JSON.stringify({ tty: true, cols: term.cols, rows: term.rows, term: "xterm-256color" }));
    say("Connected: a shell in the node.");
    term.focus();
  };
  ws.onmessage = (message) => {
    if (typeof message.data !== "string") {
      term.write(new Uint8Array(message.data, 1));
      return;
    }
    const last = JSON.parse(message.data);
    ended = true;
    if (last.error) say("The terminal could not open: " + last.error);
    else say("The session ended (exit " + last.exit + (last.timed_out ? ", timed out" : "") + ").");
    box.dataset.ended = "true";
  };
  ws.onclose = () => {
    if (!ended) say("The connection to the server closed; reload the page to open a new terminal.");
    box.dataset.ended = "true";
  };
  term.onData((data) => { if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data)); });
  term.onResize(({ cols, rows }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: [cols, rows] }));
  });
  window.addEventListener("resize", () => fit.fit());
})();
