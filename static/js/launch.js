// The launch form's price estimate, from the prices in a json_script block (CSP: no inline script).
(function () {
  // Django's JavaScript catalogue (base.html loads it first); without it, the English text.
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_, key) { return values[key]; });
  };
  const data = document.getElementById("prices");
  const form = document.getElementById("launch-form");
  const out = document.getElementById("estimate");
  if (!data || !form || !out) return;
  const prices = JSON.parse(data.textContent);
  function update() {
    const model = form.elements["gpu_model"].value, count = form.elements["gpu_count"].value;
    const plan = (prices.plans[model] || {})[count];
    out.textContent = plan
      ? interpolate(
          gettext("%(hourly)s %(currency)s/hour (billed per second) · off-peak %(off_peak)s %(currency)s/hour %(window)s · %(vcpus)s vCPUs, %(memory_gb)s GB RAM"),
          { ...plan, currency: prices.currency },
          true,
        )
      : gettext("This combination is not offered: pick another GPU count.");
  }
  form.addEventListener("change", update);
  update();
})();
