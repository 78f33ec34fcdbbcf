// tjob serve's dashboard: the sweeps (tjob optimize, /v1/sweeps). The list, and a sweep's page:
// its trials table (sorted by any column, the objective first), the objective over the trials with
// the best so far, a parallel-coordinates plot of the parameters against the objective, and each
// metric's curves per trial; cancel and delete. It follows its trials' jobs on the dashboard's
// /v1/watch (app.js) and reads the sweep again when one of them changes. Values from the server
// go into the page as text, never as markup.
"use strict";
(() => {
  const ui = window.tjobUI;
  const { el } = ui;
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const state = {
    view: undefined, // undefined: not shown; null: the list; a name: that sweep
    sweeps: [],
    sweep: null,
    sort: null, // {key, desc}; null: the objective, best first
    charts: new Map(), // metric -> {el, plot, trials}
    objective: null, // the objective's chart
    reading: false,
    again: false,
    later: null,
    deleting: null, // the sweep being deleted
  };

  const ended = (status) => status === "Complete" || status === "Failed";
  const short = (v) => (typeof v === "number" ? Number(v.toPrecision(6)).toString() : String(v));
  const objectiveOf = (s) => s.request.objectives[0];
  const whole = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]; // ticks of a count

  // --- the list ----------------------------------------------------------------------------

  function bestText(s) {
    if (s.best === null || s.best === undefined) return "-";
    const t = s.trials[s.best];
    return t.name + " " + objectiveOf(s).metric + "=" + short(t.objective);
  }

  function renderList() {
    const body = $("sweeps").tBodies[0];
    body.replaceChildren();
    for (const s of [...state.sweeps].reverse()) {
      const tr = document.createElement("tr");
      tr.dataset.sweep = s.name;
      const done = s.trials.filter((t) => ended(t.status)).length;
      const status = s.status + (!ended(s.status) && !s.owned ? " (no owner)" : "");
      [s.name, status, s.request.algorithm, done + "/" + s.request.num_trials, bestText(s),
       ui.age(s.creation_timestamp)].forEach((v, i) => tr.appendChild(el("td", v, i === 1 ? "status " + s.status : "")));
      tr.addEventListener("click", () => (location.hash = "#sweep=" + encodeURIComponent(s.name)));
      body.appendChild(tr);
    }
    $("no-sweeps").hidden = state.sweeps.length > 0;
  }

  // --- a sweep's page ------------------------------------------------------------------------

  // The columns of the trials table: each with its header, the value it shows and the one it sorts by.
  function columns(s) {
    const cols = [
      { key: "trial", head: "Trial", value: (t) => t.name, sortBy: (t) => t.index },
      { key: "status", head: "Status", value: (t) => t.status, sortBy: (t) => t.status },
    ];
    for (const p of s.request.search_space)
      cols.push({ key: "p:" + p.name, head: p.name, value: (t) => short(t.parameters[p.name]),
                  sortBy: (t) => t.parameters[p.name] });
    const objective = objectiveOf(s);
    const metricNames = [...new Set([...s.request.objectives.map((o) => o.metric),
                                     ...s.trials.flatMap((t) => t.metrics.map((m) => m.name))])];
    for (const name of metricNames) {
      const pick = (t) => {
        if (name === objective.metric && t.objective !== null) return t.objective;
        const m = t.metrics.find((x) => x.name === name);
        return m ? m.latest : null;
      };
      cols.push({ key: "m:" + name, head: name + (name === objective.metric ? " (" + objective.direction + ")" : ""),
                  value: (t) => (pick(t) === null ? "-" : short(pick(t))), sortBy: pick });
    }
    cols.push({ key: "reason", head: "Reason", value: (t) => t.reason, sortBy: (t) => t.reason });
    return cols;
  }

  function sorted(s, cols) {
    const objective = objectiveOf(s);
    const sort = state.sort || { key: "m:" + objective.metric, desc: objective.direction === "maximize" };
    const col = cols.find((c) => c.key === sort.key) || cols[0];
    // Trials without a value go last, whichever way it is sorted.
    return [...s.trials].sort((a, b) => {
      const x = col.sortBy(a), y = col.sortBy(b);
      if (x === null || x === undefined) return y === null || y === undefined ? a.index - b.index : 1;
      if (y === null || y === undefined) return -1;
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return (sort.desc ? -c : c) || a.index - b.index;
    });
  }

  function renderTrials(s) {
    const cols = columns(s);
    const sort = state.sort || { key: "m:" + objectiveOf(s).metric, desc: objectiveOf(s).direction === "maximize" };
    const head = $("trials").tHead.rows[0];
    head.replaceChildren(...cols.map((c) => {
      const th = el("th", c.head + (c.key === sort.key ? (sort.desc ? " \u25bc" : " \u25b2") : ""));
      th.dataset.key = c.key;
      th.className = "sortable";
      th.addEventListener("click", () => {
        state.sort = { key: c.key, desc: sort.key === c.key ? !sort.desc : false };
        renderTrials(state.sweep);
      });
      return th;
    }));
    const body = $("trials").tBodies[0];
    body.replaceChildren();
    for (const t of sorted(s, cols)) {
      const tr = document.createElement("tr");
      tr.dataset.trial = t.name;
      if (s.best !== null && s.trials[s.best] && s.trials[s.best].name === t.name) tr.className = "best";
      cols.forEach((c) => tr.appendChild(el("td", c.value(t), c.key === "status" ? "status " + t.status : "")));
      tr.addEventListener("click", () => (location.hash = "#job=" + encodeURIComponent(t.name)));
      body.appendChild(tr);
    }
  }

  // The objective of each trial that has one, by its index, and the best so far.
  function plotObjective(s) {
    const box = $("sweep-objective");
    if (typeof uPlot === "undefined") {
      box.textContent = "The chart library was not bundled into this tjob (npm ci --prefix web, then build).";
      return;
    }
    const o = objectiveOf(s);
    const xs = [], ys = [], best = [];
    let b = null;
    for (const t of [...s.trials].sort((a, c) => a.index - c.index)) {
      if (t.objective === null || t.status !== "Complete") continue;
      b = b === null ? t.objective : o.direction === "maximize" ? Math.max(b, t.objective) : Math.min(b, t.objective);
      xs.push(t.index);
      ys.push(t.objective);
      best.push(b);
    }
    box.dataset.points = String(xs.length);
    const data = [xs, ys, best];
    if (!state.objective) {
      const opts = {
        title: o.metric + " by trial", width: Math.max(280, box.clientWidth - 10), height: 200,
        scales: { x: { time: false } },
        axes: [{ incrs: whole }, {}],
        series: [{ label: "trial" },
                 { label: o.metric, stroke: "#2d6cdf", width: 0, points: { show: true, size: 6 } },
                 { label: "best so far", stroke: "#1f8a4c", width: 2, points: { show: false } }],
      };
      state.objective = new uPlot(opts, data, box);
    } else {
      state.objective.setData(data);
    }
  }

  // Parallel coordinates: an axis per parameter and one for the objective; a line per trial that has
  // an objective, its colour from best (green) to worst (red).
  function plotParallel(s) {
    const svg = $("sweep-parallel");
    svg.replaceChildren();
    const o = objectiveOf(s);
    const done = s.trials.filter((t) => t.objective !== null && t.status === "Complete");
    const axes = s.request.search_space.map((p) => ({
      name: p.name,
      pos: p.distribution === "choice"
        ? ((v) => (p.choices.length < 2 ? 0.5 : p.choices.findIndex((c) => JSON.stringify(c) === JSON.stringify(v)) /
                                                  (p.choices.length - 1)))
        : p.distribution === "loguniform"
          ? ((v) => (Math.log(v) - Math.log(p.min)) / (Math.log(p.max) - Math.log(p.min)))
          : ((v) => (v - p.min) / (p.max - p.min)),
      labels: p.distribution === "choice" ? [short(p.choices[0]), short(p.choices[p.choices.length - 1])]
                                          : [short(p.min), short(p.max)],
    }));
    const values = done.map((t) => t.objective);
    const lo = Math.min(...values), hi = Math.max(...values);
    axes.push({ name: o.metric, pos: (v) => (hi === lo ? 0.5 : (v - lo) / (hi - lo)),
                labels: values.length ? [short(lo), short(hi)] : ["", ""] });
    const w = Math.max(320, svg.parentElement.clientWidth - 20), h = 240, top = 24, bottom = 24, left = 40;
    svg.setAttribute("width", w);
    svg.setAttribute("height", h);
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    const step = axes.length > 1 ? (w - 2 * left) / (axes.length - 1) : 0;
    const x = (i) => left + i * step;
    const y = (f) => top + (1 - Math.min(1, Math.max(0, f))) * (h - top - bottom);
    const node = (tag, attrs, text) => {
      const e = document.createElementNS(SVG, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text !== undefined) e.textContent = text;
      svg.appendChild(e);
      return e;
    };
    for (const t of done) {
      const f = hi === lo ? 0 : (t.objective - lo) / (hi - lo);
      const good = o.direction === "maximize" ? f : 1 - f; // 1: the best
      const points = axes.map((a, i) => {
        const v = i < axes.length - 1 ? t.parameters[a.name] : t.objective;
        return x(i).toFixed(1) + "," + y(a.pos(v)).toFixed(1);
      });
      const line = node("polyline", { points: points.join(" "), fill: "none", "stroke-width": 1.5,
                                      stroke: "hsl(" + Math.round(good * 120) + ", 70%, 42%)", "stroke-opacity": 0.8 });
      line.dataset.trial = t.name;
      const tip = document.createElementNS(SVG, "title");
      tip.textContent = t.name + ": " + o.metric + " " + short(t.objective);
      line.appendChild(tip);
    }
    axes.forEach((a, i) => {
      node("line", { x1: x(i), x2: x(i), y1: top, y2: h - bottom, stroke: "#6b7385" }).dataset.axis = a.name;
      node("text", { x: x(i), y: top - 8, "text-anchor": "middle", "font-size": 12 }, a.name);
      node("text", { x: x(i) + 4, y: h - bottom + 14, "font-size": 10, fill: "#6b7385" }, a.labels[0]);
      node("text", { x: x(i) + 4, y: top + 10, "font-size": 10, fill: "#6b7385" }, a.labels[1]);
    });
    svg.dataset.lines = String(done.length);
  }

  // Each metric's values in the order the trial reported them (its history), one line per trial.
  function plotCurves(s) {
    const box = $("sweep-curves");
    if (typeof uPlot === "undefined") return;
    const byMetric = new Map();
    for (const t of s.trials)
      for (const m of t.metrics) {
        if (!m.history.length) continue;
        if (!byMetric.has(m.name)) byMetric.set(m.name, []);
        byMetric.get(m.name).push({ trial: t.name, history: m.history });
      }
    $("no-curves").hidden = byMetric.size > 0;
    for (const [name, lines] of byMetric) {
      const shown = lines.slice(0, 40); // a chart stays readable
      const longest = Math.max(...shown.map((l) => l.history.length));
      const xs = Array.from({ length: longest }, (_, i) => i + 1);
      const data = [xs, ...shown.map((l) => xs.map((x) => (x <= l.history.length ? l.history[x - 1][1] : null)))];
      const key = name + "|" + shown.map((l) => l.trial).join(",");
      let c = state.charts.get(name);
      if (!c || c.key !== key) {
        if (c) c.el.remove();
        const holder = el("div", null, "chart");
        holder.dataset.metric = name;
        box.appendChild(holder);
        const opts = {
          title: name + " per trial, by report", width: Math.max(280, box.clientWidth - 10), height: 200,
          scales: { x: { time: false } },
          axes: [{ incrs: whole }, {}],
          series: [{ label: "report" }, ...shown.map((l, i) => ({
            label: l.trial, stroke: "hsl(" + ((i * 47) % 360) + ", 60%, 45%)", width: 1.5, spanGaps: true,
            points: { show: true, size: 3 } }))],
        };
        c = { el: holder, key, plot: new uPlot(opts, data, holder) };
        state.charts.set(name, c);
      } else {
        c.plot.setData(data);
      }
      c.el.dataset.lines = String(shown.length);
      c.el.dataset.points = String(shown.reduce((n, l) => n + l.history.length, 0));
    }
  }

  function renderSweep(s) {
    state.sweep = s;
    $("sweep-name").textContent = s.name;
    $("sweep-status").textContent = s.status + (s.reason ? " (" + s.reason + ")" : "") +
      (!ended(s.status) && !s.owned ? " (no owner: tjob optimize --resume " + s.name + ")" : "");
    $("sweep-status").className = "status " + s.status;
    const o = objectiveOf(s);
    const done = s.trials.filter((t) => ended(t.status)).length;
    $("sweep-summary").textContent = o.direction + " " + o.metric + "; " + s.request.algorithm + " (seed " +
      s.request.seed + "); " + done + " of " + s.request.num_trials + " trials ended, " +
      s.request.parallel_trials + " at once";
    $("sweep-best").textContent = "Best: " + bestText(s);
    $("sweep-cancel").disabled = ended(s.status);
    renderTrials(s);
    plotObjective(s);
    plotParallel(s);
    plotCurves(s);
  }

  // Reads what is shown again (once at a time; a change while reading reads once more).
  async function refresh() {
    if (state.view === undefined) return;
    if (state.reading) {
      state.again = true;
      return;
    }
    state.reading = true;
    try {
      do {
        state.again = false;
        const shown = state.view;
        if (shown !== null && shown === state.deleting) continue;
        if (shown === null) {
          state.sweeps = (await ui.json("GET", "/v1/sweeps")).items;
          if (state.view === null) renderList();
        } else {
          let s;
          try {
            s = await ui.json("GET", "/v1/sweeps/" + encodeURIComponent(shown));
          } catch (e) {
            $("sweep-name").textContent = shown;
            $("sweep-status").textContent = "(" + e.message + ")";
            continue;
          }
          if (state.view === shown) renderSweep(s);
        }
      } while (state.again);
    } finally {
      state.reading = false;
    }
  }

  async function act(what) {
    const name = state.view;
    if (!name) return;
    const sure = what === "cancel"
      ? confirm("Cancel sweep " + name + "? Its trials that have not ended are cancelled.")
      : confirm("Delete sweep " + name + "? It is cancelled, and every trial's job is deleted with it.");
    if (!sure) return;
    $("sweep-action-result").textContent = what === "cancel" ? "cancelling..." : "deleting...";
    if (what === "delete") state.deleting = name; // its trials' deletions are seen first: no read of it now
    try {
      const path = "/v1/sweeps/" + encodeURIComponent(name);
      const r = what === "cancel" ? await ui.api("POST", path + "/cancel") : await ui.api("DELETE", path);
      const body = await r.json();
      if (!r.ok) throw new Error(body.message || r.status);
      $("sweep-action-result").textContent = what === "cancel" ? "cancelled" : "deleted";
      if (what === "delete") location.hash = "#sweeps";
      else renderSweep(body);
    } catch (e) {
      $("sweep-action-result").textContent = what + " failed: " + e.message;
    } finally {
      state.deleting = null;
    }
  }

  window.tjobSweeps = {
    // app.js's router: undefined when a job view is shown, null for the list, else a sweep's name.
    route(name) {
      if (name !== state.view) {
        state.sort = null;
        state.charts.clear();
        $("sweep-curves").replaceChildren($("no-curves"));
        $("sweep-objective").replaceChildren();
        state.objective = null;
        $("sweep-action-result").textContent = "";
      }
      state.view = name;
      $("sweeps-view").hidden = name !== null;
      $("sweep-view").hidden = name === null || name === undefined;
      refresh();
    },
    // Every job change the dashboard's watch sees: a trial's (a member of the sweep's array) reads
    // the sweep again.
    // The sweep's owner records a trial's end (its metrics) just after the job's: read once more a
    // moment later, so the page does not stop one change behind.
    jobChanged(job) {
      if (state.view === undefined) return;
      if (!(state.view === null || job.array === state.view || job.name.startsWith(state.view + "-"))) return;
      refresh();
      if (!state.later) state.later = setTimeout(() => { state.later = null; refresh(); }, 500);
    },
  };
  $("sweep-cancel").addEventListener("click", () => act("cancel"));
  $("sweep-delete").addEventListener("click", () => act("delete"));
})();
