// Armory's live dashboard: renders /stats as the server pushes it on /dashboard/live.
// Ships with the package; no network beyond the server it came from.
"use strict";

const HISTORY = 120;
const busyHistory = [];
let previous = null;

function fmt(value, digits, unit) {
  if (value === null || value === undefined) return "–";
  return value.toFixed(digits) + (unit || "");
}

function el(tag, attrs, children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children || []) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function queueCell(robot) {
  const depth = robot.queue_depth_actions;
  if (depth === null) return el("td", {}, ["–"]);
  const full = Math.max(robot.max_execution_horizon || 1, 1);
  const bar = el("span", { style: `width:${Math.min(100, (100 * depth) / full)}%` });
  return el("td", { "data-field": "queue" }, [el("span", { class: "qbar" }, [bar]), String(depth)]);
}

function statusOf(robot) {
  if (!robot.connected) return "disconnected";
  if (robot.starving) return "starving";
  return "live";
}

function renderRobots(robots) {
  const body = document.querySelector("#robots tbody");
  body.replaceChildren(
    ...robots.map((r) => {
      const status = statusOf(r);
      const row = el(
        "tr",
        {
          class: status === "live" ? "" : status === "starving" ? "starving" : "gone",
          "data-robot": r.robot,
          "data-door": r.door,
          "data-status": status,
          "data-control-hz": String(r.control_hz),
          "data-weight": String(r.weight),
          "data-requests": String(r.num_requests),
        },
        [
          el("td", {}, [r.robot]),
          el("td", {}, [r.door]),
          el("td", {}, [status]),
          el("td", {}, [fmt(r.control_hz, 0, " Hz")]),
          el("td", {}, [fmt(r.weight, 1)]),
          queueCell(r),
          el("td", {}, [r.starvation === null ? "–" : fmt(100 * r.starvation, 1, "%")]),
          el("td", {}, [fmt(r.latency_ms, 1, " ms")]),
          el("td", {}, [fmt(r.observation_age_ms, 1, " ms")]),
          el("td", {}, [fmt(r.request_hz, 1)]),
          el("td", {}, [fmt(r.last_seen_s_ago, 1, " s ago")]),
        ],
      );
      return row;
    }),
  );
  const live = robots.filter((r) => r.connected).length;
  document.getElementById("robot-count").textContent = `(${live} connected)`;
}

function renderHistogram(stats) {
  const counts = stats.batch_size_counts;
  const sizes = [];
  for (let b = 1; b <= Math.max(stats.max_batch_size, 1); b++) sizes.push(b);
  const most = Math.max(1, ...sizes.map((b) => counts[b] || 0));
  document.getElementById("batch-hist").replaceChildren(
    ...sizes.map((b) =>
      el("div", { class: "col", "data-size": String(b), "data-count": String(counts[b] || 0) }, [
        el("div", { class: "bar", style: `height:${(80 * (counts[b] || 0)) / most}%` }),
        String(b),
      ]),
    ),
  );
  document.getElementById("batch-note").textContent =
    `${stats.num_batches} batches, mean ${stats.mean_batch_size.toFixed(2)}`;
}

function renderBusy(stats) {
  if (previous && stats.uptime_s > previous.uptime_s) {
    const ratio = (stats.busy_s - previous.busy_s) / (stats.uptime_s - previous.uptime_s);
    busyHistory.push(Math.max(0, Math.min(1, ratio)));
    if (busyHistory.length > HISTORY) busyHistory.shift();
  }
  previous = stats;
  const now = busyHistory.length ? busyHistory[busyHistory.length - 1] : null;
  document.getElementById("busy-now").textContent = now === null ? "–" : fmt(100 * now, 0, "%");
  const total = stats.uptime_s > 0 ? stats.busy_s / stats.uptime_s : 0;
  document.getElementById("busy-total").textContent =
    `${fmt(100 * total, 1, "%")} since start (${fmt(stats.uptime_s, 0, " s")})`;
  const span = Math.max(busyHistory.length - 1, 20);  // the chart fills as history grows
  const points = busyHistory.map((v, i) => `${(300 * i) / span},${80 - 78 * v}`);
  const svg = document.getElementById("busy-chart");
  svg.innerHTML = `<polyline fill="none" stroke="#4a72c4" stroke-width="2" points="${points.join(" ")}"/>`;
}

function renderRules(stats) {
  document.getElementById("scheduler").textContent = stats.scheduler;
  const rules = Object.entries(stats.decisions_by_rule).sort((a, b) => b[1] - a[1]);
  // With --server.explain-rules: the share of each rule's decisions that differ from
  // the base rule's on the same snapshots.
  const changes = stats.rule_changes || {};
  const changed = (rule) => {
    const c = changes[rule];
    return c && c.decisions > 0 ? `${fmt((100 * c.changed) / c.decisions, 0, "%")} changed` : "";
  };
  document.querySelector("#rules tbody").replaceChildren(
    ...rules.map(([rule, n]) =>
      el("tr", { "data-rule": rule }, [
        el("td", {}, [rule]),
        el("td", {}, [String(n)]),
        el("td", { class: "changed" }, [changed(rule)]),
      ]),
    ),
  );
  document.getElementById("decision-note").textContent =
    `${fmt(stats.decision_ms_mean, 3, " ms")} per decision`;
}

function renderRequests(stats) {
  document.getElementById("num-requests").textContent = String(stats.num_requests);
  const doors = Object.entries(stats.requests_by_door).map(([d, n]) => `${d} ${n}`);
  document.getElementById("request-note").textContent =
    `${doors.join(", ") || "no door yet"}; ${stats.num_errors} errors, ` +
    `${stats.num_worker_restarts} worker restarts`;
}

function render(stats) {
  document.getElementById("server").textContent =
    `policy ${stats.policy} · max batch ${stats.max_batch_size} · scheduler ${stats.scheduler}`;
  renderBusy(stats);
  renderHistogram(stats);
  renderRules(stats);
  renderRequests(stats);
  renderRobots(stats.robots);
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/dashboard/live`);
  const feed = document.getElementById("feed");
  socket.onopen = () => { feed.textContent = "live"; feed.classList.add("live"); };
  socket.onmessage = (event) => render(JSON.parse(event.data));
  socket.onclose = () => {
    feed.textContent = "offline, retrying";
    feed.classList.remove("live");
    setTimeout(connect, 1000);
  };
}

connect();
