// tjob serve's dashboard: the jobs table, live from /v1/watch, and a job's page (its progress,
// metrics plotted from its Progress events, steps, events and the live tail of its log), with
// cancel and delete; the sweeps' pages are sweeps.js's. It uses the public API only (/v1), with the server's token when it has one.
// Every value from the server goes into the page as text, never as markup.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const state = {
    token: sessionStorage.getItem("tjob-token"),
    jobs: new Map(),
    seq: null,
    backend: "",
    view: null, // the job shown, or null for the table
    logAbort: null,
    logStep: null, // the step the person chose for the log pane; null: firstStep's
    charts: new Map(), // metric name -> {plot, el}
    shownUpdated: null,
    shownStatus: null,
  };

  class AuthError extends Error {}

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  async function api(method, path, opts = {}) {
    const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
    const r = await fetch(path, { method, headers, signal: opts.signal });
    if (r.status === 401) throw new AuthError("the token is missing or wrong");
    return r;
  }

  // Reads a streamed answer (a watch, a followed log) to its end, its text piece by piece to `f`.
  async function chunks(r, f) {
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      f(dec.decode(value, { stream: true }));
    }
  }

  async function json(method, path) {
    const r = await api(method, path);
    const body = await r.json();
    if (!r.ok) throw new Error(body.message || r.status);
    return body;
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function age(iso) {
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 60) return Math.floor(s) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) return Math.floor(s / 3600) + "h";
    return Math.floor(s / 86400) + "d";
  }

  function duration(s) {
    s = Math.round(s);
    if (s >= 3600) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    if (s >= 60) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    return s + "s";
  }

  function statusText(j) {
    let t = j.status;
    if (j.queue_position) t += " (Queued #" + j.queue_position + ")";
    else if (j.reason) t += " (" + j.reason + ")";
    return t;
  }

  function bar(percent, big) {
    const b = el("div", null, big ? "bar big" : "bar");
    const f = el("div", null, "fill");
    f.style.width = (percent || 0) + "%";
    b.appendChild(f);
    return b;
  }

  // --- the jobs table ------------------------------------------------------------------------

  function row(j) {
    const tr = document.createElement("tr");
    tr.dataset.job = j.name;
    tr.appendChild(el("td", j.name));
    const st = el("td", statusText(j), "status " + j.status);
    st.dataset.role = "status";
    tr.appendChild(st);
    const p = el("td");
    p.dataset.role = "progress";
    if (j.progress_percent !== undefined) {
      p.appendChild(bar(j.progress_percent));
      p.appendChild(el("span", " " + j.progress_percent + "%", "percent"));
    } else {
      p.appendChild(el("span", "-", "muted"));
    }
    tr.appendChild(p);
    tr.appendChild(el("td", state.backend));
    tr.appendChild(el("td", j.runtime || "-"));
    const a = el("td", age(j.creation_timestamp));
    a.dataset.role = "age";
    a.dataset.created = j.creation_timestamp;
    tr.appendChild(a);
    tr.addEventListener("click", () => (location.hash = "#job=" + encodeURIComponent(j.name)));
    return tr;
  }

  function renderTable() {
    const body = $("jobs").tBodies[0];
    const rows = new Map([...body.rows].map((r) => [r.dataset.job, r]));
    const names = [...state.jobs.keys()].sort((a, b) =>
      state.jobs.get(b).creation_timestamp.localeCompare(state.jobs.get(a).creation_timestamp) || a.localeCompare(b));
    names.forEach((name, i) => {
      const fresh = row(state.jobs.get(name));
      const old = rows.get(name);
      if (old) {
        old.replaceWith(fresh);
        rows.delete(name);
      }
      if (body.rows[i] !== fresh) body.insertBefore(fresh, body.rows[i] || null);
    });
    for (const r of rows.values()) r.remove();
    $("no-jobs").hidden = state.jobs.size > 0;
  }

  setInterval(() => {
    for (const td of document.querySelectorAll('#jobs td[data-role="age"]')) td.textContent = age(td.dataset.created);
  }, 1000);

  // --- the watch ---------------------------------------------------------------------------

  async function list() {
    const l = await json("GET", "/v1/jobs");
    state.jobs = new Map(l.items.map((j) => [j.name, j]));
    state.seq = l.seq;
    renderTable();
    if (state.view) showJob(state.view, true);
  }

  function onChange(ev) {
    state.seq = ev.seq;
    if (ev.type === "DELETED") state.jobs.delete(ev.job.name);
    else state.jobs.set(ev.job.name, ev.job);
    renderTable();
    window.tjobSweeps.jobChanged(ev.job);
    if (state.view !== ev.job.name) return;
    if (ev.type === "DELETED") {
      $("job-status").textContent = "(deleted)";
      $("cancel").disabled = $("delete").disabled = true;
    } else {
      showJob(state.view, true);
    }
  }

  function setLive(on) {
    $("live").textContent = on ? "live" : "reconnecting";
    $("live").className = on ? "pill live" : "pill";
  }

  async function watch() {
    for (;;) {
      try {
        if (state.seq === null) await list();
        const r = await api("GET", "/v1/watch?since=" + state.seq);
        if (r.status === 410) {
          state.seq = null; // fell behind what the server keeps: list again
          continue;
        }
        if (!r.ok) throw new Error("watch: " + r.status);
        setLive(true);
        let buf = "";
        await chunks(r, (text) => {
          buf += text;
          let nl;
          while ((nl = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, nl);
            buf = buf.slice(nl + 1);
            if (line.trim()) onChange(JSON.parse(line));
          }
        });
      } catch (e) {
        if (e instanceof AuthError) return showLogin(e.message);
      }
      setLive(false);
      await sleep(1000);
    }
  }

  // --- a job's page ------------------------------------------------------------------------

  function metricsLine(j) {
    const p = $("job-metrics");
    p.replaceChildren();
    for (const [k, v] of Object.entries(j.metrics || {})) p.appendChild(el("span", k + " = " + v));
  }

  async function showJob(name, update) {
    let j = state.jobs.get(name);
    if (!j) {
      try {
        j = await json("GET", "/v1/jobs/" + encodeURIComponent(name));
      } catch (e) {
        $("job-name").textContent = name;
        $("job-status").textContent = "(" + e.message + ")";
        return;
      }
    }
    $("job-name").textContent = j.name;
    $("job-status").textContent = statusText(j);
    $("job-status").className = "status " + j.status;
    $("job-bar").style.width = (j.progress_percent || 0) + "%";
    $("job-percent").textContent = j.progress_percent !== undefined ? j.progress_percent + "%" : "";
    $("job-eta").textContent =
      j.estimated_remaining_seconds !== undefined ? "ETA " + duration(j.estimated_remaining_seconds) : "";
    metricsLine(j);
    const steps = $("steps").tBodies[0];
    steps.replaceChildren();
    for (const s of j.steps) {
      const tr = document.createElement("tr");
      [s.name, s.status, s.exit_code === undefined || s.exit_code === null ? "" : s.exit_code, s.reason].forEach((v) =>
        tr.appendChild(el("td", v)));
      steps.appendChild(tr);
    }
    const ended = j.status === "Complete" || j.status === "Failed";
    $("cancel").disabled = ended;
    if (!update || j.updated !== state.shownUpdated || j.status !== state.shownStatus) {
      state.shownUpdated = j.updated;
      state.shownStatus = j.status;
      await events(j.name);
    }
    // A job that fails while shown switches to the failing step, unless a step was chosen.
    if (!update || (!state.logStep && firstStep(j) !== $("log-step").value)) follow(j);
  }

  async function events(name) {
    let evs;
    try {
      evs = (await json("GET", "/v1/jobs/" + encodeURIComponent(name) + "/events")).items;
    } catch (e) {
      return;
    }
    if (state.view !== name) return;
    const body = $("events").tBodies[0];
    body.replaceChildren();
    // Progress reports are plotted: in the table they are one row, so that the
    // steps' events stay in sight (a report a second made a page thousands of rows long).
    const progress = evs.filter((e) => e.reason === "Progress");
    const rows = evs.filter((e) => e.reason !== "Progress").slice(-200);
    if (progress.length) {
      const last = progress[progress.length - 1];
      rows.push({ time: last.time, step: "", reason: "Progress",
                  message: progress.length + " report(s), plotted under Metrics; the latest: " + last.message });
      rows.sort((a, b) => (a.time < b.time ? -1 : a.time > b.time ? 1 : 0));
    }
    for (const e of rows.reverse()) {
      const tr = document.createElement("tr");
      [e.time.replace("T", " ").replace("Z", ""), e.step || "-", e.reason, e.message].forEach((v) =>
        tr.appendChild(el("td", v)));
      body.appendChild(tr);
    }
    plot(progress);
  }

  // Every metric with numeric values, over time: one chart each (uPlot).
  function plot(progress) {
    const series = new Map();
    for (const e of progress) {
      const t = Date.parse(e.time) / 1000;
      for (const [k, v] of Object.entries(e.metrics || {})) {
        const x = Number(v);
        if (!Number.isFinite(x)) continue;
        if (!series.has(k)) series.set(k, [[], []]);
        series.get(k)[0].push(t);
        series.get(k)[1].push(x);
      }
    }
    $("no-metrics").hidden = series.size > 0;
    const box = $("charts");
    if (typeof uPlot === "undefined") {
      $("no-metrics").hidden = false;
      $("no-metrics").textContent = "The chart library was not bundled into this tjob (npm ci --prefix web, then build).";
      return;
    }
    const width = Math.max(280, box.clientWidth - 10);
    for (const [name, data] of series) {
      let c = state.charts.get(name);
      if (!c) {
        const holder = el("div", null, "chart");
        holder.dataset.metric = name;
        box.appendChild(holder);
        const opts = {
          title: name,
          width,
          height: 180,
          scales: { x: { time: true } },
          series: [{}, { label: name, stroke: "#2d6cdf", width: 2, points: { show: true, size: 4 } }],
        };
        c = { el: holder, plot: new uPlot(opts, data, holder) };
        state.charts.set(name, c);
      } else {
        c.plot.setData(data);
      }
      c.el.dataset.points = String(data[0].length);
    }
  }

  // The step whose log a failed job shows first: the one whose failure was the job's (not one
  // stopped because of it, or never started); else the first.
  function firstStep(j) {
    const failed = j.steps.filter((s) => s.status === "Failed");
    const cause = failed.find((s) => !/^(stopped|not started)/.test(s.reason || "")) || failed[0];
    return (cause || j.steps[0] || { name: "node-0" }).name;
  }

  // The step chooser: every step of the job, the one shown selected.
  function stepChooser(j, step) {
    const pick = $("log-step");
    const names = j.steps.map((s) => s.name);
    if ([...pick.options].map((o) => o.value).join() !== names.join())
      pick.replaceChildren(...names.map((n) => {
        const o = document.createElement("option");
        o.value = o.textContent = n;
        return o;
      }));
    pick.value = step;
    pick.disabled = names.length < 2;
  }

  // The live tail of a step's log: the one chosen, else firstStep's.
  async function follow(j) {
    if (state.logAbort) state.logAbort.abort();
    const abort = new AbortController();
    state.logAbort = abort;
    const step = state.logStep && j.steps.some((s) => s.name === state.logStep) ? state.logStep : firstStep(j);
    stepChooser(j, step);
    const pre = $("log");
    pre.textContent = "";
    pre.dataset.lines = "0";
    const path = "/v1/jobs/" + encodeURIComponent(j.name) + "/logs?step=" + encodeURIComponent(step) + "&tail=500&follow=1";
    try {
      const r = await api("GET", path, { signal: abort.signal });
      if (!r.ok) {
        pre.textContent = "(" + ((await r.json()).message || r.status) + ")";
        return;
      }
      let text = "";
      await chunks(r, (piece) => {
        text += piece;
        const lines = text.split("\n");
        if (lines.length > 2001) text = lines.slice(-2001).join("\n"); // the last 2,000 lines
        const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.textContent = text;
        pre.dataset.lines = String(text.split("\n").length - 1);
        if (stick) pre.scrollTop = pre.scrollHeight;
      });
    } catch (e) {
      if (e.name !== "AbortError" && !(e instanceof AuthError)) pre.textContent += "\n(the log stream ended: " + e.message + ")";
    }
  }

  async function act(what) {
    const name = state.view;
    if (!name) return;
    const sure = what === "cancel"
      ? confirm("Cancel job " + name + "? Its processes get SIGTERM, then SIGKILL after the grace period.")
      : confirm("Delete job " + name + "? It is cancelled if it runs, then its record, logs and events are removed.");
    if (!sure) return;
    $("action-result").textContent = what === "cancel" ? "cancelling..." : "deleting...";
    try {
      const r = what === "cancel"
        ? await api("POST", "/v1/jobs/" + encodeURIComponent(name) + "/cancel")
        : await api("DELETE", "/v1/jobs/" + encodeURIComponent(name));
      const body = await r.json();
      if (!r.ok) throw new Error(body.message || r.status);
      $("action-result").textContent = what === "cancel" ? "cancelled" : "deleted";
      if (what === "delete") location.hash = "";
    } catch (e) {
      $("action-result").textContent = what + " failed: " + e.message;
    }
  }

  // --- views ---------------------------------------------------------------------------------

  function route() {
    // #sweeps and #sweep=NAME are sweeps.js's pages.
    const sw = location.hash.match(/^#sweeps?(?:=([^&]+))?/);
    if (sw) {
      if (state.logAbort) state.logAbort.abort();
      state.view = null;
      $("jobs-view").hidden = $("job-view").hidden = true;
      window.tjobSweeps.route(sw[1] ? decodeURIComponent(sw[1]) : null);
      return;
    }
    window.tjobSweeps.route(undefined);
    const m = location.hash.match(/^#job=([^&]+)/);
    const name = m ? decodeURIComponent(m[1]) : null;
    if (state.view !== name) state.logStep = null;
    if (state.logAbort && state.view !== name) state.logAbort.abort();
    if (state.view !== name) {
      state.charts.clear();
      $("charts").replaceChildren($("no-metrics"));
      $("events").tBodies[0].replaceChildren();
      $("action-result").textContent = "";
      state.shownUpdated = state.shownStatus = null;
    }
    state.view = name;
    $("delete").disabled = false;
    $("jobs-view").hidden = !!name;
    $("job-view").hidden = !name;
    if (name) showJob(name, false);
  }

  function showLogin(why) {
    $("login").hidden = false;
    $("jobs-view").hidden = $("job-view").hidden = $("sweeps-view").hidden = $("sweep-view").hidden = true;
    $("login-error").textContent = why || "";
  }

  async function start() {
    const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
    if (m) {
      state.token = decodeURIComponent(m[1]);
      sessionStorage.setItem("tjob-token", state.token);
      // The token is not left in the address bar; the rest (#job=NAME) still opens the job.
      const rest = location.hash.replace(/(^#|&)token=[^&]*/, "$1").replace(/^#&/, "#").replace(/&$/, "");
      history.replaceState(null, "", location.pathname + (rest === "#" ? "" : rest));
    }
    try {
      const h = await json("GET", "/healthz");
      state.backend = h.backend;
      $("backend").textContent = "backend: " + h.backend;
      await list();
    } catch (e) {
      if (e instanceof AuthError) return showLogin(state.token ? "That token is not this server's." : "");
      $("backend").textContent = "cannot reach the server: " + e.message;
    }
    $("login").hidden = true;
    route();
    watch();
  }

  // What sweeps.js (loaded after this file) uses of this one.
  window.tjobUI = { api, json, el, age };

  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("tjob-token", state.token);
    start();
  });
  $("log-step").addEventListener("change", () => {
    state.logStep = $("log-step").value;
    const j = state.jobs.get(state.view);
    if (j) follow(j);
    else if (state.view) showJob(state.view, false);
  });
  $("cancel").addEventListener("click", () => act("cancel"));
  $("delete").addEventListener("click", () => act("delete"));
  window.addEventListener("hashchange", route);
  start();
})();
