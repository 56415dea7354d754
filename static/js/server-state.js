// Light polling for the server pages: every few seconds, ask the panel for each server's
// state and address and update what is shown. A server page reloads when the state of its
// server changes (so its buttons match), unless someone is typing in a form.
(function () {
  "use strict";
  var script = document.currentScript;
  var url = script && script.getAttribute("data-states-url");
  if (!url) { return; }
  var INTERVAL_MS = 3000;

  function typing() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT");
  }

  function apply(servers) {
    var changed = false;
    document.querySelectorAll("[data-server-state]").forEach(function (badge) {
      var row = servers[badge.getAttribute("data-server-state")];
      if (!row || badge.textContent === row.state) { return; }
      badge.textContent = row.state;
      badge.className = "badge state state-" + row.state;
      changed = true;
    });
    document.querySelectorAll("[data-server-address]").forEach(function (cell) {
      var row = servers[cell.getAttribute("data-server-address")];
      if (row) { cell.textContent = row.address; }
    });
    if (changed && document.querySelector("[data-reload-on-change]") && !typing()) {
      window.location.reload();
    }
  }

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) { if (body) { apply(body.servers); } })
      .catch(function () { /* try again next time */ })
      .finally(function () { window.setTimeout(poll, INTERVAL_MS); });
  }

  window.setTimeout(poll, INTERVAL_MS);
})();
