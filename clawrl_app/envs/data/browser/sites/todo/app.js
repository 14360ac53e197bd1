// A todo list kept in localStorage("todos"): add, complete, delete, filter, clear.
const $ = (id) => document.getElementById(id);
const SEED = [
  { id: 1, title: "Buy milk", done: false },
  { id: 2, title: "Call the bank", done: false },
  { id: 3, title: "Water the plants", done: true },
];
if (localStorage.getItem("todos") === null) localStorage.setItem("todos", JSON.stringify(SEED));
const todos = () => JSON.parse(localStorage.getItem("todos"));
const save = (t) => { localStorage.setItem("todos", JSON.stringify(t)); render(); };
const filter = () => (location.hash.replace(/^#\/?/, "") || "all");
function render() {
  const f = filter();
  const shown = todos().filter((t) => f === "all" || (f === "active" ? !t.done : t.done));
  $("list").replaceChildren(...shown.map((t) => {
    const li = document.createElement("li");
    li.className = t.done ? "done" : "";
    li.dataset.id = t.id;
    const box = document.createElement("input");
    box.type = "checkbox"; box.checked = t.done; box.id = "todo-" + t.id;
    box.addEventListener("change", () => save(todos().map((x) => x.id === t.id ? { ...x, done: box.checked } : x)));
    const label = document.createElement("label");
    label.htmlFor = box.id; label.textContent = t.title;
    const del = document.createElement("button");
    del.textContent = "Delete"; del.className = "delete"; del.setAttribute("aria-label", "Delete " + t.title);
    del.addEventListener("click", () => save(todos().filter((x) => x.id !== t.id)));
    li.append(box, " ", label, " ", del);
    return li;
  }));
  const left = todos().filter((t) => !t.done).length;
  $("left").textContent = left + (left === 1 ? " item left" : " items left");
  for (const a of document.querySelectorAll("nav a")) a.className = a.id === "show-" + f ? "current" : "";
}
$("add-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const title = $("new-todo").value.trim();
  if (!title) return;
  const t = todos();
  save([...t, { id: Math.max(0, ...t.map((x) => x.id)) + 1, title, done: false }]);
  $("new-todo").value = "";
});
$("clear").addEventListener("click", () => save(todos().filter((t) => !t.done)));
window.addEventListener("hashchange", render);
render();
