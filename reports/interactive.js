// The dashboard's script (reports/interactive.py inlines it): sortable tables, the cost table,
// training curves and the per-QG view, drawn from LTR_DATA by plotly.js (inlined once in the
// page's head; no network). Names from the runs reach the page as text: textContent in HTML,
// esc() where plotly.js draws them (it reads a few tags in its strings).
(function () {
  "use strict";
  const D = (typeof LTR_DATA !== "undefined") ? LTR_DATA : {runs: [], colours: {}, k: 5};
  const colour = (model) => D.colours[model] || "#555";
  const fmt = (v, d) => (v === null || v === undefined || !isFinite(v)) ? "–" : Number(v).toFixed(d);
  const esc = (text) => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const CONFIG = {displaylogo: false, responsive: true};

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Sorting: a click on a header sorts the rows below it (numbers as numbers, "–" last).
  function cellValue(row, col) {
    const cell = row.children[col];
    const text = cell ? cell.textContent.trim() : "";
    const number = parseFloat(text.replace(/[%±].*$/, ""));
    return isNaN(number) ? text.toLowerCase() : number;
  }
  function sortTable(table, col, descending) {
    const rows = Array.from(table.querySelectorAll("tr")).filter((r) => r.querySelector("td"));
    const sign = descending ? -1 : 1;
    rows.sort((a, b) => {
      const x = cellValue(a, col), y = cellValue(b, col);
      if (x === y) return 0;
      if (x === "–" || x === "") return 1;
      if (y === "–" || y === "") return -1;
      if (typeof x === typeof y) return (x < y ? -1 : 1) * sign;
      return typeof x === "number" ? -1 : 1;
    });
    const parent = rows.length ? rows[0].parentNode : table;
    rows.forEach((r) => parent.appendChild(r));
    table.dataset.sorted = col + (descending ? ":desc" : ":asc");
  }
  function makeSortable(table) {
    const header = table.querySelector("tr");
    if (!header) return;
    Array.from(header.children).forEach((th, col) => {
      th.style.cursor = "pointer";
      th.title = "click to sort";
      th.addEventListener("click", () => {
        const descending = table.dataset.sorted !== col + ":desc";
        sortTable(table, col, descending);
      });
    });
  }

  // The cost of each model beside its quality.
  function costTable() {
    const byModel = {};
    for (const r of D.runs) (byModel[r.model] = byModel[r.model] || []).push(r);
    const mean = (xs) => { const v = xs.filter((x) => x !== null && isFinite(x));
                           return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null; };
    const table = el("table", {id: "ltr-cost-table"});
    const head = el("tr");
    for (const h of ["model", "runs", "mean seconds", "train items/s", "mean vali NDCG@" + D.k,
                     "mean test NDCG@" + D.k]) head.appendChild(el("th", {class: "name"}, h));
    table.appendChild(head);
    for (const [model, runs] of Object.entries(byModel).sort()) {
      const tr = el("tr");
      const name = el("td", {class: "name"}, model);
      name.style.borderLeft = "6px solid " + colour(model);
      tr.appendChild(name);
      tr.appendChild(el("td", {}, String(runs.length)));
      tr.appendChild(el("td", {}, fmt(mean(runs.map((r) => r.seconds)), 1)));
      tr.appendChild(el("td", {}, fmt(mean(runs.map((r) => r.items_per_s)), 0)));
      tr.appendChild(el("td", {}, fmt(mean(runs.map((r) => r.vali)), 4)));
      tr.appendChild(el("td", {}, fmt(mean(runs.map((r) => r.test)), 4)));
      table.appendChild(tr);
    }
    const box = document.getElementById("ltr-cost");
    box.appendChild(el("h3", {}, "Cost per model (mean over its runs)"));
    box.appendChild(table);
  }

  // One plotly line chart in a new div: series [{label, colour, model, points: [[x, y]]}].
  function chart(area, title, series) {
    const div = el("div", {class: "ltr-chart"});
    div.style.display = "inline-block";
    div.style.width = "48%";
    area.appendChild(div);
    const traces = series.map((s) => ({
      type: "scatter", mode: "lines+markers", name: esc(s.label), legendgroup: esc(s.model),
      x: s.points.map((p) => p[0]), y: s.points.map((p) => p[1]),
      line: {color: s.colour, width: 1.5}, marker: {size: 5},
      hovertemplate: esc(s.label) + "<br>%{x}: %{y:.4f}<extra></extra>",
    }));
    const layout = {title: {text: esc(title), font: {size: 13}, x: 0.02, xanchor: "left"}, height: 300,
                    margin: {l: 55, r: 10, t: 40, b: 40}, showlegend: false, hovermode: "closest",
                    xaxis: {title: {text: "epoch / step"}}, yaxis: {automargin: true}};
    Plotly.newPlot(div, traces, layout, CONFIG);
  }

  function legend(models, onToggle) {
    const box = el("div", {class: "ltr-legend"});
    for (const model of models) {
      const label = el("label", {});
      label.style.marginRight = "14px";
      const box_ = el("input", {type: "checkbox", "data-model": model});
      box_.checked = true;
      box_.addEventListener("change", () => onToggle(model, box_.checked));
      const swatch = el("span", {}, "■ ");
      swatch.style.color = colour(model);
      label.append(box_, swatch, model);
      box.appendChild(label);
    }
    return box;
  }

  function clear(area) {
    area.querySelectorAll(".js-plotly-plot").forEach((div) => Plotly.purge(div));
    area.textContent = "";
  }

  function curvesView() {
    const box = document.getElementById("ltr-curves");
    box.appendChild(el("h3", {}, "Training curves (hover a point, drag to zoom; tick models on and off)"));
    const views = [...new Set(D.runs.map((r) => r.dataset + " · " + r.setting))].sort();
    if (!views.length) { box.appendChild(el("p", {}, "No finished run.")); return; }
    const pick = el("select", {id: "ltr-curves-setting"});
    views.forEach((v) => pick.appendChild(el("option", {value: v}, v)));
    const models = [...new Set(D.runs.map((r) => r.model))].sort();
    const hidden = new Set();
    const area = el("div", {id: "ltr-curves-area"});
    const draw = () => {
      clear(area);
      const runs = D.runs.filter((r) => r.dataset + " · " + r.setting === pick.value);
      const names = [...new Set(runs.flatMap((r) => Object.keys(r.curves)))].sort();
      if (!names.length) area.appendChild(el("p", {}, "These runs kept no training history."));
      for (const name of names) {
        const series = runs.filter((r) => r.curves[name] && !hidden.has(r.model)).map((r) => ({
          label: r.model + (r.fold == null ? "" : " fold " + r.fold) + " seed " + r.seed, model: r.model, colour: colour(r.model),
          points: r.curves[name]}));
        if (series.length) chart(area, name, series);
      }
    };
    pick.addEventListener("change", draw);
    box.append(pick, legend(models, (model, on) => { on ? hidden.delete(model) : hidden.add(model); draw(); }), area);
    draw();
  }

  function qgView() {
    const box = document.getElementById("ltr-qg");
    const runs = D.runs.filter((r) => r.qg);
    box.appendChild(el("h3", {}, "Per test QG: NDCG@" + D.k + " of two runs (outlier QGs in red)"));
    if (runs.length < 2) { box.appendChild(el("p", {}, "Needs two runs with per-QG scores (runs of this version save them).")); return; }
    const a = el("select", {id: "ltr-qg-a"}), b = el("select", {id: "ltr-qg-b"});
    runs.forEach((r, i) => { a.appendChild(el("option", {value: i}, r.id)); b.appendChild(el("option", {value: i}, r.id)); });
    const other = runs.findIndex((r) => r.model !== runs[0].model && r.setting === runs[0].setting && r.seed === runs[0].seed && r.fold === runs[0].fold);
    b.value = String(other >= 0 ? other : 1);
    const area = el("div", {id: "ltr-qg-area"});
    const draw = () => {
      clear(area);
      const ra = runs[+a.value], rb = runs[+b.value];
      const index = new Map(rb.qg.qids.map((q, i) => [q, i]));
      const kinds = {qg: {x: [], y: [], text: []}, outlier: {x: [], y: [], text: []}};
      let wins = 0, losses = 0, shared = 0;
      ra.qg.qids.forEach((q, i) => {
        const j = index.get(q), x = ra.qg.ndcg[i];
        if (j === undefined || x === null || rb.qg.ndcg[j] === null) return;
        const y = rb.qg.ndcg[j], outlier = ra.qg.outlier[i];
        shared += 1; if (x > y) wins += 1; if (y > x) losses += 1;
        const kind = kinds[outlier ? "outlier" : "qg"];
        kind.x.push(x); kind.y.push(y);
        kind.text.push("qid " + q + (outlier ? " (outlier)" : "") + ": " + fmt(x, 3) + " vs " + fmt(y, 3));
      });
      const run = (r) => esc(r.model + (r.fold == null ? "" : " fold " + r.fold) + " seed " + r.seed);
      const traces = [
        {type: "scatter", mode: "lines", x: [0, 1], y: [0, 1], line: {color: "#bbb"}, hoverinfo: "skip", showlegend: false},
        {type: "scatter", mode: "markers", name: "test QGs", x: kinds.qg.x, y: kinds.qg.y, text: kinds.qg.text,
         marker: {color: "#1f77b4", size: 7, opacity: 0.55}, hovertemplate: "%{text}<extra></extra>"},
        {type: "scatter", mode: "markers", name: "outlier QGs", x: kinds.outlier.x, y: kinds.outlier.y, text: kinds.outlier.text,
         marker: {color: "#d62728", size: 10, opacity: 0.9}, hovertemplate: "%{text}<extra></extra>"},
      ];
      const div = el("div", {class: "ltr-chart", id: "ltr-qg-chart"});
      div.style.maxWidth = "560px";
      area.appendChild(div);
      Plotly.newPlot(div, traces, {
        height: 480, hovermode: "closest", margin: {l: 60, r: 10, t: 20, b: 50},
        xaxis: {title: {text: "x: " + run(ra)}, range: [-0.03, 1.03]},
        yaxis: {title: {text: "y: " + run(rb)}, range: [-0.03, 1.03], scaleanchor: "x"},
        legend: {x: 0.02, y: 0.98},
      }, CONFIG);
      area.appendChild(el("p", {class: "note"}, shared + " test QGs scored by both: " + ra.model +
        " higher on " + wins + ", " + rb.model + " higher on " + losses + ", tied on " + (shared - wins - losses) + "."));
    };
    a.addEventListener("change", draw); b.addEventListener("change", draw);
    box.append(a, " vs ", b, area);
    draw();
  }

  function start() {
    if (document.getElementById("ltr-cost")) {
      costTable();
      if (typeof Plotly === "undefined") {  // the page lost its inlined plotly.js
        document.getElementById("ltr-curves").appendChild(el("p", {class: "err"}, "plotly.js is missing from this page: no charts."));
      } else { curvesView(); qgView(); }
    }
    document.querySelectorAll("table").forEach(makeSortable);
    // #sort=<table id>:<column>[:asc] sorts one table on load (a link to a sorted view).
    const match = /sort=([\w-]+):(\d+)(:asc)?/.exec(location.hash);
    const table = match && document.getElementById(match[1]);
    if (table) sortTable(table, +match[2], !match[3]);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
