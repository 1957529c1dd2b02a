/*
 * admin-ui front-end: the live rates (admin-ui's sampler, GET /api/rates; see admin-ui/API.md).
 *
 * This file owns the inline SVG sparkline renderer (plain SVG, no library), the rate and
 * latency formats, and the rate sections the pages add: the columns of the topics list, the
 * `#rates` section of the topic, channel and node pages, the channel rows' rates on a topic
 * page. It is loaded before app.js and only defines functions; they use app.js's helpers
 * (el, api, generation) when called. While a page is shown its rates are fetched again every
 * sample interval (at least every 2 s); app.js's route() stops that (stopRates()).
 *
 * DOM contract (admin-ui/UI.md): `#rates[data-loaded="true"]`, `#rate-in`, `#rate-out`
 * ("<n> msg/s" or "—"), `#rate-depth`, `#rate-e2e`, `svg.sparkline[data-series][data-points]`.
 */
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
/* The refresh timers of the shown page's rates. */
let ratesTimers = [];

/* Stops refreshing the rates (app.js's route() calls it on every route). */
function stopRates() {
  ratesTimers.forEach(clearInterval);
  ratesTimers = [];
}

/* ---------- formats ---------- */

const known = (v) => v !== null && v !== undefined && Number.isFinite(v);

/* Messages per second, one decimal; "—" when not known. */
function rateText(v) {
  return known(v) ? `${Math.round(v * 10) / 10} msg/s` : '—';
}

/* A latency in nanoseconds as milliseconds. */
function latencyText(ns) {
  return known(ns) ? `${(ns / 1e6).toFixed(2)} ms` : '—';
}

function bytesText(b) {
  if (!known(b)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i += 1; }
  return `${Math.round(b * 10) / 10} ${units[i]}`;
}

/* ---------- sparkline ---------- */

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  node.append(...children);
  return node;
}

/* An inline SVG sparkline of `values` (null: not known, drawn as a gap), scaled from 0 to
 * their largest. With `times` (Unix ms), x is the time: the width spans from the first point
 * (or `windowMs` before the last, when older) to the last, so a gap in sampling shows as one;
 * else points are evenly spaced. */
