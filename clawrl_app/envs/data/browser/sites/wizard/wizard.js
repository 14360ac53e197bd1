// A four-step booking wizard; the draft lives in localStorage("draft") between pages,
// confirmed bookings in localStorage("bookings").
const $ = (id) => document.getElementById(id);
const DEST = { paris: "Paris", rome: "Rome", oslo: "Oslo", kyoto: "Kyoto" };
const draft = () => JSON.parse(localStorage.getItem("draft") || "{}");
const saveDraft = (d) => localStorage.setItem("draft", JSON.stringify({ ...draft(), ...d }));
const bookings = () => JSON.parse(localStorage.getItem("bookings") || "[]");
const page = location.pathname.split("/").pop() || "index.html";

const READ = {
  "trip.html": () => {
    const dest = $("dest").value;
    if (!dest) return "choose a destination";
    return { type: document.querySelector("input[name=type]:checked").value, dest };
  },
  "details.html": () => {
    const n = parseInt($("travellers").value, 10);
    if (!(n >= 1 && n <= 6)) return "travellers must be between 1 and 6";
    if (!$("date").value) return "choose a departure date";
    return { travellers: n, date: $("date").value, cls: $("cls").value };
  },
  "extras.html": () => ({ extras: ["baggage", "insurance", "window"].filter((x) => $(x).checked) }),
};
const FILL = {
  "trip.html": (d) => { if (d.type) $("type-" + d.type).checked = true; if (d.dest) $("dest").value = d.dest; },
  "details.html": (d) => { if (d.travellers) $("travellers").value = d.travellers;
                           if (d.date) $("date").value = d.date; if (d.cls) $("cls").value = d.cls; },
  "extras.html": (d) => { for (const x of d.extras || []) $(x).checked = true; },
};

if (page === "trip.html" && !sessionStorage.getItem("started")) {
  localStorage.removeItem("draft");  // a new booking starts empty
  sessionStorage.setItem("started", "1");
}
if (FILL[page]) FILL[page](draft());
const form = $("step");
if (form) {
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const got = READ[page]();
    if (typeof got === "string") { $("error").textContent = "Error: " + got; return; }
    saveDraft(got);
    location.href = form.dataset.next;
  });
}
const back = $("back");
if (back) back.addEventListener("click", () => {
  if (form && READ[page]) { const got = READ[page](); if (typeof got !== "string") saveDraft(got); }
  location.href = back.dataset.back || form.dataset.back;
});
if (page === "review.html") {
  const d = draft();
  const lines = [
    "Trip: " + (d.type === "oneway" ? "One way" : "Return") + " to " + (DEST[d.dest] || "?"),
    "Travellers: " + d.travellers, "Departure: " + d.date,
    "Class: " + (d.cls === "business" ? "Business" : "Economy"),
    "Extras: " + ((d.extras || []).join(", ") || "none"),
  ];
  $("summary").replaceChildren(...lines.map((t) => { const li = document.createElement("li"); li.textContent = t; return li; }));
  $("confirm").addEventListener("click", () => {
    if (!d.dest || !d.travellers) { $("error").textContent = "Error: the booking is incomplete"; return; }
    const ref = "SKY-" + (1001 + bookings().length);
    localStorage.setItem("bookings", JSON.stringify([...bookings(), { ...d, ref }]));
    localStorage.removeItem("draft");
    sessionStorage.removeItem("started");
    location.href = "done.html?ref=" + ref;
  });
}
if (page === "done.html") {
  const ref = new URLSearchParams(location.search).get("ref");
  const b = bookings().find((x) => x.ref === ref);
  $("confirmation").textContent = b
    ? `Booking ${b.ref}: ${b.type === "oneway" ? "one way" : "return"} trip to ${DEST[b.dest]} for ${b.travellers}`
    : "No such booking";
}
if (page === "index.html") {
  $("bookings").replaceChildren(...bookings().map((b) => {
    const li = document.createElement("li"); li.textContent = `${b.ref}: ${DEST[b.dest]} (${b.travellers})`; return li;
  }));
}
