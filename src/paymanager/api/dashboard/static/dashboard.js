// Live updates by polling, served from the package (no CDN; no library needed for this much).
// An element with data-refresh-ms is refreshed that often: with data-refresh, its HTML is replaced
// by that URL's answer (a fragment); without, the page itself is fetched again and the element is
// replaced by the one with the same id in the answer. A failed fetch keeps what is shown.
document.querySelectorAll("[data-refresh-ms]").forEach(function (el) {
  var every = parseInt(el.getAttribute("data-refresh-ms") || "5000", 10);
  var fragment = el.getAttribute("data-refresh");
  setInterval(function () {
    fetch(fragment || window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        if (fragment) { el.innerHTML = html; return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(el.id);
        if (fresh) { el.innerHTML = fresh.innerHTML; }
      })
      .catch(function () {});
  }, every);
});