function sparkline(values, { series, times = null, windowMs = 0, width = 160, height = 30, title = '' }) {
  const points = values.map((v, i) => [i, v]).filter(([, v]) => known(v));
  const max = points.reduce((m, [, v]) => Math.max(m, v), 0) || 1;
  const last = times && times.length ? times[times.length - 1] : 0;
  const span = times && times.length > 1 ? Math.min(windowMs || Infinity, last - times[0]) : 0;
  const x = (i) => {
    if (span > 0) return 1 + ((times[i] - (last - span)) / span) * (width - 2);
    return values.length < 2 ? width - 1 : 1 + (i * (width - 2)) / (values.length - 1);
  };
  const y = (v) => height - 2 - (v / max) * (height - 5); // 3 px clear at the top, 2 at the bottom
  let d = '';
  let pen = false;
  values.forEach((v, i) => {
    if (!known(v)) { pen = false; return; }
    d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)} ${y(v).toFixed(1)}`;
    pen = true;
  });
  const lastPoint = points.length ? points[points.length - 1] : null;
  return svg('svg', {
    class: 'sparkline', 'data-series': series, 'data-points': points.length,
    'data-max': Math.round(max * 1000) / 1000,
    width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': title || series,
  },
  svg('title', {}, `${title || series} (max ${Math.round(max * 10) / 10})`),
  svg('path', { d: d || 'M0 0', fill: 'none', stroke: 'currentColor', 'stroke-width': 1.5 }),
  lastPoint ? svg('circle', { cx: x(lastPoint[0]).toFixed(1), cy: y(lastPoint[1]).toFixed(1), r: 2 }) : '');
}

/* ---------- fetching ---------- */

/* Calls `fill(answer)` with GET /api/rates<query> now and then every sample interval while
 * the page that asked is shown; `onError(err)` when a fetch fails. */
function followRates(query, fill, onError) {
  const gen = generation;
  let busy = false;
  let timer = null;
  const load = async () => {
    if (busy) return;
    busy = true;
    try {
      const data = await api('GET', `/api/rates${query}`);
      if (gen !== generation) return;
      fill(data);
      if (data.enabled && timer === null) {
        timer = setInterval(load, Math.max(2, data.interval) * 1000);
        ratesTimers.push(timer);
      }
    } catch (err) {
      if (gen === generation) onError(err);
    } finally {
      busy = false;
    }
  };
  load();
}

/* ---------- the #rates section of the topic, channel and node pages ---------- */

/* `what`: {topic} | {topic, channel} | {node}. The section is empty until the first answer;
 * with the sampler off it says so. */
function ratesSection(what) {
  const section = el('section', { id: 'rates', class: 'rates', 'data-loaded': 'false' },
    el('h2', {}, 'Live rates'), el('p', { class: 'muted' }, 'sampling…'));
  const query = `?${new URLSearchParams(what)}`;
  followRates(query, (data) => {
    section.replaceChildren(el('h2', {}, 'Live rates'), ...ratesBody(data, what));
    section.dataset.loaded = 'true';
  }, (err) => {
    section.replaceChildren(el('h2', {}, 'Live rates'),
      el('p', { id: 'rates-error', class: 'muted' }, `unavailable (${err.message})`));
    section.dataset.loaded = 'true';
  });
  return section;
}

function ratesBody(data, what) {
  if (!data.enabled) {
    return [el('p', { class: 'muted' }, 'The sampler is off (--sample-interval 0).')];
  }
  const windowMs = data.window * 1000;
  const latest = data.latest || {};
  const spark = (series, values, title) => sparkline(values || [],
    { series, times: data.t, windowMs, width: 240, height: 36, title });
  const row = (id, label, text, series, values) => el('div', { class: 'rate-row' },
    el('span', { class: 'rate-label' }, label),
    el('span', { id, class: 'rate-value' }, text),
    spark(series, values, label));
  const rows = [
    row('rate-in', 'In', rateText(latest.in), 'in', data.in),
    row('rate-out', 'Out (FIN)', rateText(latest.out), 'out', data.out),
    row('rate-depth', 'Depth', known(latest.depth) ? num(latest.depth) : '—', 'depth', data.depth),
  ];
  if (what.channel) {
    rows.push(row('rate-in-flight', 'In flight', known(latest.in_flight) ? num(latest.in_flight) : '—',
      'in_flight', data.in_flight));
  }
  if (what.node) {
    rows.push(row('rate-memory', 'Memory (heap in use)', bytesText(latest.memory), 'memory', data.memory));
    rows.push(row('rate-clients', 'Clients', known(latest.clients) ? num(latest.clients) : '—',
      'clients', data.clients));
  }
  for (const [i, p] of (data.e2e || []).entries()) {
    rows.push(row(`rate-e2e-${i}`, `e2e p${Math.round(p.quantile * 1000) / 10}`,
      latencyText((latest.e2e || [])[i] && latest.e2e[i].value), `e2e-${p.quantile}`, p.values));
  }
  const e2eSummary = (latest.e2e || []).filter((p) => known(p.value))
    .map((p) => `p${Math.round(p.quantile * 1000) / 10} ${latencyText(p.value)}`).join(', ');
  return [
    el('div', { class: 'rate-grid' }, rows),
    el('p', { id: 'rate-e2e', class: 'muted' },
      e2eSummary ? `e2e processing latency: ${e2eSummary}` : 'no e2e latency reported (the brokers\' --e2e-processing-latency-percentile)'),
    el('p', { class: 'muted' }, `Sampled every ${data.interval} s over the last ${data.window / 60} minutes; `
      + 'out counts messages FIN\'d by the clients connected at each sample.'),
  ];
}

/* ---------- rate cells of list tables ---------- */

/* Fills the rate cells of `table`'s rows (`tr[data-<attr>]`, whose `.rate-in`, `.rate-out`
 * and `.spark` cells were left empty) from /api/rates' summary, `pick(summary, name)`. */
function fillRateCells(table, attr, pick) {
  followRates('', (data) => {
    for (const tr of table.querySelectorAll(`tr[data-${attr}]`)) {
      const r = data.enabled ? pick(data, tr.dataset[attr]) : null;
      const cell = (cls) => tr.querySelector(`td.${cls}`);
      if (!cell('rate-in')) continue;
      cell('rate-in').textContent = rateText(r && r.in);
      cell('rate-out').textContent = rateText(r && r.out);
      cell('spark').replaceChildren(r ? sparkline(r.in_series || [], { series: 'in', title: 'messages/s in' }) : '');
    }
    table.dataset.ratesLoaded = 'true';
  }, () => { table.dataset.ratesLoaded = 'true'; });
}

/* The three empty cells fillRateCells fills. */
function rateCells() {
  return [el('td', { class: 'num rate-in' }, ''), el('td', { class: 'num rate-out' }, ''),
    el('td', { class: 'spark' }, '')];
}

const RATE_HEADINGS = ['In msg/s', 'Out msg/s', 'Last 30 min (in)'];

/* ---------- the lookup page's inactive topics ---------- */

/* The lookups' topics no producer has (GET /api/topics?inactive=true), with their channels. */
function inactiveTopics() {
  const box = el('div', { id: 'inactive', 'data-loaded': 'false' }, el('p', { class: 'muted' }, 'loading…'));
  const gen = generation;
  api('GET', '/api/topics?inactive=true').then((data) => {
    if (gen !== generation) return;
    // As nsqadmin's lookup page: each inactive topic and channel with its delete action.
    const rows = Object.entries(data.topics || {}).map(([t, known]) => [t, known || []]).map(([t, channels]) =>
      el('tr', { 'data-topic': t },
        el('td', {}, actionButton('delete-topic', '✘', () => runAction({
          confirm: `Delete topic "${t}" at every lookup and broker?`,
          method: 'DELETE', path: `/api/topics/${enc(t)}`,
        })), ' ', link(href(`/topics/${enc(t)}`), t)),
        el('td', {}, channels.length ? el('ul', { class: 'plain' }, channels.map((c) =>
          el('li', { 'data-channel': c }, actionButton('delete-channel', '✘', () => runAction({
            confirm: `Delete channel "${c}" of topic "${t}"?`,
            method: 'DELETE', path: `/api/topics/${enc(t)}/${enc(c)}`,
          })), ' ', link(href(`/topics/${enc(t)}/${enc(c)}`), c)))) : '—')));
    box.replaceChildren(table('inactive-topics', ['Topic', 'Channels'], rows,
      'No inactive topics: every topic the lookups know has a producer.'));
    box.dataset.loaded = 'true';
  }).catch((err) => {
    if (gen !== generation) return;
    box.replaceChildren(el('p', { class: 'muted' }, `unavailable (${err.message})`));
    box.dataset.loaded = 'true';
  });
  return box;
}
