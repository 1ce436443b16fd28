import { page, html } from "/_stickyd/client.mjs";

const $ = (id) => document.getElementById(id);
const board = page({ kind: "board", onStatus: (s) => ($("status").textContent = s) });
const shown = (t) => t.title.toLowerCase().includes((board.tree.filter || "").toLowerCase());

board.bind($("me"), "me", (me) => me || "nobody");
// The list draws again when the tasks or this tab's filter change.
board.bind($("tasks"), "", () => {
  const ul = html`<ul></ul>`;
  for (const [id, t] of Object.entries(board.tree.tasks || {}).filter(([, t]) => shown(t))) {
    const li = html`<li class="${t.done ? "done" : ""}"><input type="checkbox"> <span>${t.title}</span> <small>${t.by}</small></li>`;
    li.querySelector("input").checked = t.done;
    li.querySelector("input").onchange = () => board.send({ op: "toggle", id });
    ul.append(li);
  }
  return ul;
});
// The draft and the filter are the tab's own: kept in its tree, they come
// back after a reload, a move or a restart.
for (const name of ["draft", "filter"]) {
  board.bind($(name), name, (v, el) => { if (document.activeElement !== el) el.value = v || ""; });
  $(name).oninput = () => board.send({ op: name, text: $(name).value });
}
$("add").onsubmit = (e) => {
  e.preventDefault();
  board.send({ op: "add", text: $("draft").value }).catch((err) => alert(err.message));
};
