/* gpulab pages: draw Plotly charts and refresh live regions in place.

   Charts: every `.chart[data-figure]` holds a figure as JSON (built server-side with the
   plotly package) and is drawn with the plotly.js that package ships.
   Auto-refresh: a page whose <main> has `data-refresh-seconds` re-fetches itself and swaps
   each `[data-refresh-id]` element for its fresh copy. The reader keeps their place: scroll
   position is untouched, a region holding keyboard focus, a text selection or a form field
   the reader has typed into is skipped,
   nothing happens while the tab is hidden, and a button pauses it.
   One refresh at a time: the next is scheduled only after the last one settled, so a slow
   server never gets a pile of requests; failures back off (doubling, up to 5 minutes). It
   stops for good when the session has ended (the fetch lands on the login page) and when
   the fresh page no longer asks to be refreshed (e.g. the job has finished). */
(function () {
  "use strict";

  function drawChart(element) {
    if (!window.Plotly) return;
    var figure = JSON.parse(element.dataset.figure);
    var config = Object.assign({ responsive: true, displaylogo: false }, figure.config || {});
    window.Plotly.react(element, figure.data || [], figure.layout || {}, config);
    element.dataset.drawn = "true";
  }

  function drawAll(root) {
    root.querySelectorAll(".chart[data-figure]").forEach(drawChart);
  }

  function hasUnsavedInput(element) {
    var fields = element.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i += 1) {
      var field = fields[i];
      if (field.tagName === "SELECT") {
        for (var j = 0; j < field.options.length; j += 1) {
          if (field.options[j].selected !== field.options[j].defaultSelected) return true;
        }
      } else if (field.type === "checkbox" || field.type === "radio") {
        if (field.checked !== field.defaultChecked) return true;
      } else if (field.type !== "hidden" && field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function readerIsIn(element) {
    // Typing a drain reason, then clicking elsewhere, must not lose the text.
    if (hasUnsavedInput(element)) return true;
    var active = document.activeElement;
    if (active && active !== document.body && element.contains(active)) return true;
    var selection = window.getSelection && window.getSelection();
    return Boolean(selection && !selection.isCollapsed && element.contains(selection.anchorNode));
  }

  function swap(fresh) {
    document.querySelectorAll("[data-refresh-id]").forEach(function (old) {
      var copy = fresh.querySelector('[data-refresh-id="' + old.dataset.refreshId + '"]');
      if (!copy || readerIsIn(old)) return;
      if (old.classList.contains("chart")) {
        if (copy.dataset.figure !== old.dataset.figure) {
          old.dataset.figure = copy.dataset.figure;
          drawChart(old);
        }
      } else if (copy.innerHTML !== old.innerHTML) {
        old.innerHTML = copy.innerHTML;
        drawAll(old);
      }
    });
  }

  var MAX_RETRY_SECONDS = 300;

  function isLoginPage(url, loginPath) {
    try {
      return new URL(url, window.location.href).pathname === loginPath;
    } catch (error) {
      return false;
    }
  }

  function startRefresh(main) {
    var seconds = Number(main.dataset.refreshSeconds);
    if (!(seconds > 0)) return;
    var delay = seconds;
    var paused = false;
    var stopped = false;
    var loginPath = main.dataset.loginUrl || "/login/";
    var toggle = document.querySelector("[data-refresh-toggle]");
    var stamp = document.querySelector("[data-refresh-stamp]");
    if (toggle) {
      toggle.hidden = false;
      toggle.addEventListener("click", function () {
        paused = !paused;
        toggle.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
        toggle.setAttribute("aria-pressed", paused ? "true" : "false");
      });
    }

    function say(text) {
      if (stamp) stamp.textContent = text;
    }

    // Said here, not in the page: without JavaScript nothing refreshes.
    say("Refreshes every " + seconds + " s.");

    function stop(text) {
      stopped = true;
      say(text);
      if (toggle) toggle.hidden = true;
    }

    function schedule() {
      if (!stopped) window.setTimeout(tick, delay * 1000);
    }

    function tick() {
      if (paused || document.hidden) {
        schedule();
        return;
      }
      fetch(window.location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } })
        .then(function (response) {
          // fetch follows redirects: an ended session arrives as the login page, with a 200.
          if (response.redirected && isLoginPage(response.url, loginPath)) {
            stop("Session ended — reload to log in");
            return null;
          }
          if (!response.ok || response.redirected) throw new Error(String(response.status));
          return response.text();
        })
        .then(function (html) {
          if (html === null) return;
          var fresh = new DOMParser().parseFromString(html, "text/html");
          swap(fresh);
          delay = seconds;
          var time = new Date().toLocaleTimeString();
          // The server leaves the attribute out once nothing will change (a finished job).
          var freshMain = fresh.querySelector("main");
          if (freshMain && freshMain.hasAttribute("data-refresh-seconds")) {
            say("Updated " + time);
          } else {
            stop("Updated " + time + "; no longer changing, auto-refresh stopped");
          }
        })
        .catch(function () {
          delay = Math.min(delay * 2, Math.max(seconds, MAX_RETRY_SECONDS));
          say("Refresh failed; retrying in " + Math.round(delay) + " s");
        })
        .then(schedule);
    }

    schedule();
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawAll(document);
    var main = document.querySelector("main[data-refresh-seconds]");
    if (main) startRefresh(main);
  });
})();
