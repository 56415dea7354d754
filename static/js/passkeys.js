// Passkeys: registering one (Account -> Security) and signing in with one (the sign-in page
// and the second-factor step). The server sends WebAuthn options as JSON with base64url
// binary fields; the browser's answer goes back the same way, with the CSRF token.
(function () {
  "use strict";

  function toBytes(base64url) {
    var base64 = base64url.replace(/-/g, "+").replace(/_/g, "/");
    var padded = base64 + "===".slice((base64.length + 3) % 4);
    return Uint8Array.from(atob(padded), function (c) { return c.charCodeAt(0); });
  }

  function toBase64url(buffer) {
    var bytes = new Uint8Array(buffer);
    var text = "";
    for (var i = 0; i < bytes.length; i++) { text += String.fromCharCode(bytes[i]); }
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function csrfToken() {
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(body || {}),
    }).then(function (response) {
      return response.json().then(function (data) {
        if (!response.ok) { throw new Error(data.error || "The passkey was refused."); }
        return data;
      });
    });
  }

  function descriptors(list) {
    return (list || []).map(function (item) {
      return { type: item.type, id: toBytes(item.id), transports: item.transports };
    });
  }

  function credentialJSON(credential) {
    var response = credential.response;
    var json = {
      id: credential.id,
      rawId: toBase64url(credential.rawId),
      type: credential.type,
      clientExtensionResults: credential.getClientExtensionResults(),
      response: { clientDataJSON: toBase64url(response.clientDataJSON) },
    };
    if (credential.authenticatorAttachment) {
      json.authenticatorAttachment = credential.authenticatorAttachment;
    }
    if (response.attestationObject) {
      json.response.attestationObject = toBase64url(response.attestationObject);
      json.response.transports = response.getTransports ? response.getTransports() : [];
    } else {
      json.response.authenticatorData = toBase64url(response.authenticatorData);
      json.response.signature = toBase64url(response.signature);
      if (response.userHandle) { json.response.userHandle = toBase64url(response.userHandle); }
    }
    return json;
  }

  function showError(box, error) {
    var message = box.querySelector("#passkey-error");
    if (message) {
      message.textContent = error.message || String(error);
      message.hidden = false;
    }
  }

  function register(box) {
    var name = box.querySelector("#passkey-name");
    post(box.getAttribute("data-options-url")).then(function (data) {
      var options = data.options;
      options.challenge = toBytes(options.challenge);
      options.user.id = toBytes(options.user.id);
      options.excludeCredentials = descriptors(options.excludeCredentials);
      return navigator.credentials.create({ publicKey: options });
    }).then(function (credential) {
      return post(box.getAttribute("data-answer-url"), {
        name: name ? name.value : "",
        credential: credentialJSON(credential),
      });
    }).then(function (data) {
      window.location.assign(data.redirect);
    }).catch(function (error) { showError(box, error); });
  }

  function signIn(box) {
    post(box.getAttribute("data-options-url")).then(function (data) {
      var options = data.options;
      options.challenge = toBytes(options.challenge);
      options.allowCredentials = descriptors(options.allowCredentials);
      return navigator.credentials.get({ publicKey: options });
    }).then(function (credential) {
      return post(box.getAttribute("data-answer-url"), {
        credential: credentialJSON(credential),
        next: box.getAttribute("data-next") || "",
      });
    }).then(function (data) {
      window.location.assign(data.redirect);
    }).catch(function (error) { showError(box, error); });
  }

  var registerBox = document.querySelector("[data-passkey-register]");
  if (registerBox) {
    registerBox.querySelector("#passkey-register").addEventListener("click", function () {
      register(registerBox);
    });
  }
  var signInBox = document.querySelector("[data-passkey-sign-in]");
  if (signInBox) {
    signInBox.querySelector("#passkey-sign-in").addEventListener("click", function () {
      signIn(signInBox);
    });
  }
})();
