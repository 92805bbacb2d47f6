// Live instance page: status and progress steps arrive over a websocket; no reload.
(function () {
  const root = document.getElementById("instance");
  if (!root) return;
  const id = root.dataset.id;
  const statusEl = document.getElementById("status");
  const reasonEl = document.getElementById("reason");
  const timeline = document.getElementById("timeline");
  const live = document.getElementById("live");
  let retry = 1000;

  function setStatus(status, reason) {
    root.dataset.status = status;
    statusEl.textContent = status.charAt(0).toUpperCase() + status.slice(1);
    statusEl.className = "status " + status;
    if (reason !== undefined) {
      reasonEl.textContent = reason;
      reasonEl.className = status === "failed" ? "error" : "muted";
    }
    document.querySelectorAll("[data-when]").forEach(function (el) {
      el.hidden = el.dataset.when.split(" ").indexOf(status) === -1;
    });
  }

  function addEvent(event) {
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

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(scheme + "://" + location.host + "/ws/instances/" + id + "/");
    socket.onopen = function () { live.textContent = "live"; retry = 1000; };
    socket.onmessage = function (message) {
      const data = JSON.parse(message.data);
      if (data.type === "snapshot") {
        // Whatever happened before we subscribed: the snapshot rebuilds the timeline.
        timeline.replaceChildren();
        (data.events || []).forEach(addEvent);
        setStatus(data.status, data.reason);
      } else if (data.type === "event") {
        addEvent(data);
        if (data.kind === "transition") setStatus(data.status, data.reason);
      }
    };
    socket.onclose = function (event) {
      if (event.code === 4401 || event.code === 4404) { live.textContent = "not allowed"; return; }
      live.textContent = "reconnecting…";
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 15000);
    };
  }
  connect();
})();
