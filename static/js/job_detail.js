/* Job detail page: the log region.

   The page itself never reads the log (that is SSH to the node, which may hang for the SSH
   timeout): this loads it from the small `jobs:logs-fragment` endpoint after the page has
   rendered, switches between stdout and stderr, and re-reads it on the page's refresh
   period while the job runs. Like gpulab.js's refresh, it waits while the tab is hidden,
   while auto-refresh is paused, and while the reader has text selected in the log. It stops
   for good once the session has ended (a fetch lands on the login page) and says so. */
(function () {
  "use strict";

  function refreshPaused() {
    var toggle = document.querySelector("[data-refresh-toggle]");
    return Boolean(toggle && toggle.getAttribute("aria-pressed") === "true");
  }

  function selectionIn(element) {
    var selection = window.getSelection && window.getSelection();
    return Boolean(selection && !selection.isCollapsed && element.contains(selection.anchorNode));
  }

  function isLoginPage(url, loginPath) {
    try {
      return new URL(url, window.location.href).pathname === loginPath;
    } catch (error) {
      return false;
    }
  }

  function startLog(region) {
    var url = region.dataset.logsUrl;
    var loginPath = region.dataset.loginUrl || "/login/";
    var main = document.querySelector("main[data-refresh-seconds]");
    var seconds = main ? Number(main.dataset.refreshSeconds) : 0;
    var stream = "stdout";
    var loading = false;
    var finished = false;
    var ended = false; // the session has ended: no more fetches
    var timer = null;
    var retries = 0; // tries again of an unreadable log, on a page that does not poll

    function say(text) {
      var note = document.createElement("p");
      note.className = "error";
      note.textContent = text;
      var old = region.querySelector("p.error");
      if (old) old.remove();
      region.appendChild(note);
    }

    function show(html) {
      var oldLog = region.querySelector("pre.log");
      // Follow the tail (like tail -f) unless the reader scrolled up to read.
      var follow = !oldLog || oldLog.scrollTop + oldLog.clientHeight >= oldLog.scrollHeight - 8;
      var oldScroll = oldLog ? oldLog.scrollTop : 0;
      var active = document.activeElement;
      var focusedStream = active && region.contains(active) ? active.getAttribute("data-stream") : null;
      region.innerHTML = html;
      var log = region.querySelector("pre.log");
      if (log) log.scrollTop = follow ? log.scrollHeight : oldScroll;
      if (focusedStream) {
        var tab = region.querySelector('a[data-stream="' + focusedStream + '"]');
        if (tab) tab.focus();
      }
      if (region.querySelector("[data-log-final]")) finished = true;
      // An ended job's page does not poll: a log another viewer was reading, or a node
      // that did not answer, is tried again a few times rather than left as a notice.
      if (timer === null && region.querySelector("[data-log-retry]") && retries < 6) {
        retries += 1;
        window.setTimeout(function () {
          load(false);
        }, 5000);
      }
    }

    function load(byReader) {
      if (loading || ended) return; // a slow node: never stack requests
      if (!byReader && (document.hidden || refreshPaused() || selectionIn(region))) return;
      loading = true;
      fetch(url + "?stream=" + encodeURIComponent(stream), {
        credentials: "same-origin",
        headers: { "X-Refresh": "1" },
      })
        .then(function (response) {
          // fetch follows redirects: an ended session arrives as the login page, with a 200.
          if (response.redirected && isLoginPage(response.url, loginPath)) return null;
          if (!response.ok || response.redirected) throw new Error(String(response.status));
          return response.text();
        })
        .then(function (html) {
          if (html !== null) {
            show(html);
            return;
          }
          ended = true;
          if (timer !== null) window.clearInterval(timer);
          say("Your session has ended: reload the page to log in and see the log.");
        })
        .catch(function () {
          say("The log could not be loaded just now.");
        })
        .then(function () {
          loading = false;
        });
    }

    region.addEventListener("click", function (event) {
      var link = event.target.closest("a[data-stream]");
      // Once the session has ended the tab is followed as a plain link (to the login page).
      if (!link || !region.contains(link) || ended) return;
      event.preventDefault();
      stream = link.dataset.stream;
      load(true);
    });
    load(true);
    if (seconds > 0) {
      timer = window.setInterval(function () {
        if (!finished) load(false);
      }, seconds * 1000);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-logs-url]").forEach(startLog);
  });
})();
