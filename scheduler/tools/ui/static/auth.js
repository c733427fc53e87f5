// Sign-in: every POST form carries the session's CSRF token (added as the form is sent,
// so forms drawn later carry it too), and a viewer's pages show no action forms.
(() => {
  const meta = document.querySelector('meta[name="csrf-token"]');
  if (!meta) return;
  const mark = () => { document.body.dataset.role = meta.dataset.role; };
  if (document.body) mark(); else document.addEventListener("DOMContentLoaded", mark);
  document.addEventListener("submit", (e) => {
    const form = e.target;
    if ((form.getAttribute("method") || "").toLowerCase() !== "post") return;
    let input = form.querySelector('input[name="csrf"]');
    if (!input) {
      input = document.createElement("input");
      input.type = "hidden";
      input.name = "csrf";
      form.appendChild(input);
    }
    input.value = meta.content;
  }, true); // capture: before the page's own handlers read the form
})();
