// Filterable, sortable staff table; each row links to its detail page.
const $ = (id) => document.getElementById(id);
let sortKey = null, sortDir = 1;
function render() {
  const q = $("filter").value.trim().toLowerCase(), dept = $("dept").value;
  let rows = STAFF.filter((p) => (!dept || p.dept === dept) &&
    (!q || [p.name, p.role, p.city].some((v) => v.toLowerCase().includes(q))));
  if (sortKey) rows = [...rows].sort((a, b) => (a[sortKey] > b[sortKey] ? 1 : a[sortKey] < b[sortKey] ? -1 : 0) * sortDir);
  $("rows").replaceChildren(...rows.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.id = p.id;
    for (const [cls, v] of [["name", p.name], ["dept", p.dept], ["role", p.role],
                            ["salary", "$" + p.salary.toLocaleString("en-US")], ["city", p.city]]) {
      const td = document.createElement("td"); td.className = cls; td.textContent = v; tr.append(td);
    }
    const td = document.createElement("td"), a = document.createElement("a");
    a.href = "detail.html?id=" + p.id; a.textContent = "Open"; a.setAttribute("aria-label", "Open " + p.name);
    td.append(a); tr.append(td);
    return tr;
  }));
  $("count").textContent = rows.length + " of " + STAFF.length + " people";
  $("sort-name").textContent = "Name" + (sortKey === "name" ? (sortDir > 0 ? " ▲" : " ▼") : "");
  $("sort-salary").textContent = "Salary" + (sortKey === "salary" ? (sortDir > 0 ? " ▲" : " ▼") : "");
}
function sortBy(key) {
  if (sortKey === key) sortDir = -sortDir; else { sortKey = key; sortDir = 1; }
  render();
}
$("sort-name").addEventListener("click", () => sortBy("name"));
$("sort-salary").addEventListener("click", () => sortBy("salary"));
$("filter").addEventListener("input", render);
$("dept").addEventListener("change", render);
render();
