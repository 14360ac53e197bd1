// Sign-up form: validates, stores users in localStorage("users"), shows a status line.
const $ = (id) => document.getElementById(id);
function users() { return JSON.parse(localStorage.getItem("users") || "[]"); }
function render() {
  $("users").replaceChildren(...users().map((u) => {
    const li = document.createElement("li");
    li.textContent = `${u.name} <${u.email}> - ${u.planLabel}`;
    return li;
  }));
}
function fail(msg) { $("status").textContent = "Error: " + msg; $("status").className = "error"; }
$("signup").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const name = $("name").value.trim(), email = $("email").value.trim();
  if (!name) return fail("enter your full name");
  if (!/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(email)) return fail("enter a valid email");
  if ($("password").value.length < 8) return fail("the password needs 8 characters or more");
  if (!$("terms").checked) return fail("accept the terms of service");
  if (users().some((u) => u.email === email)) return fail("this email is already registered");
  const plan = $("plan");
  const user = { name, email, plan: plan.value, planLabel: plan.selectedOptions[0].label,
                 country: $("country").value, newsletter: $("newsletter").checked };
  localStorage.setItem("users", JSON.stringify([...users(), user]));
  $("status").textContent = `Registered: ${name} (${user.planLabel})`;
  $("status").className = "";
  $("signup").reset();
  render();
});
render();
