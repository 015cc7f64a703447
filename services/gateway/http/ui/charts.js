// Charts: learning curves and scatter plots with uPlot (the global from
// vendor/uPlot.iife.min.js), parallel coordinates as plain SVG.
import { el, number } from "./util.js";

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"];

export function color(index) {
  return COLORS[index % COLORS.length];
}

// Whole-number steps for the batches axis: 1, 2, 5, 10, 20, 50, ...
const STEP_INCREMENTS = Array.from({ length: 30 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));

function width(container) {
  return Math.max(300, (container.clientWidth || container.parentNode.clientWidth || 620) - 20);
}

// A line chart over steps (batches) in `container`: update(series, {log}) draws
// series = [{label, steps, values, color, dash}] and sets data-points to the
// number of points drawn over all of them.
export function lineChart(container, { height = 320, xLabel = "Batches", yLabel = "" } = {}) {
  let plot = null;
  let shape = "";
  const resize = () => plot && plot.setSize({ width: width(container), height });
  window.addEventListener("resize", resize);

  function update(series, { log = false } = {}) {
    const drawn = series.filter((s) => s.steps.length);
    const points = drawn.reduce((sum, s) => sum + s.steps.length, 0);
    const clean = (v) => (typeof v !== "number" || !Number.isFinite(v) || (log && v <= 0) ? null : v);
    const data = drawn.length
      ? uPlot.join(drawn.map((s) => [s.steps, s.values.map(clean)]))
      : [[]];
    const newShape = JSON.stringify([log, drawn.map((s) => s.label)]);
    if (!drawn.length) {
      if (plot) { plot.destroy(); plot = null; }
      shape = "";
      container.replaceChildren(el("p.empty", {}, "No metrics reported yet."));
    } else if (plot && newShape === shape) {
      plot.setData(data);
    } else {
      if (plot) plot.destroy();
      container.replaceChildren();
      shape = newShape;
      plot = new uPlot({
        width: width(container),
        height,
        scales: { x: { time: false }, y: log ? { distr: 3 } : {} },
        axes: [{ label: xLabel, incrs: STEP_INCREMENTS }, { label: yLabel, size: 70, values: (u, ticks) => ticks.map(number) }],
        series: [{ label: xLabel }, ...drawn.map((s) => ({
          label: s.label,
          stroke: s.color,
          dash: s.dash,
          width: 1.5,
          spanGaps: true,
          points: { show: s.steps.length === 1 },
          value: (u, v) => number(v),
        }))],
      }, data, container);
    }
    if (drawn.length) container.dataset.points = String(points);
    else delete container.dataset.points;
  }

  return { update, destroy() { window.removeEventListener("resize", resize); if (plot) plot.destroy(); } };
}

// Metric against one hyperparameter, points only; categorical values are
// placed at their index among the distinct values.
export function scatterPlot(container, hpName, metricName, rows) {
  const numeric = rows.every((r) => typeof r.hp === "number");
  const categories = numeric ? [] : [...new Set(rows.map((r) => String(r.hp)))].sort();
  const placed = rows
    .map((r) => [numeric ? r.hp : categories.indexOf(String(r.hp)), r.metric])
    .sort((a, b) => a[0] - b[0]);
  const figure = el("div.scatter");
  container.append(figure);
  // Ranges of our own: uPlot's automatic y range looks only between the first
  // and last index of the x range, which misses repeated x values at its ends.
  const padded = (values) => {
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    const pad = hi > lo ? (hi - lo) * 0.08 : Math.abs(lo) * 0.1 || 1;
    return [lo - pad, hi + pad];
  };
  const yRange = padded(placed.map((p) => p[1]));
  const xRange = numeric ? padded(placed.map((p) => p[0])) : [-0.5, categories.length - 0.5];
  new uPlot({
    title: hpName,
    width: 300,
    height: 220,
    scales: { x: { time: false, range: () => xRange }, y: { range: () => yRange } },
    legend: { show: false },
    axes: [
      numeric ? { label: hpName, values: (u, t) => t.map(number) }
        : { label: hpName, incrs: [1], values: (u, t) => t.map((i) => categories[i] ?? "") },
      { label: metricName, size: 60, values: (u, t) => t.map(number) },
    ],
    series: [{}, { stroke: color(0), fill: color(0), paths: () => null, points: { show: true, size: 7 } }],
  }, [placed.map((p) => p[0]), placed.map((p) => p[1])], figure);
}

// Parallel coordinates: one vertical axis per hyperparameter plus the metric,
// one polyline per trial coloured from best (blue) to worst (red).
export function parallelCoordinates(container, names, metricName, rows, smallerIsBetter = true) {
  const axes = [...names, metricName];
  const w = Math.max(400, container.clientWidth || 700);
  const h = 300;
  const pad = { top: 30, bottom: 30, side: 60 };
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("class", "parallel");
  const add = (tag, attributes, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attributes)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  const x = (i) => pad.side + (i * (w - 2 * pad.side)) / Math.max(1, axes.length - 1);
  const scales = axes.map((axis, i) => {
    const values = rows.map((r) => (i === axes.length - 1 ? r.metric : r.hps[axis]));
    if (values.every((v) => typeof v === "number")) {
      const lo = Math.min(...values);
      const hi = Math.max(...values);
      return { position: (v) => (hi === lo ? 0.5 : (v - lo) / (hi - lo)), ticks: [[0, lo], [1, hi]] };
    }
    const categories = [...new Set(values.map(String))].sort();
    const at = (v) => (categories.length === 1 ? 0.5 : categories.indexOf(String(v)) / (categories.length - 1));
    return { position: at, ticks: categories.map((c) => [at(c), c]) };
  });
  const y = (fraction) => h - pad.bottom - fraction * (h - pad.top - pad.bottom);
  const metrics = rows.map((r) => r.metric);
  const lo = Math.min(...metrics);
  const hi = Math.max(...metrics);
  for (const row of rows) {
    let goodness = hi === lo ? 0.5 : (row.metric - lo) / (hi - lo);
    if (!smallerIsBetter) goodness = 1 - goodness;
    const hue = Math.round(220 - 220 * goodness);
    const points = axes.map((axis, i) => {
      const value = i === axes.length - 1 ? row.metric : row.hps[axis];
      return `${x(i)},${y(scales[i].position(value))}`;
    });
    const line = add("polyline", { points: points.join(" "), fill: "none", stroke: `hsl(${hue},70%,45%)`, "stroke-width": 1.5 });
    line.append(Object.assign(document.createElementNS(ns, "title"), { textContent: `trial ${row.trialId}: ${number(row.metric)}` }));
  }
  axes.forEach((axis, i) => {
    add("line", { x1: x(i), x2: x(i), y1: y(0), y2: y(1), stroke: "#333" });
    const anchor = i === 0 ? "start" : i === axes.length - 1 ? "end" : "middle";
    add("text", { x: x(i), y: pad.top - 12, "text-anchor": anchor, class: "axis-name" }, axis);
    for (const [at, label] of scales[i].ticks) {
      add("text", { x: x(i) + 4, y: y(at) + 4, class: "tick" }, typeof label === "number" ? number(label) : label);
    }
  });
  container.replaceChildren(svg);
}
