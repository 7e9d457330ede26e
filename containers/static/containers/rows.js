// Rows of the template form (env, volumes; containers/admin_fields.py RowsWidget): add a
// row and remove one in place. Without this file the form still works: the server draws
// spare empty rows, and a row left empty is dropped on save.
(function () {
  "use strict";

  function empty(row) {
    return Array.from(row.querySelectorAll("input")).every((input) => input.value.trim() === "");
  }

  function setup(field) {
    const body = field.querySelector("table.gb-rows tbody");
    const blank = field.querySelector("template.gb-rows-blank");
    const add = field.querySelector(".gb-rows-add");
    if (!body || !blank || !add) return;

    function wire(row) {
      const remove = row.querySelector(".gb-rows-remove");
      remove.hidden = false;
      remove.addEventListener("click", () => {
        row.remove();
        if (!body.rows.length) append();
      });
    }

    function append() {
      const row = blank.content.firstElementChild.cloneNode(true);
      body.appendChild(row);
      wire(row);
      return row;
    }

    // One empty row to type into is enough once rows can be added.
    const rows = Array.from(body.rows);
    rows.filter(empty).slice(rows.some((row) => !empty(row)) ? 0 : 1).forEach((row) => row.remove());
    Array.from(body.rows).forEach(wire);
    if (!body.rows.length) append();
    add.hidden = false;
    add.addEventListener("click", () => {
      const row = append();
      row.querySelector("input").focus();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll(".gb-rows-field").forEach(setup);
  });
})();
