// Live updates by polling: an element with data-refresh has its HTML replaced by that URL's answer
// every data-refresh-ms. Served from the package (no CDN); no library needed for this much.
document.querySelectorAll("[data-refresh]").forEach(function (el) {
  var every = parseInt(el.getAttribute("data-refresh-ms") || "5000", 10);
  setInterval(function () {
    fetch(el.getAttribute("data-refresh"), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) { el.innerHTML = html; } })
      .catch(function () {});
  }, every);
});
