/* gpulab pages: draw Plotly charts and refresh live regions in place.

   Charts: every `.chart[data-figure]` holds a figure as JSON (built server-side with the
   plotly package) and is drawn with the plotly.js that package ships. Its modebar never
   offers Plotly's "Share chart" (an upload of the figure, names and GPU-hours included, to
   Plotly Cloud). The page gives the chart `role="img"` and its label for as long as it is
   empty; once drawn, the image is the plot's SVG, so the modebar's buttons sit beside the
   image rather than inside it (an image's content is hidden from screen readers, so
   buttons within it would be focusable yet unnamed).
   Auto-refresh: a page whose <main> has `data-refresh-seconds` re-fetches itself and swaps
   each `[data-refresh-id]` element for its fresh copy; a region the fresh page lacks is
   emptied (templates render every region, empty when it has nothing to say, so this only
   clears what is gone), except a chart, which keeps its last drawing. The reader keeps
   their place: scroll position is untouched, a region holding keyboard focus, a text
   selection or a form field the reader has changed is skipped (a form error the server
   re-shows with what was typed is rendered again by every refresh: the cluster page's
   drain); nothing happens while the tab is hidden, and a button pauses it. An open <details> stays open across a swap.
   What it says: the stamp shows when the page was last updated, in the lab's time zone
   (`data-time-zone` on <body>: the pages' times are the lab's, not the browser's). The
   `[data-refresh-status]` live region speaks only of changes worth hearing: an element
   marked `data-announce="Job #42"` whose text changed ("Job #42: Running."), a failing or
   recovered refresh, and the end of auto-refresh; never an ordinary tick.
   One refresh at a time: the next is scheduled only after the last one settled, so a slow
   server never gets a pile of requests; failures back off (doubling, up to 5 minutes). It
   stops for good when the session has ended (the fetch lands on the login page) and when
   the fresh page no longer asks to be refreshed (e.g. the job has finished). */
