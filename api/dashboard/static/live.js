/* Live progress for the dashboard: while a region says it is busy, poll its
 * JSON endpoint ({html, busy, at, outcome}) and replace the region's content in
 * place; once nothing runs, poll a few more times (a job's last task events may
 * arrive just after its end) and stop.  The message that a job started
 * ([data-live-flash]) gives way to how it ended (outcome) or goes.  Times are
 * the server's, in the pages' one format (``at``): never the browser's clock.
 * No framework, nothing loaded from elsewhere. */
(function () {
  "use strict";
  var PERIOD = 1500;
  var SETTLE = 2;  /* polls after the end */

  function note(text) {
    var target = document.querySelector("[data-live-note]");
    if (target) { target.textContent = text; }
  }

  function settle(outcome) {
    var message = document.querySelector("[data-live-flash]");
    if (!message) { return; }
    if (outcome && outcome.text) {
      message.textContent = outcome.text;
      message.className = "flash flash-" + (outcome.level === "ok" ? "ok" : "error");
      message.removeAttribute("data-live-flash");
    } else {
      message.parentNode.removeChild(message);
    }
  }

  function follow(region) {
    var url = region.getAttribute("data-live-url");
    var failures = 0;
    var settling = SETTLE;

    function schedule(delay) { window.setTimeout(poll, delay); }

    function show(data) {
      region.innerHTML = data.html;
      region.setAttribute("data-busy", data.busy ? "true" : "false");
      var time = data.at || "";
      if (data.busy) {
        settling = SETTLE;
        note("Live: updated at " + time);
        schedule(PERIOD);
        return;
      }
      settle(data.outcome);
      if (settling > 0) {
        settling -= 1;
        note("Finished; updated at " + time);
        schedule(PERIOD);
      } else {
        note("Up to date at " + time);
      }
    }

    function poll() {
      fetch(url, { credentials: "same-origin", cache: "no-store",
                   headers: { "Accept": "application/json" } })
        .then(function (response) {
          if (response.status === 404) {
            region.setAttribute("data-busy", "false");
            note(region.getAttribute("data-gone") || "Gone.");
            region.classList.add("gone");
            return null;
          }
          if (response.status === 401) {
            note("Your login has expired: reload the page to log in again.");
            return null;
          }
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (data) {
          failures = 0;
          if (data) { show(data); }
        })
        .catch(function () {
          failures += 1;
          note("Cannot reach the server; retrying…");
          schedule(Math.min(PERIOD * (failures + 1), 15000));
        });
    }

    note("Live: following progress…");
    schedule(PERIOD);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var regions = document.querySelectorAll("[data-live-url]");
    for (var i = 0; i < regions.length; i += 1) {
      if (regions[i].getAttribute("data-busy") === "true") { follow(regions[i]); }
    }
  });
}());
