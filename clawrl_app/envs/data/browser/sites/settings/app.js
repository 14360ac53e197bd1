// Settings with tabs: changes apply to localStorage("settings") only when saved.
const $ = (id) => document.getElementById(id);
const DEFAULTS = { dark: false, font: "medium", emailNotif: true, smsNotif: false,
                   autoUpdate: true, displayName: "user", lang: "en" };
const FIELDS = { dark: "dark", font: "font", emailNotif: "email-notif", smsNotif: "sms-notif",
                 autoUpdate: "auto-update", displayName: "display-name", lang: "lang" };
function load(values) {
  for (const [key, id] of Object.entries(FIELDS)) {
    const el = $(id);
    if (el.type === "checkbox") el.checked = values[key]; else el.value = values[key];
  }
  document.body.style.background = values.dark ? "#222" : "";
  document.body.style.color = values.dark ? "#eee" : "";
}
function read() {
  const out = {};
  for (const [key, id] of Object.entries(FIELDS)) {
    const el = $(id);
    out[key] = el.type === "checkbox" ? el.checked : el.value;
  }
  return out;
}
for (const tab of document.querySelectorAll("[role=tab]")) {
  tab.addEventListener("click", () => {
    for (const t of document.querySelectorAll("[role=tab]")) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      $(t.dataset.panel).hidden = !on;
    }
  });
}
document.addEventListener("change", () => { $("status").textContent = "Unsaved changes"; });
$("save").addEventListener("click", () => {
  const s = read();
  if (!s.displayName.trim()) { $("status").textContent = "Error: the display name is empty"; return; }
  localStorage.setItem("settings", JSON.stringify(s));
  load(s);
  $("status").textContent = "Settings saved";
});
$("defaults").addEventListener("click", () => { load(DEFAULTS); $("status").textContent = "Defaults restored (not saved yet)"; });
$("delete").addEventListener("click", () => {
  if (confirm("Really delete your account?")) {
    localStorage.setItem("deleted", "true");
    $("status").textContent = "Account deleted";
  } else {
    $("status").textContent = "Account not deleted";
  }
});
load({ ...DEFAULTS, ...JSON.parse(localStorage.getItem("settings") || "{}") });
