// "Copy" buttons for a value shown once (a new API key, a new signing secret).
// <button hidden data-copy-target="ID" data-copy-status="ID" data-copy-what="the key">Copy</button>
// The button is rendered hidden and shown only once its click does something: without
// JavaScript or a clipboard, or before this file has run, there is no dead button to press.
// Served as a file, so the panel's Content-Security-Policy needs no inline script.
(function () {
  document.querySelectorAll("button[data-copy-target]").forEach(function (button) {
    var target = document.getElementById(button.dataset.copyTarget);
    var status = document.getElementById(button.dataset.copyStatus);
    var what = button.dataset.copyWhat || "the value";
    if (!navigator.clipboard || !target) { return; }
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(target.textContent.trim()).then(
        function () { status.textContent = "Copied to the clipboard."; button.textContent = "Copied"; },
        function () { status.textContent = "Copying failed: select " + what + " and copy it by hand."; }
      );
    });
    button.hidden = false;
  });
})();
