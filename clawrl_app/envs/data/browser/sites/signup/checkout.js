// Checkout: quantities, shipping and one coupon (SAVE10: 10% off the goods) -> orders.
const $ = (id) => document.getElementById(id);
const PRICES = { notebook: 4.5, pen: 1.2, backpack: 35 };
const SHIPPING = { standard: 5, express: 15, pickup: 0 };
let discount = 0;
function quantities() {
  const q = {};
  for (const k of Object.keys(PRICES)) {
    const n = parseInt($("qty-" + k).value, 10);
    if (n > 0) q[k] = n;
  }
  return q;
}
function total() {
  const q = quantities();
  const goods = Object.entries(q).reduce((s, [k, n]) => s + PRICES[k] * n, 0);
  return Math.round((goods * (1 - discount) + SHIPPING[$("shipping").value]) * 100) / 100;
}
function show() { $("total").textContent = "$" + total().toFixed(2); }
for (const el of document.querySelectorAll("input[type=number], select")) {
  el.addEventListener("input", show);
  el.addEventListener("change", show);
}
$("apply").addEventListener("click", () => {
  if ($("coupon").value.trim().toUpperCase() === "SAVE10") {
    discount = 0.1; $("coupon-status").textContent = "Coupon SAVE10 applied: 10% off";
  } else {
    discount = 0; $("coupon-status").textContent = "Unknown coupon code";
  }
  show();
});
$("place").addEventListener("click", () => {
  const items = quantities();
  if (!Object.keys(items).length) { $("order-status").textContent = "Error: your cart is empty"; return; }
  const order = { items, shipping: $("shipping").value, coupon: discount ? "SAVE10" : "", total: total() };
  const orders = JSON.parse(localStorage.getItem("orders") || "[]");
  localStorage.setItem("orders", JSON.stringify([...orders, order]));
  $("order-status").textContent = "Order placed: total $" + order.total.toFixed(2);
});
show();
