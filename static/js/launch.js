// The launch form's price estimate, from the prices in a json_script block (CSP: no inline script).
(function () {
  const data = document.getElementById("prices");
  const form = document.getElementById("launch-form");
  const out = document.getElementById("estimate");
  if (!data || !form || !out) return;
  const prices = JSON.parse(data.textContent);
  function update() {
    const model = form.elements["gpu_model"].value, count = form.elements["gpu_count"].value;
    const plan = (prices.plans[model] || {})[count];
    out.textContent = plan
      ? `${plan.hourly} ${prices.currency}/hour (billed per second) · off-peak ${plan.off_peak} ${prices.currency}/hour ${plan.window} · ${plan.vcpus} vCPUs, ${plan.memory_gb} GB RAM`
      : "This combination is not offered: pick another GPU count.";
  }
  form.addEventListener("change", update);
  update();
})();
