/* Live instance list and page, updated in place without a reload. The list polls live/
   every 2 s (one cheap JSON answer for the rows shown); the page opens one stream of
   server-sent events (<id>/stream/: its state, its output) that holds no server thread.
   Served by gobrave, no CDN. */
(function () {
  "use strict";
  var EVERY_MS = 2000;
  var match = window.location.pathname.match(/^(.*\/containerinstance\/)/);
  if (!match) { return; }
  var liveUrl = match[1] + "live/";
  var drawn = {};  // id -> the status html last drawn

  function ids() {
    var seen = {};
    document.querySelectorAll(".gb-status[data-id]").forEach(function (el) {
      seen[el.dataset.id] = true;
    });
    return Object.keys(seen);
  }

  function setHtml(el, html) { if (el && el.innerHTML !== html) { el.innerHTML = html; } }

  function applyRow(id, item) {
    document.querySelectorAll('.gb-status[data-id="' + id + '"]').forEach(function (cell) {
      var row = cell.closest("tr");
      if (item === null) {
        if (row) { row.classList.add("gb-gone"); }
        cell.dataset.gone = "1";
        return;
      }
      if (drawn[id] !== item.status_html) {
        var holder = document.createElement("span");
        holder.innerHTML = item.status_html;
        cell.replaceWith(holder.firstElementChild);
      }
      if (row) { setHtml(row.querySelector("td.field-changed"), item.changed_html); }
    });
  }

  function applyDetail(item) {
    var box = document.getElementById("gb-live-detail");
    if (!box) { return; }
    if (item === null) { box.dataset.gone = "1"; return; }
    box.dataset.status = item.status;
    Object.keys(item.fields).forEach(function (name) {
      var el = document.querySelector(".field-" + name + " .readonly");
      if (el && el.textContent !== item.fields[name]) { el.textContent = item.fields[name]; }
    });
    Object.keys(item.fields_html).forEach(function (name) {
      setHtml(document.querySelector(".field-" + name + " .readonly"), item.fields_html[name]);
    });
    Object.keys(item.offered).forEach(function (verb) {
      var button = document.getElementById("gb-" + verb);
      if (button) { button.hidden = !item.offered[verb]; }
    });
    setHtml(document.getElementById("gb-events"), item.events_html);
  }

  // --- the page: one stream of server-sent events (its state and its output) ---------
  var LOG_KEEP = 200000;  // characters kept on the page

  function appendLog(text, reset) {
    var pre = document.getElementById("gb-log-text");
    if (!pre) { return; }
    var problem = document.querySelector("#gb-logs .gb-logs-problem");
    var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = ((reset ? "" : pre.textContent) + text).slice(-LOG_KEEP);
    pre.hidden = false;
    if (problem) { problem.hidden = true; }
    if (atBottom) { pre.scrollTop = pre.scrollHeight; }
  }

  function streamPage(box) {
    var stateNote = document.getElementById("gb-log-state");
    var source = new EventSource(box.dataset.streamUrl);
    source.addEventListener("open", function () {
      document.documentElement.dataset.gbStream = "open";
      if (stateNote) { stateNote.textContent = "(live)"; }
    });
    source.addEventListener("state", function (e) {
      var item = JSON.parse(e.data);
      applyRow(box.dataset.id, item);
      if (item) { drawn[box.dataset.id] = item.status_html; }
      applyDetail(item);
      document.documentElement.dataset.gbLiveAt = String(Date.now());
    });
    source.addEventListener("log", function (e) {
      var part = JSON.parse(e.data);
      appendLog(part.text, part.reset);
    });
    source.addEventListener("problem", function (e) {
      var problem = document.querySelector("#gb-logs .gb-logs-problem");
      if (problem) { problem.textContent = JSON.parse(e.data).text; problem.hidden = false; }
    });
    source.addEventListener("end", function (e) {
      // The server ended it (time limit, access, the instance gone): no reconnect.
      source.close();
      var reason = JSON.parse(e.data).reason;
      document.documentElement.dataset.gbStream = "ended";
      if (stateNote) { stateNote.textContent = reason ? "(live updates ended: " + reason + ")" : ""; }
    });
    source.addEventListener("error", function () {
      // EventSource reconnects by itself; a refusal (429, 403) closes it for good.
      if (source.readyState === EventSource.CLOSED && stateNote) {
        stateNote.textContent = "(live updates unavailable; reload the page)";
      }
    });
  }

  function poll() {
    var wanted = ids();
    if (!wanted.length) { return setTimeout(poll, EVERY_MS); }
    var detail = document.getElementById("gb-live-detail") ? "&detail=1" : "";
    var query = wanted.map(function (id) { return "id=" + encodeURIComponent(id); }).join("&");
    fetch(liveUrl + "?" + query + detail, {credentials: "same-origin",
                                          headers: {"Accept": "application/json"}})
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (body) {
        Object.keys(body.instances).forEach(function (id) {
          applyRow(id, body.instances[id]);
          if (body.instances[id]) { drawn[id] = body.instances[id].status_html; }
          if (document.getElementById("gb-live-detail")) { applyDetail(body.instances[id]); }
        });
        document.documentElement.dataset.gbLiveAt = String(Date.now());
      })
      .catch(function () { /* the next poll tries again */ })
      .finally(function () { setTimeout(poll, EVERY_MS); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("gb-live-detail");
    if (box && box.dataset.streamUrl && window.EventSource) {
      streamPage(box);  // the page: its stream; the list below it (if any) is not polled
      return;
    }
    setTimeout(poll, EVERY_MS);
  });
})();
