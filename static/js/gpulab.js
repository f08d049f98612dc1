/* gpulab pages: draw Plotly charts and refresh live regions in place.

   Charts: every `.chart[data-figure]` holds a figure as JSON (built server-side with the
   plotly package) and is drawn with the plotly.js that package ships.
   Auto-refresh: a page whose <main> has `data-refresh-seconds` re-fetches itself and swaps
   each `[data-refresh-id]` element for its fresh copy. The reader keeps their place: scroll
   position is untouched, a region holding keyboard focus, a text selection or a form field
   the reader has typed into is skipped,
   nothing happens while the tab is hidden, and a button pauses it. */
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

  function startRefresh(main) {
    var seconds = Number(main.dataset.refreshSeconds);
    if (!(seconds > 0)) return;
    var paused = false;
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
    window.setInterval(function () {
      if (paused || document.hidden) return;
      fetch(window.location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } })
        .then(function (response) {
          if (!response.ok) throw new Error(response.status);
          return response.text();
        })
        .then(function (html) {
          swap(new DOMParser().parseFromString(html, "text/html"));
          if (stamp) stamp.textContent = "Updated " + new Date().toLocaleTimeString();
        })
        .catch(function () {
          if (stamp) stamp.textContent = "Refresh failed; retrying";
        });
    }, seconds * 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawAll(document);
    var main = document.querySelector("main[data-refresh-seconds]");
    if (main) startRefresh(main);
  });
})();
