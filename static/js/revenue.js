// The revenue page's chart, from the day rows' data- attributes (no inline script: CSP).
(function () {
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
        { label: "On demand", data: series("onDemand", 1), backgroundColor: "#2f6fed", stack: "s" },
        { label: "Reserved", data: series("reserved", 1), backgroundColor: "#43a047", stack: "s" },
        { label: "Refunds", data: series("refunds", -1), backgroundColor: "#c62828", stack: "s" },
      ],
    },
    options: { animation: false, scales: { x: { stacked: true }, y: { stacked: true } } },
  });
})();
