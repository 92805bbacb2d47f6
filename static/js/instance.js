// Live instance page: status and progress steps arrive over a websocket; no reload.
// The same socket carries this instance's GPU samples (1 s) for the live charts;
// history (1 h, 24 h) comes from per-minute rollups over HTTP.
(function () {
  // Django's JavaScript catalogue (base.html loads it first); without it, the English text.
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_, key) { return values[key]; });
  };
  const root = document.getElementById("instance");
  if (!root) return;
  const id = root.dataset.id;
  const statusEl = document.getElementById("status");
  const reasonEl = document.getElementById("reason");
  const timeline = document.getElementById("timeline");
  const live = document.getElementById("live");
  const banner = document.getElementById("idle-banner");
  let retry = 1000;
  // The statuses as the page shows them (the same words as the server's labels).
  const STATUS_LABELS = {
    pending: gettext("Pending"),
    provisioning: gettext("Provisioning"),
    running: gettext("Running"),
    unreachable: gettext("Unreachable"),
    stopping: gettext("Stopping"),
    terminating: gettext("Terminating"),
    stopped: gettext("Stopped"),
    terminated: gettext("Terminated"),
    failed: gettext("Failed"),
    lost: gettext("Lost"),
  };

  function setStatus(status, reason) {
    root.dataset.status = status;
    statusEl.textContent = STATUS_LABELS[status] || status;
    statusEl.className = "status " + status;
    if (reason !== undefined) {
      reasonEl.textContent = reason;
      reasonEl.className = status === "failed" ? "error" : "muted";
    }
    document.querySelectorAll("[data-when]").forEach(function (el) {
      el.hidden = el.dataset.when.split(" ").indexOf(status) === -1;
    });
  }

  const seen = new Set();

  function addEvent(event) {
    // The snapshot and the live stream may both carry an event: show it once.
    const key = [event.at, event.kind, event.step, event.kind === "transition" ? event.status : ""].join("|");
    if (seen.has(key)) return;
    seen.add(key);
    const li = document.createElement("li");
    li.className = event.kind;
    const time = document.createElement("time");
    time.textContent = new Date(event.at).toTimeString().slice(0, 8);
    const what = document.createElement(event.kind === "transition" ? "b" : "span");
    what.textContent = event.kind === "transition" ? event.status : event.step;
    if (event.kind !== "transition") what.className = "step";
    const text = document.createElement("span");
    text.textContent = " " + (event.reason || "");
    li.append(time, " ", what, text);
    timeline.appendChild(li);
  }

  // The idle auto-stop notice: shown from a warning until activity resumes or the status changes.
  function noticeBanner(event) {
    if (!banner) return;
    if (event.kind === "notice" && (event.step === "idle_warning" || event.step === "reservation_ending")) {
      banner.textContent = event.reason;
      banner.hidden = false;
    } else if (event.kind === "transition" || (event.kind === "notice" && event.step === "idle_cleared")) {
      banner.hidden = true;
    }
  }

  // --- charts -----------------------------------------------------------------
  const charts = document.getElementById("gpu-charts");
  const LIVE_SECONDS = 300;
  const GIB = 1024 * 1024 * 1024;
  const COLOURS = ["#2f6fed", "#e8590c", "#2b8a3e", "#ae3ec9", "#1098ad", "#f08c00", "#c2255c", "#5c940d"];
  const liveData = {}; // gpu index → [{x: ms, util, mem}]
  let liveUtil = null, liveMem = null, historyUtil = null, historyMem = null;
  let historyWindow = "1h";
  let lastDraw = 0;

  function timeLabel(ms) { return new Date(ms).toTimeString().slice(0, 8); }

  function lineChart(canvas, yMax) {
    if (!canvas || typeof Chart === "undefined") return null;
    return new Chart(canvas, {
      type: "line",
      data: { datasets: [] },
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
    });
  }

  function datasets(series, key, scale) {
    return Object.keys(series).sort(function (a, b) { return a - b; }).map(function (index) {
      return {
        label: "GPU " + index,
        borderColor: COLOURS[index % COLOURS.length],
        backgroundColor: COLOURS[index % COLOURS.length],
        data: series[index].map(function (p) { return { x: p.x, y: p[key] === null ? null : p[key] / scale }; }),
        spanGaps: false,
      };
    });
  }

  function drawLive(now) {
    if (!liveUtil) return;
    const min = now - LIVE_SECONDS * 1000;
    [liveUtil, liveMem].forEach(function (chart) {
      chart.options.scales.x.min = min;
      chart.options.scales.x.max = now;
    });
    liveUtil.data.datasets = datasets(liveData, "util", 1);
    liveMem.data.datasets = datasets(liveData, "mem", GIB);
    liveUtil.update("none");
    liveMem.update("none");
  }

  function onSample(data) {
    const ms = (data.ts || Date.now() / 1000) * 1000;
    const cutoff = ms - LIVE_SECONDS * 1000;
    (data.gpus || []).forEach(function (gpu) {
      if (liveMem && gpu.mem_total) liveMem.options.scales.y.max = Math.ceil(gpu.mem_total / GIB);
      const points = liveData[gpu.index] || (liveData[gpu.index] = []);
      if (points.length && points[points.length - 1].x >= ms) return; // seen (a reconnect's backfill)
      points.push({ x: ms, util: gpu.stale ? null : gpu.util, mem: gpu.stale ? null : gpu.mem_used });
      while (points.length && points[0].x < cutoff) points.shift();
    });
    document.getElementById("telemetry-live").textContent = gettext("live, 1 s");
    if (data.simulated) document.getElementById("telemetry-simulated").hidden = false;
    if (Date.now() - lastDraw > 900) { lastDraw = Date.now(); drawLive(ms); }
  }

  function loadHistory() {
    if (!historyUtil) return;
    fetch(charts.dataset.historyUrl + "?window=" + historyWindow, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : Promise.reject(response.status); })
      .then(function (data) {
        const series = {};
        data.gpus.forEach(function (gpu) {
          series[gpu.index] = gpu.points.map(function (p) { return { x: Date.parse(p.t), util: p.util, mem: p.mem_used }; });
          gpu.points.forEach(function (p) {
            // The whole card's memory as the axis, so "how full" reads at a glance.
            if (p.mem_total) historyMem.options.scales.y.max = Math.ceil(p.mem_total / GIB);
          });
        });
        [historyUtil, historyMem].forEach(function (chart) {
          chart.options.scales.x.min = Date.parse(data.since);
          chart.options.scales.x.max = Date.parse(data.until);
        });
        historyUtil.data.datasets = datasets(series, "util", 1);
        historyMem.data.datasets = datasets(series, "mem", GIB);
        historyUtil.update("none");
        historyMem.update("none");
        const note = document.getElementById("history-note");
        note.textContent = (data.gpus.length ? "" : gettext("no per-minute data yet")) + (data.simulated ? " · " + gettext("simulated") : "");
        if (data.simulated) document.getElementById("telemetry-simulated").hidden = false;
      })
      .catch(function () { document.getElementById("history-note").textContent = gettext("history unavailable"); });
  }

  if (charts) {
    liveUtil = lineChart(document.getElementById("live-util"), 100);
    liveMem = lineChart(document.getElementById("live-mem"));
    historyUtil = lineChart(document.getElementById("history-util"), 100);
    historyMem = lineChart(document.getElementById("history-mem"));
    charts.querySelectorAll("[data-window]").forEach(function (button) {
      button.addEventListener("click", function () {
        historyWindow = button.dataset.window;
        charts.querySelectorAll("[data-window]").forEach(function (b) { b.setAttribute("aria-pressed", b === button ? "true" : "false"); });
        loadHistory();
      });
    });
    loadHistory();
    setInterval(loadHistory, 60000);
    // Keep the live window moving even when no sample arrives (stopped instance, lost host).
    setInterval(function () { if (Date.now() - lastDraw > 2000) { lastDraw = Date.now(); drawLive(Date.now()); } }, 2000);
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(scheme + "://" + location.host + "/ws/instances/" + id + "/");
    socket.onopen = function () { live.textContent = gettext("live"); retry = 1000; };
    socket.onmessage = function (message) {
      const data = JSON.parse(message.data);
      if (data.type === "snapshot") {
        // Whatever happened before we subscribed: the snapshot rebuilds the timeline.
        timeline.replaceChildren();
        seen.clear();
        if (banner) banner.hidden = true;
        (data.events || []).forEach(function (event) { addEvent(event); noticeBanner(event); });
        setStatus(data.status, data.reason);
      } else if (data.type === "event") {
        addEvent(data);
        noticeBanner(data);
        if (data.kind === "transition") setStatus(data.status, data.reason);
      } else if (data.type === "telemetry") {
        onSample(data);
      } else if (data.type === "telemetry_backfill") {
        // The last minutes the agent kept: the live chart starts full, not empty.
        (data.samples || []).forEach(onSample);
        drawLive(Date.now());
      }
    };
    socket.onclose = function (event) {
      if (event.code === 4401 || event.code === 4404) { live.textContent = gettext("not allowed"); return; }
      live.textContent = gettext("reconnecting…");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 15000);
    };
  }
  connect();
})();
