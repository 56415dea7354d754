// The live console of a server page: every 1.5 s, ask the panel for the console lines after
// the last one shown and append them, keeping the last 200. Stops asking while the tab is
// hidden; says so when the node is unavailable or its output is old, and keeps trying.
// Beside the websocket (console-socket.js, `data-fallback`), it runs only while the socket
// is not live: that script starts and stops it (window.gshostConsoleMirror).
(function () {
  "use strict";
  var script = document.currentScript;
  var url = script && script.getAttribute("data-lines-url");
  var list = document.querySelector("[data-console-lines]");
  var status = document.querySelector("[data-console-status]");
  if (!url || !list) { return; }
  var INTERVAL_MS = 1500;
  var KEEP = 200;
  var OLD_SECONDS = 10;  // the lines are a copy of the node's, fetched about every poll
  var after = 0;
  var running = false;
  var timer = null;

  function show(message) {
    if (!status) { return; }
    status.textContent = message || "";
    status.hidden = !message;
  }

  function append(lines) {
    if (!lines.length) { return; }
    var placeholder = list.querySelector("[data-console-placeholder]");
    if (placeholder) { placeholder.remove(); }
    var atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 8;
    lines.forEach(function (line) {
      var item = document.createElement("li");
      item.textContent = line.text;  // text, never HTML: the game writes these lines
      list.appendChild(item);
    });
    while (list.children.length > KEEP) { list.removeChild(list.firstChild); }
    if (atBottom) { list.scrollTop = list.scrollHeight; }
  }

  function next() {
    if (running) { timer = window.setTimeout(poll, INTERVAL_MS); }
  }

  function poll() {
    if (!running) { return; }
    if (document.hidden) { next(); return; }
    fetch(url + "?after=" + after, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      })
      .then(function (answer) {
        if (answer.ok) {
          append(answer.body.lines || []);
          if (typeof answer.body.last === "number") { after = answer.body.last; }
          var age = answer.body.age_seconds;
          show(typeof age === "number" && age > OLD_SECONDS
            ? "Output as of " + age + " s ago: the node has not answered since." : "");
        } else if (answer.body && answer.body.error) {
          show(answer.body.error.message);
        }
      })
      .catch(function () { /* try again next time */ })
      .finally(next);
  }

  window.gshostConsoleMirror = {
    start: function () { if (!running) { running = true; poll(); } },
    stop: function () { running = false; window.clearTimeout(timer); show(""); }
  };
  if (!script.hasAttribute("data-fallback")) { window.gshostConsoleMirror.start(); }
})();
