// Group page: live charts of the group's load (replicas, GPU utilisation, rps, latency,
// queue), fed from the autoscaler's samples over the group's websocket (/ws/groups/<id>/):
// a snapshot of the last half hour, then each sample as the autoscaler records it, with
// the replicas' states and the tick's events. Where the websocket cannot connect, the
// page polls its samples URL instead, and tries the websocket again later.
(function () {
  // Django's JavaScript catalogue (base.html loads it first); without it, the English text.
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_, key) { return values[key]; });
  };
  const root = document.getElementById("group");
  if (!root || typeof Chart === "undefined") return;
  const url = root.dataset.samplesUrl;
  const groupId = root.dataset.groupId;
  const eventsList = document.getElementById("group-events");
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
      { label: gettext("ready"), key: "ready", stepped: true },
      { label: gettext("provisioning"), key: "provisioning", stepped: true },
      { label: gettext("warm"), key: "warm", stepped: true },
    ]),
    chart("chart-gpu", [{ label: "GPU %", key: "gpu_util" }], 100),
    chart("chart-rps", [{ label: "rps", key: "rps" }]),
    chart("chart-latency", [
      { label: "p50", key: "latency_p50_ms" },
      { label: "p99", key: "latency_p99_ms" },
    ]),
    chart("chart-queue", [
      { label: gettext("queued"), key: "queued" },
      { label: gettext("in flight"), key: "inflight" },
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
      td.textContent = gettext("No replicas.");
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

  function addSamples(rows) {
    rows.forEach(function (s) {
      if (last && s.at <= last) return; // seen: a snapshot after a reconnect, or a poll
      s.t = Date.parse(s.at);
      samples.push(s);
      last = s.at;
    });
  }

  function addEvents(events) {
    if (!eventsList || !events || !events.length) return;
    const empty = eventsList.querySelector("li.empty");
    if (empty) empty.remove();
    events.forEach(function (e) {
      const li = document.createElement("li");
      li.className = e.kind;
      const when = document.createElement("time");
      when.textContent = new Date(e.at).toISOString().slice(0, 19).replace("T", " ");
      const kind = document.createElement("b");
      kind.textContent = e.kind;
      li.append(when, " ", kind, " ");
      if (e.from_replicas !== null && e.from_replicas !== undefined) {
        const counts = document.createElement("span");
        counts.className = "muted";
        counts.textContent = e.from_replicas + " → " + e.to_replicas;
        li.append(counts, " ");
      }
      const reason = document.createElement("span");
      reason.textContent = e.reason;
      li.append(reason);
      eventsList.prepend(li);
    });
  }

  function show(frame, how) {
    addSamples(frame.samples || []);
    if (frame.replicas) showReplicas(frame.replicas);
    addEvents(frame.events);
    if (frame.status) root.dataset.status = frame.status;
    if (note) note.textContent = (last ? interpolate(gettext("latest sample %(at)s"), { at: new Date(last).toTimeString().slice(0, 8) }, true) : gettext("no samples yet")) + " · " + how;
    draw();
  }

  let polling = null;

  function poll() {
    const query = last ? "?after=" + encodeURIComponent(last) : "";
    fetch(url + query, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (body) { show(body, gettext("polling")); })
      .catch(function (err) {
        if (note) note.textContent = interpolate(gettext("could not load samples (%(error)s); retrying"), { error: err.message }, true);
      })
      .finally(function () {
        if (polling !== null && root.dataset.status !== "deleted") polling = setTimeout(poll, POLL_MS);
      });
  }

  let retry = 2000;

  function connect() {
    if (typeof WebSocket === "undefined" || !groupId) { polling = 0; poll(); return; }
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(scheme + "://" + location.host + "/ws/groups/" + groupId + "/");
    socket.onopen = function () {
      retry = 2000;
      if (polling) clearTimeout(polling);
      polling = null;
    };
    socket.onmessage = function (message) {
      const data = JSON.parse(message.data);
      if (data.type === "snapshot" || data.type === "frame") show(data, gettext("live"));
    };
    socket.onclose = function (event) {
      if (event.code === 4401 || event.code === 4404) { if (note) note.textContent = gettext("not allowed"); return; }
      if (root.dataset.status === "deleted") return;
      // Meanwhile the samples URL keeps the charts going; the websocket is tried again.
      if (polling === null) { polling = 0; poll(); }
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 30000);
    };
  }

  connect();
})();
