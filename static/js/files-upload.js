// The file manager's upload: a single-use link from the panel, then the files posted straight
// to the server's node (no file passes through the panel), then the folder shown again.
"use strict";
(function () {
  const form = document.querySelector("[data-upload]");
  if (!form) return;
  const status = form.querySelector("[data-upload-status]");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = form.querySelector("input[type=file]").files;
    if (!chosen.length) return;
    status.textContent = "Uploading…";
    const ask = new FormData();
    ask.append("path", form.querySelector("input[name=path]").value);
    ask.append("csrfmiddlewaretoken", form.querySelector("input[name=csrfmiddlewaretoken]").value);
    try {
      const answer = await fetch(form.dataset.linkUrl, { method: "POST", body: ask, credentials: "same-origin" });
      const link = await answer.json();
      if (!answer.ok) throw new Error(link.error || "no upload link");
      const files = new FormData();
      for (const file of chosen) files.append("files", file, file.name);
      const sent = await fetch(link.url, { method: "POST", body: files }).catch((error) => {
        throw new Error(`the server's node (${new URL(link.url).host}) was not reached: ${error.message}`);
      });
      if (!sent.ok) {
        const refusal = await sent.json().catch(() => ({}));
        throw new Error((refusal.error && refusal.error.message) || `the node answered ${sent.status}`);
      }
      status.textContent = "Uploaded.";
      window.location.reload();
    } catch (error) {
      status.textContent = `Upload failed: ${error.message}`;
    }
  });
})();
