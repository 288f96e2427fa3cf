// The dashboard's script (sweeps/interactive.py inlines it): sortable tables, the cost table,
// training curves and the per-QG view, drawn as SVG from LTR_DATA. No library, no network.
(function () {
  "use strict";
  const D = (typeof LTR_DATA !== "undefined") ? LTR_DATA : {runs: [], colours: {}, k: 5};
  const SVG = "http://www.w3.org/2000/svg";
  const colour = (model) => D.colours[model] || "#555";
  const fmt = (v, d) => (v === null || v === undefined || !isFinite(v)) ? "–" : Number(v).toFixed(d);

  function el(tag, attrs, text) {
    const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                        : document.createElement(tag);
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

  // One SVG line chart: series [{label, colour, model, points: [[x, y]]}].
  function chart(title, series, width, height) {
    const pad = {l: 52, r: 12, t: 22, b: 30};
    const xs = series.flatMap((s) => s.points.map((p) => p[0]));
    const ys = series.flatMap((s) => s.points.map((p) => p[1]));
    const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
    let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
    const sx = (x) => pad.l + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (width - pad.l - pad.r);
    const sy = (y) => height - pad.b - (y - y0) / (y1 - y0) * (height - pad.t - pad.b);
    const svg = el("svg:svg", {width, height, class: "ltr-chart"});
    svg.appendChild(el("svg:text", {x: pad.l, y: 14, "font-size": 12, "font-weight": "bold"}, title));
    svg.appendChild(el("svg:line", {x1: pad.l, y1: height - pad.b, x2: width - pad.r, y2: height - pad.b, stroke: "#999"}));
    svg.appendChild(el("svg:line", {x1: pad.l, y1: pad.t, x2: pad.l, y2: height - pad.b, stroke: "#999"}));
    for (const y of [y0, (y0 + y1) / 2, y1]) {
      svg.appendChild(el("svg:text", {x: 4, y: sy(y) + 4, "font-size": 10}, y.toPrecision(3)));
    }
    svg.appendChild(el("svg:text", {x: pad.l, y: height - 8, "font-size": 10}, String(x0)));
    svg.appendChild(el("svg:text", {x: width - pad.r - 30, y: height - 8, "font-size": 10}, String(x1)));
    for (const s of series) {
      const g = el("svg:g", {"data-model": s.model});
      const path = s.points.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
      g.appendChild(el("svg:polyline", {points: path, fill: "none", stroke: s.colour, "stroke-width": 1.5, opacity: 0.85}));
      for (const p of s.points) {
        const dot = el("svg:circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: s.colour});
        dot.appendChild(el("svg:title", {}, s.label + ": " + p[0] + ", " + fmt(p[1], 4)));
        g.appendChild(dot);
      }
      svg.appendChild(g);
    }
    return svg;
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

  function curvesView() {
    const box = document.getElementById("ltr-curves");
    box.appendChild(el("h3", {}, "Training curves (hover a point; tick models on and off)"));
    const views = [...new Set(D.runs.map((r) => r.dataset + " · " + r.setting))].sort();
    if (!views.length) { box.appendChild(el("p", {}, "No finished run.")); return; }
    const pick = el("select", {id: "ltr-curves-setting"});
    views.forEach((v) => pick.appendChild(el("option", {value: v}, v)));
    const models = [...new Set(D.runs.map((r) => r.model))].sort();
    const hidden = new Set();
    const area = el("div", {id: "ltr-curves-area"});
    const draw = () => {
      area.textContent = "";
      const runs = D.runs.filter((r) => r.dataset + " · " + r.setting === pick.value);
      const names = [...new Set(runs.flatMap((r) => Object.keys(r.curves)))].sort();
      if (!names.length) area.appendChild(el("p", {}, "These runs kept no training history."));
      for (const name of names) {
        const series = runs.filter((r) => r.curves[name] && !hidden.has(r.model)).map((r) => ({
          label: r.model + (r.fold == null ? "" : " fold " + r.fold) + " seed " + r.seed, model: r.model, colour: colour(r.model),
          points: r.curves[name]}));
        if (series.length) area.appendChild(chart(name, series, 420, 230));
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
      area.textContent = "";
      const ra = runs[+a.value], rb = runs[+b.value];
      const index = new Map(rb.qg.qids.map((q, i) => [q, i]));
      const size = 360, pad = 40, s = (v) => pad + v * (size - 2 * pad);
      const svg = el("svg:svg", {width: size, height: size, class: "ltr-chart"});
      svg.appendChild(el("svg:line", {x1: s(0), y1: size - s(0), x2: s(1), y2: size - s(1), stroke: "#bbb"}));
      svg.appendChild(el("svg:rect", {x: s(0), y: size - s(1), width: s(1) - s(0), height: s(1) - s(0), fill: "none", stroke: "#999"}));
      for (const v of [0, 0.5, 1]) {
        svg.appendChild(el("svg:text", {x: s(v) - 6, y: size - pad + 14, "font-size": 10}, String(v)));
        svg.appendChild(el("svg:text", {x: pad - 22, y: size - s(v) + 4, "font-size": 10}, String(v)));
      }
      svg.appendChild(el("svg:text", {x: pad + 30, y: size - 8, "font-size": 11}, "x: " + ra.model + " seed " + ra.seed));
      svg.appendChild(el("svg:text", {x: 4, y: 14, "font-size": 11}, "y: " + rb.model + " seed " + rb.seed));
      let wins = 0, losses = 0, shared = 0;
      ra.qg.qids.forEach((q, i) => {
        const j = index.get(q), x = ra.qg.ndcg[i];
        if (j === undefined || x === null || rb.qg.ndcg[j] === null) return;
        const y = rb.qg.ndcg[j], outlier = ra.qg.outlier[i];
        shared += 1; if (x > y) wins += 1; if (y > x) losses += 1;
        const dot = el("svg:circle", {cx: s(x), cy: size - s(y), r: outlier ? 5 : 3,
          fill: outlier ? "#d62728" : "#1f77b4", opacity: outlier ? 0.9 : 0.5, class: outlier ? "outlier" : "qg"});
        dot.appendChild(el("svg:title", {}, "qid " + q + (outlier ? " (outlier)" : "") + ": " + fmt(x, 3) + " vs " + fmt(y, 3)));
        svg.appendChild(dot);
      });
      area.appendChild(svg);
      area.appendChild(el("p", {class: "note"}, shared + " test QGs scored by both: " + ra.model +
        " higher on " + wins + ", " + rb.model + " higher on " + losses + ", tied on " + (shared - wins - losses) + "."));
    };
    a.addEventListener("change", draw); b.addEventListener("change", draw);
    box.append(a, " vs ", b, area);
    draw();
  }

  function start() {
    if (document.getElementById("ltr-cost")) { costTable(); curvesView(); qgView(); }
    document.querySelectorAll("table").forEach(makeSortable);
    // #sort=<table id>:<column>[:asc] sorts one table on load (a link to a sorted view).
    const match = /sort=([\w-]+):(\d+)(:asc)?/.exec(location.hash);
    const table = match && document.getElementById(match[1]);
    if (table) sortTable(table, +match[2], !match[3]);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
