// Staff fleet page: a host × GPU heatmap of utilisation, updated live over /ws/fleet/
// (one frame a second with the newest sample of every host that sent one).
(function () {
  // Django's JavaScript catalogue (base.html loads it first); without it, the English text.
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_, key) { return values[key]; });
  };
  const table = document.getElementById("heatmap");
  const status = document.getElementById("heatmap-live");
  if (!table) return;
  let retry = 1000;

  // One hue, darker with load: easy to read, and fine for colour-blind eyes.
  function colour(util) {
    const u = Math.max(0, Math.min(100, util)) / 100;
    return "hsl(215, " + (55 + 25 * u) + "%, " + (95 - 67 * u) + "%)";
  }

  function paint(cell, util, stale) {
    cell.classList.toggle("stale", !!stale);
    if (stale || util === null || util === undefined || util === "") {
      cell.textContent = "–";
      cell.style.background = "";
      cell.style.color = "";
      return;
    }
    const value = Number(util);
    cell.textContent = Math.round(value);
    cell.style.background = colour(value);
    cell.style.color = value > 45 ? "#fff" : "";
    cell.title = cell.title.replace(/:.*$/, "") + ": " + value.toFixed(0) + " %";
  }

  table.querySelectorAll("td.cell").forEach(function (cell) { paint(cell, cell.dataset.util); });

  function update(hosts) {
    Object.keys(hosts).forEach(function (name) {
      const row = table.querySelector('tr[data-host="' + CSS.escape(name) + '"]');
      if (!row) return; // a host added since the page loaded shows after a reload
      hosts[name].gpus.forEach(function (gpu) {
        const cell = row.querySelector('td[data-gpu="' + gpu.index + '"]');
        if (cell) paint(cell, gpu.util, gpu.stale);
      });
    });
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(scheme + "://" + location.host + "/ws/fleet/");
    socket.onopen = function () { status.textContent = gettext("live"); retry = 1000; };
    socket.onmessage = function (message) {
      const data = JSON.parse(message.data);
      if (data.type === "fleet") {
        update(data.hosts);
        status.textContent = interpolate(gettext("live, updated %(at)s"), { at: new Date().toLocaleTimeString() }, true);
      }
    };
    socket.onclose = function (event) {
      if (event.code === 4401 || event.code === 4403) { status.textContent = gettext("not allowed"); return; }
      status.textContent = gettext("reconnecting…");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 15000);
    };
  }
  connect();
})();
