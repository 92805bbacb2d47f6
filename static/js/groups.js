// Group page: live charts of the group's load (replicas, GPU utilisation, rps, latency,
// queue), fed from the autoscaler's samples. Polls the page's samples URL every few
// seconds for the samples after the last one it has; the replicas table follows too.
(function () {
  const root = document.getElementById("group");
  if (!root || typeof Chart === "undefined") return;
  const url = root.dataset.samplesUrl;
  const note = document.getElementById("charts-note");
  const replicasBody = document.querySelector("#group-replicas tbody");
  const WINDOW_MS = 30 * 60 * 1000;
  const POLL_MS = 5000;
  const COLOURS = ["#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6"];
  let samples = [];
  let last = null;

  function timeLabel(value) {
    return new Date(value).toTimeString().slice(0, 5);
  }

  function chart(id, series, yMax) {
    const canvas = document.getElementById(id);
    if (!canvas) return null;
    return {
      series: series,
      chart: new Chart(canvas, {
        type: "line",
        data: {
          datasets: series.map(function (s, i) {
            return { label: s.label, borderColor: COLOURS[i], backgroundColor: COLOURS[i], data: [], spanGaps: false, stepped: s.stepped || false };
          }),
        },
        options: {
          animation: false, responsive: true, parsing: false, normalized: true,
          elements: { point: { radius: 0 }, line: { borderWidth: 1.5 } },
          interaction: { mode: "nearest", intersect: false },
          scales: {
            x: { type: "linear", ticks: { callback: timeLabel, maxTicksLimit: 6 } },
            y: { min: 0, max: yMax, beginAtZero: true },
          },
          plugins: { tooltip: { callbacks: { title: function (items) { return items.length ? timeLabel(items[0].parsed.x) : ""; } } } },
        },
      }),
    };
  }

  const charts = [
    chart("chart-replicas", [
      { label: "ready", key: "ready", stepped: true },
      { label: "provisioning", key: "provisioning", stepped: true },
      { label: "warm", key: "warm", stepped: true },
    ]),
    chart("chart-gpu", [{ label: "GPU %", key: "gpu_util" }], 100),
    chart("chart-rps", [{ label: "rps", key: "rps" }]),
    chart("chart-latency", [
      { label: "p50", key: "latency_p50_ms" },
      { label: "p99", key: "latency_p99_ms" },
    ]),
    chart("chart-queue", [
      { label: "queued", key: "queued" },
      { label: "in flight", key: "inflight" },
    ]),
  ].filter(Boolean);

  function draw() {
    const min = Date.now() - WINDOW_MS;
    samples = samples.filter(function (s) { return s.t >= min; });
    charts.forEach(function (c) {
      c.series.forEach(function (s, i) {
        c.chart.data.datasets[i].data = samples.map(function (p) {
          const v = p[s.key];
          return { x: p.t, y: v === null || v === undefined ? null : v };
        });
      });
      c.chart.options.scales.x.min = min;
      c.chart.options.scales.x.max = Date.now();
      c.chart.update("none");
    });
  }

  function showReplicas(replicas) {
    if (!replicasBody) return;
    replicasBody.replaceChildren();
    if (!replicas.length) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      const td = document.createElement("td");
      td.colSpan = 4;
      td.textContent = "No replicas.";
      tr.append(td);
      replicasBody.append(tr);
      return;
    }
    replicas.forEach(function (r) {
      const tr = document.createElement("tr");
      const id = document.createElement("td");
      const link = document.createElement("a");
      link.href = "/instances/" + encodeURIComponent(r.id) + "/";
      link.textContent = r.id.slice(0, 8);
      id.append(link);
      const role = document.createElement("td");
      role.textContent = r.role;
      const status = document.createElement("td");
      const badge = document.createElement("span");
      badge.className = "status " + r.status;
      badge.textContent = r.status;
      status.append(badge);
      const host = document.createElement("td");
      host.textContent = r.host || "—";
      tr.append(id, role, status, host);
      replicasBody.append(tr);
    });
  }

  function poll() {
    const query = last ? "?after=" + encodeURIComponent(last) : "";
    fetch(url + query, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (body) {
        body.samples.forEach(function (s) {
          s.t = Date.parse(s.at);
          samples.push(s);
          last = s.at;
        });
        showReplicas(body.replicas);
        if (note) note.textContent = last ? "latest sample " + new Date(last).toTimeString().slice(0, 8) : "no samples yet";
        draw();
      })
      .catch(function (err) {
        if (note) note.textContent = "could not load samples (" + err.message + "); retrying";
      })
      .finally(function () {
        if (root.dataset.status !== "deleted") setTimeout(poll, POLL_MS);
      });
  }

  poll();
})();
