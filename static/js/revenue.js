// The revenue page's chart, from the day rows' data- attributes (no inline script: CSP).
(function () {
  // Django's JavaScript catalogue (base.html loads it first); without it, the English text.
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_, key) { return values[key]; });
  };
  const rows = [...document.querySelectorAll("#revenue-days tbody tr")];
  const canvas = document.getElementById("revenue-chart");
  if (!canvas) return;
  if (!window.Chart || !rows.length) { canvas.closest("figure").hidden = true; return; }
  const series = (key, sign) => rows.map((r) => sign * Number(r.dataset[key]));
  new Chart(canvas, {
    type: "bar",
    data: {
      labels: rows.map((r) => r.dataset.day.slice(8)),
      datasets: [
        { label: gettext("On demand"), data: series("onDemand", 1), backgroundColor: "#2f6fed", stack: "s" },
        { label: gettext("Reserved"), data: series("reserved", 1), backgroundColor: "#43a047", stack: "s" },
        { label: gettext("Refunds"), data: series("refunds", -1), backgroundColor: "#c62828", stack: "s" },
      ],
    },
    options: { animation: false, scales: { x: { stacked: true }, y: { stacked: true } } },
  });
})();
