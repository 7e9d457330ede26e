/* Live instance list and page: polls live/ and updates status, reason, times, the
   buttons and the history in place, without a reload. Served by gobrave, no CDN. */
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
    followLogs(item.status);
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

  // --- the page follows the container's output while it runs -------------------------
  var LOG_KEEP = 200000;  // characters kept on the page
  var following = false;

  function followLogs(status) {
    var pre = document.getElementById("gb-log-text");
    if (!pre || following || ["running", "paused", "stop_pending"].indexOf(status) < 0) {
      return;
    }
    if (!window.fetch || !window.ReadableStream) { return; }
    following = true;
    var stateNote = document.getElementById("gb-log-state");
    var problem = document.querySelector("#gb-logs .gb-logs-problem");
    var decoder = new TextDecoder();
    var first = true;
    pre.dataset.following = "1";
    if (stateNote) { stateNote.textContent = "(following)"; }
    fetch(pre.dataset.followUrl, {credentials: "same-origin"})
      .then(function (r) {
        if (!r.ok) { throw new Error(r.status); }
        var reader = r.body.getReader();
        function read() {
          return reader.read().then(function (part) {
            if (part.done) { return; }
            var text = decoder.decode(part.value, {stream: true});
            if (first) { pre.textContent = ""; first = false; }
            var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
            pre.textContent = (pre.textContent + text).slice(-LOG_KEEP);
            pre.hidden = false;
            if (problem) { problem.hidden = true; }
            if (atBottom) { pre.scrollTop = pre.scrollHeight; }
            return read();
          });
        }
        return read();
      })
      .catch(function () { /* followed again at the next poll */ })
      .finally(function () {
        following = false;
        delete pre.dataset.following;
        if (stateNote) { stateNote.textContent = ""; }
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
    var badge = document.querySelector("#gb-live-detail") &&
                document.querySelector(".field-status_display .gb-badge");
    if (badge) { followLogs(badge.textContent.trim()); }
    setTimeout(poll, EVERY_MS);
  });
})();