(function () {
  "use strict";

  // After the figure's own config, so no figure can turn the upload back on; without a
  // server URL the button, were it ever shown, would have nowhere to send the figure.
  var CHART_CONFIG = {
    showSendToCloud: false,
    showEditInChartStudio: false,
    showLink: false,
    plotlyServerURL: "",
    // Selecting points means nothing on these charts.
    modeBarButtonsToRemove: [
      "sendChartToCloud", "sendDataToCloud", "editInChartStudio", "select2d", "lasso2d",
    ],
  };

  function labelDrawnChart(element) {
    // Plotly draws the plot in the first SVG and legend, titles and hover labels in others:
    // the first becomes the labelled image, the rest (text a screen reader would read out
    // piecemeal) are hidden; the modebar's named buttons stay reachable outside the image.
    var svgs = element.querySelectorAll(".main-svg");
    if (!svgs.length) return;
    var label = element.dataset.label || "";
    element.removeAttribute("role");
    element.removeAttribute("aria-label");
    svgs.forEach(function (svg, index) {
      if (index === 0) {
        svg.setAttribute("role", "img");
        svg.setAttribute("aria-label", label);
        svg.removeAttribute("aria-hidden");
      } else {
        svg.setAttribute("aria-hidden", "true");
      }
    });
  }

  function drawChart(element) {
    if (!window.Plotly) return;
    var figure = JSON.parse(element.dataset.figure);
    var config = Object.assign(
      { responsive: true, displaylogo: false }, figure.config || {}, CHART_CONFIG
    );
    var drawn = window.Plotly.react(element, figure.data || [], figure.layout || {}, config);
    element.dataset.drawn = "true";
    Promise.resolve(drawn).then(function () {
      labelDrawnChart(element);
    });
  }

  function drawAll(root) {
    root.querySelectorAll(".chart[data-figure]").forEach(drawChart);
  }

  function selectChanged(select) {
    var options = select.options;
    if (select.multiple) {
      for (var i = 0; i < options.length; i += 1) {
        if (options[i].selected !== options[i].defaultSelected) return true;
      }
      return false;
    }
    // A drop-down with no `selected` option shows its first: that is its default, not an
    // edit (else the region would never refresh again). Of several, the last one wins, as
    // in the browser; a list box (size > 1) starts with none.
    var initial = select.size > 1 ? -1 : 0;
    for (var j = 0; j < options.length; j += 1) {
      if (options[j].defaultSelected) initial = j;
    }
    return options.length > 0 && select.selectedIndex !== initial;
  }

  function hasUnsavedInput(element) {
    var fields = element.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i += 1) {
      var field = fields[i];
      if (field.tagName === "SELECT") {
        if (selectChanged(field)) return true;
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

  function keepDetailsOpen(old, copy) {
    // The fresh copy has every <details> closed: one the reader opened stays open.
    var oldDetails = old.querySelectorAll("details");
    var copyDetails = copy.querySelectorAll("details");
    for (var i = 0; i < oldDetails.length && i < copyDetails.length; i += 1) {
      copyDetails[i].open = oldDetails[i].open;
    }
  }

  function swap(fresh) {
    document.querySelectorAll("[data-refresh-id]").forEach(function (old) {
      var copy = fresh.querySelector('[data-refresh-id="' + old.dataset.refreshId + '"]');
      if (readerIsIn(old)) return;
      if (!copy) {
        // Gone from the page (e.g. an idle warning lifted): nothing stale is left behind.
        // A chart keeps its last drawing; emptied, Plotly's own elements would go with it.
        if (!old.classList.contains("chart") && old.innerHTML !== "") old.innerHTML = "";
        return;
      }
      if (old.classList.contains("chart")) {
        if (copy.dataset.figure !== old.dataset.figure) {
          old.dataset.figure = copy.dataset.figure;
          drawChart(old);
        }
        return;
      }
      keepDetailsOpen(old, copy);
      if (copy.innerHTML !== old.innerHTML) {
        old.innerHTML = copy.innerHTML;
        drawAll(old);
      }
    });
  }

  function announced() {
    // label -> text of every element marked for announcing, e.g. "Job #42" -> "Running".
    var texts = {};
    document.querySelectorAll("[data-announce]").forEach(function (element) {
      texts[element.dataset.announce] = element.textContent.replace(/\s+/g, " ").trim();
    });
    return texts;
  }

  function changes(before, after) {
    var said = [];
    Object.keys(after).forEach(function (label) {
      if (label in before && before[label] !== after[label]) said.push(label + ": " + after[label] + ".");
    });
    return said;
  }

  function clockIn(zone) {
    // 24 h, in the lab's zone; a zone this browser does not know falls back to its own.
    var options = { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" };
    try {
      var format = new Intl.DateTimeFormat("en-GB", Object.assign({ timeZone: zone }, options));
      return function (date) { return format.format(date) + " " + zone; };
    } catch (error) {
      var local = new Intl.DateTimeFormat("en-GB", options);
      return function (date) { return local.format(date); };
    }
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
    var status = document.querySelector("[data-refresh-status]");
    var clock = clockIn(document.body.dataset.timeZone || "UTC");
    var failing = false;
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

    // The live region: written only when there is news, so a screen reader is not told
    // "updated" every ten seconds.
    function announce(parts) {
      if (status && parts.length) status.textContent = parts.join(" ");
    }

    // Said here, not in the page: without JavaScript nothing refreshes.
    say("Refreshes every " + seconds + " s.");

    function stop(text, spoken) {
      stopped = true;
      say(text);
      announce(spoken);
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
            stop("Session ended — reload to log in", ["Session ended; auto-refresh stopped. Reload to log in."]);
            return null;
          }
          if (!response.ok || response.redirected) throw new Error(String(response.status));
          return response.text();
        })
        .then(function (html) {
          if (html === null) return;
          var fresh = new DOMParser().parseFromString(html, "text/html");
          var before = announced();
          swap(fresh);
          var news = changes(before, announced());
          if (failing) news.unshift("Auto-refresh works again.");
          failing = false;
          delay = seconds;
          var time = clock(new Date());
          // The server leaves the attribute out once nothing will change (a finished job).
          var freshMain = fresh.querySelector("main");
          if (freshMain && freshMain.hasAttribute("data-refresh-seconds")) {
            say("Updated " + time);
            announce(news);
          } else {
            stop(
              "Updated " + time + "; no longer changing, auto-refresh stopped",
              news.concat(["This page no longer changes; auto-refresh stopped."])
            );
          }
        })
        .catch(function () {
          delay = Math.min(delay * 2, Math.max(seconds, MAX_RETRY_SECONDS));
          say("Refresh failed; retrying in " + Math.round(delay) + " s");
          // Said once when refreshing starts failing, not at every retry.
          if (!failing) announce(["Auto-refresh failed; retrying."]);
          failing = true;
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
