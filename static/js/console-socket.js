// The live console of a server page, straight from the node over a websocket
// (docs/console.md): a session token from the panel, `auth` as the first frame, then every
// line as the game prints it. The token is refreshed before it expires; a lost connection is
// retried with capped, jittered waits, but never after 4401, 4403 or 4409 (the token or the
// access is gone: a reload asks again); while the node cannot be reached the page falls back
// to the mirror (console-lines.js). A typed command goes over the socket, no reload.
(function () {
  "use strict";
  var script = document.currentScript;
  var sessionUrl = script && script.getAttribute("data-session-url");
  var csrf = script && script.getAttribute("data-csrf");
  var list = document.querySelector("[data-console-lines]");
  var status = document.querySelector("[data-console-status]");
  var form = document.querySelector(".console-form");
  if (!sessionUrl || !list) { return; }
  var KEEP = 200;
  var REFRESH_BEFORE_MS = 90 * 1000;  // before the node's "token expiring" (60 s)
  var FIRST_WAIT_MS = 1000;
  var LONGEST_WAIT_MS = 30 * 1000;
  var FINAL = { 4401: "The console session ended; reload the page to open it again.",
                4403: "Access to this console was withdrawn.",
                4409: "The console is not available now; reload the page later." };
  var socket = null;
  var live = false;
  var attempts = 0;
  var refreshTimer = null;
  var stopped = false;

  function mirror(on) {
    var m = window.gshostConsoleMirror;
    if (m) { if (on) { m.start(); } else { m.stop(); } }
  }

  function show(message) {
    if (!status) { return; }
    status.textContent = message || "";
    status.hidden = !message;
  }

  function append(text, daemon) {
    var placeholder = list.querySelector("[data-console-placeholder]");
    if (placeholder) { placeholder.remove(); }
    var atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 8;
    var item = document.createElement("li");
    item.textContent = text;  // text, never HTML: the game writes these lines
    if (daemon) { item.className = "who"; }
    list.appendChild(item);
    while (list.children.length > KEEP) { list.removeChild(list.firstChild); }
    if (atBottom) { list.scrollTop = list.scrollHeight; }
  }

  function session() {
    return fetch(sessionUrl, { method: "POST", credentials: "same-origin",
                               headers: { "X-CSRFToken": csrf, "Accept": "application/json" } })
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) { throw new Error((body.error && body.error.message) || "refused"); }
          return body;
        });
      });
  }

  function send(event, args) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ event: event, args: args }));
      return true;
    }
    return false;
  }

  function scheduleRefresh(expiresAt) {
    window.clearTimeout(refreshTimer);
    var wait = Date.parse(expiresAt) - Date.now() - REFRESH_BEFORE_MS;
    refreshTimer = window.setTimeout(refresh, Math.max(wait, 0));
  }

  function refresh() {
    session().then(function (body) {
      send("auth", [body.token]);
      scheduleRefresh(body.expires_at);
    }).catch(function () { /* the node says "token expired" in time; then a retry */ });
  }

  function retry() {
    if (stopped) { return; }
    var wait = Math.min(LONGEST_WAIT_MS, FIRST_WAIT_MS * Math.pow(2, attempts));
    attempts += 1;
    window.setTimeout(connect, wait / 2 + Math.random() * wait / 2);
  }

  function onFrame(message) {
    var frame;
    try { frame = JSON.parse(message.data); } catch (e) { return; }
    var args = frame.args || [];
    switch (frame.event) {
      case "auth success":
        if (!live) {
          live = true;
          attempts = 0;
          mirror(false);
          list.textContent = "";  // the node sends its last lines again
          show("");
          list.setAttribute("data-console-live", "socket");
        }
        break;
      case "console output": append(String(args[0]), false); break;
      case "daemon message": append("[node] " + String(args[0]), true); break;
      case "status": list.setAttribute("data-console-state", String(args[0])); break;
      case "token expiring": refresh(); break;
      case "jwt error": case "error": case "throttled":
        show(frame.event + ": " + String(args[0] || "")); break;
      default: break;
    }
  }

  function connect() {
    session().then(function (body) {
      socket = new WebSocket(body.url);
      socket.onopen = function () { send("auth", [body.token]); scheduleRefresh(body.expires_at); };
      socket.onmessage = onFrame;
      socket.onclose = function (event) {
        var wasLive = live;
        live = false;
        socket = null;
        list.removeAttribute("data-console-live");
        window.clearTimeout(refreshTimer);
        if (FINAL[event.code]) {
          stopped = true;
          show(FINAL[event.code]);
          return;
        }
        mirror(true);
        show(wasLive ? "The connection to the node was lost; reconnecting." :
                       "The node cannot be reached; showing the last known output.");
        retry();
      };
    }).catch(function (error) {
      mirror(true);
      show("Live console unavailable (" + error.message + "); showing the last known output.");
      retry();
    });
  }

  if (form) {
    form.addEventListener("submit", function (event) {
      var input = form.querySelector("input[name=command]");
      if (!live || !input || !input.value.trim()) { return; }  // no socket: the form posts
      event.preventDefault();
      if (send("send command", [input.value])) { input.value = ""; }
    });
  }

  connect();
})();
