/*
 * admin-ui front-end: everything the browser does for the single page.
 *
 * This file owns the router (path-style URLs as nsqadmin's: /topics, /topics/<t>/<c>, ...,
 * under the --base-path the page names in <body data-base-path>; the old #/... links are
 * redirected to them), one render function per page (topics, topic, channel,
 * nodes, node, counter, lookup; the live rates they show are rates.js's, the sections for the
 * brokers' features beyond nsqd history.js's), the calls to the
 * JSON API described in admin-ui/API.md,
 * and the DOM contract of admin-ui/UI.md that the browser tests rely on: #app's
 * data-page / data-loaded attributes, #error, #warnings, and each page's ids and data
 * attributes.
 *
 * Rules kept throughout: data reaches the DOM only as text nodes or attribute values,
 * never as HTML; every name put in a URL or an API path goes through encodeURIComponent.
 */
'use strict';

const app = document.getElementById('app');
const errorBox = document.getElementById('error');
const warningList = document.getElementById('warnings');
const noticeBox = document.getElementById('notice');

/* The URL prefix everything is served under ("" or "/a/b"), from --base-path. */
const basePath = document.body.dataset.basePath || '';
/* Bumped on every route; an answer that arrives for an older generation is dropped. */
let generation = 0;
/* The path whose page #app currently shows (kept on screen while that page reloads). */
let shownPath = null;
/* The counter page's setInterval id, cleared whenever the route changes. */
let pollTimer = null;

/* Graphite and statsd settings (--graphite-url, --proxy-graphite, --statsd-*), from the page. */
const settings = JSON.parse(document.body.dataset.settings || '{}');

const enc = encodeURIComponent;
const numberFormat = new Intl.NumberFormat('en-US');

/* ---------- API ---------- */

/* Calls the JSON API; returns the parsed answer, throws an Error with the server's message. */
async function api(method, path, body) {
  const init = { method, headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(basePath + path, init);
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: reported below with the HTTP status instead.
  }
  if (!response.ok) {
    throw new Error((data && data.message) || `${response.status} ${response.statusText}`);
  }
  if (data === null) throw new Error(`${method} ${path}: answer is not JSON`);
  return data;
}

/* ---------- DOM helpers ---------- */

/* Creates an element; attrs are attributes (null/undefined/false skipped), "on…" keys are
 * event listeners; children are nodes or strings (appended as text, never parsed as HTML). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function link(href, text, attrs = {}) {
  return el('a', { href, ...attrs }, text);
}

const num = (n) => numberFormat.format(n ?? 0);
const numCell = (n) => el('td', { class: 'num' }, num(n));
const plainCell = (text) => el('td', { class: 'num' }, String(text ?? ''));
const stateText = (paused) => (paused ? 'paused' : 'active');
const stateCell = (paused) => el('td', { class: `state ${stateText(paused)}` }, stateText(paused));
/* A row's class list: `base` plus "paused" when paused (null when empty). */
const rowClass = (paused, base = '') => [base, paused ? 'paused' : ''].filter(Boolean).join(' ') || null;

/* A Unix timestamp in seconds as local date and time. */
function time(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : '—';
}

function table(id, headings, rows, emptyText) {
  const body = rows.length
    ? rows
    : [el('tr', { class: 'empty' }, el('td', { colspan: headings.length }, emptyText))];
  return el('table', { id },
    el('thead', {}, el('tr', {}, headings.map((heading) => el('th', {}, heading)))),
    el('tbody', {}, body));
}

/* A list of labelled values: pairs of [label, already formatted text]. */
function facts(id, pairs) {
  return el('dl', { id, class: 'facts' },
    pairs.map(([label, value]) => el('div', {}, el('dt', {}, label), el('dd', {}, value))));
}

function kicker(...parts) {
  return el('p', { class: 'kicker' }, parts);
}

function stateLine(id, paused) {
  return el('p', { class: 'state-line' }, 'State: ',
    el('span', { id, class: `state ${stateText(paused)}` }, stateText(paused)));
}

function actionButton(action, label, onClick) {
  return el('button', { type: 'button', 'data-action': action, class: `action-${action}`, onclick: onClick }, label);
}

/* ---------- errors and warnings ---------- */

function showError(err) {
  errorBox.textContent = err instanceof Error ? err.message : String(err);
  errorBox.hidden = false;
}

function clearError() {
  errorBox.textContent = '';
  errorBox.hidden = true;
}

/* What an action reports having done (e.g. a redrive's counts), until the next route. */
function showNotice(text) {
  noticeBox.textContent = text || '';
  noticeBox.hidden = !text;
}

function showWarnings(warnings = []) {
  warningList.replaceChildren(...warnings.map((warning) => el('li', {}, warning)));
}

/* ---------- router ---------- */

/* "<first path segment>/<segment count>" → page name. */
const ROUTES = {
  'topics/1': 'topics', 'topics/2': 'topic', 'topics/3': 'channel',
  'nodes/1': 'nodes', 'nodes/2': 'node',
  'counter/1': 'counter', 'lookup/1': 'lookup',
};

/* Each page: the API path it reads (from the route's decoded params) and its renderer. */
const PAGES = {
  topics: { path: () => '/api/topics', render: renderTopics },
  topic: { path: (topic) => `/api/topics/${enc(topic)}`, render: renderTopic },
  channel: { path: (topic, channel) => `/api/topics/${enc(topic)}/${enc(channel)}`, render: renderChannel },
  nodes: { path: () => '/api/nodes', render: renderNodes },
  node: { path: (node) => `/api/nodes/${enc(node)}`, render: renderNode },
  counter: { path: () => '/api/counter', render: renderCounter },
  lookup: { path: () => '/api/lookups', render: renderLookup },
};

/* A page's URL: "/topics/t" → "<base>/topics/t". */
const href = (path) => basePath + path;

/* "/topics/%23t/c" (under the base path) → {page: "channel", section: "topics",
 * params: ["#t", "c"]}, or null. */
function parsePath(pathname) {
  if (basePath && pathname !== basePath && !pathname.startsWith(`${basePath}/`)) return null;
  const raw = pathname.slice(basePath.length).replace(/^\/+/, '').replace(/\/+$/, '');
  let parts;
  try {
    parts = raw.split('/').map(decodeURIComponent);
  } catch {
    return null; // malformed percent-encoding
  }
  const page = ROUTES[`${parts[0]}/${parts.length}`];
  if (!page || parts.includes('')) return null;
  return { page, section: parts[0], params: parts.slice(1) };
}

function markNav(section) {
  for (const a of document.querySelectorAll('nav a')) {
    if (a.getAttribute('href') === href(`/${section}`)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

/* An old "#/topics/t" link (admin-ui's earlier URLs) becomes the path "<base>/topics/t". */
function redirectHash() {
  if (!location.hash.startsWith('#/')) return false;
  history.replaceState(null, '', href(`/${location.hash.slice(2)}`));
  return true;
}

/* Goes to `path` (a full path, base included) and shows its page. */
function navigate(path) {
  if (location.pathname !== path || location.hash) history.pushState(null, '', path);
  return route();
}

/* Shows the page the URL names (unknown ones become <base>/topics), from fresh data. */
async function route() {
  clearInterval(pollTimer);
  stopRates();
  const gen = ++generation;
  redirectHash();
  let target = parsePath(location.pathname);
  if (!target) {
    history.replaceState(null, '', href('/topics'));
    target = { page: 'topics', section: 'topics', params: [] };
  }
  const { path, render } = PAGES[target.page];
  if (location.pathname !== shownPath) app.replaceChildren();
  shownPath = location.pathname;
  app.dataset.page = target.page;
  app.dataset.loaded = 'false';
  markNav(target.section);
  clearError();
  showWarnings([]);
  showNotice('');
  try {
    const data = await api('GET', path(...target.params));
    if (gen !== generation) return;
    app.replaceChildren(...render(data, ...target.params));
    showWarnings(data.warnings);
  } catch (err) {
    if (gen !== generation) return;
    app.replaceChildren();
    showError(err);
  }
  app.dataset.loaded = 'true';
}

/* ---------- actions ---------- */

/* Runs one API action: asks `confirm` first when given, then re-renders the page, or goes
 * to `next` (a page path) when given; `notice(answer)`, when given, is shown in #notice. A failure leaves the page as it is and shows the
 * message; an action done with a warning (nsqadmin's "WARNING: ..." message: some node or
 * lookup failed) shows it under the re-rendered page. */
async function runAction({ confirm, method, path, body, next, notice }) {
  if (confirm && !window.confirm(confirm)) return;
  const gen = generation;
  clearError();
  app.dataset.loaded = 'false';
  let answer;
  try {
    answer = await api(method, path, body);
  } catch (err) {
    if (gen !== generation) return;
    showError(err);
    app.dataset.loaded = 'true';
    return;
  }
  if (gen !== generation) return;
  await (next ? navigate(next) : route());
  if (answer && answer.message) warningList.append(el('li', {}, answer.message));
  if (notice && answer) showNotice(notice(answer));
}

/* The pause/unpause, empty and delete buttons shared by the topic and channel pages. */
function entityActions(id, path, paused, what, afterDelete) {
  const toggle = paused ? 'unpause' : 'pause';
  return el('div', { id, class: 'actions' },
    actionButton(toggle, paused ? 'Unpause' : 'Pause',
      () => runAction({ method: 'POST', path, body: { action: toggle } })),
    actionButton('empty', 'Empty', () => runAction({
      confirm: `Empty ${what}? Its queued messages will be lost.`,
      method: 'POST', path, body: { action: 'empty' },
    })),
    actionButton('delete', 'Delete', () => runAction({
      confirm: `Delete ${what}?`, method: 'DELETE', path, next: afterDelete,
    })));
}

/* ---------- clients' attributes ---------- */

/* `url` when it is an absolute http(s) URL (fit for a link), else null: an identity URL comes
 * from an auth server, and a javascript: or data: URL must never become a link. */
function webUrl(url) {
  if (!url) return null;
  try {
    const u = new URL(url);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
  } catch {
    return null;
  }
}

/* A client's connection state as nsqd's /stats reports it: sampling, TLS (version, cipher
 * suite, negotiated protocol), snappy / deflate, and auth (identity, linked to its URL). */
function attributesCell(c) {
  const attr = (name, title, ...children) =>
    el('span', { class: `attr attr-${name}`, 'data-attr': name, title }, children);
  const tlsDetail = [c.tls_version, c.tls_cipher_suite, c.tls_negotiated_protocol].filter(Boolean);
  const identityUrl = webUrl(c.auth_identity_url);
  const identity = c.auth_identity || c.auth_identity_url || '';
  return el('td', { class: 'attributes' },
    c.sample_rate ? attr('sampled', null, `Sampled ${c.sample_rate}%`) : null,
    c.tls ? attr('tls', c.tls_version
      ? `${tlsDetail.join(' ')} mutual:${Boolean(c.tls_negotiated_protocol_is_mutual)}` : null,
      'TLS', tlsDetail.length ? el('small', { class: 'tls-detail' }, ` ${tlsDetail.join(' ')}`) : null) : null,
    c.deflate ? attr('deflate', null, 'Deflate') : null,
    c.snappy ? attr('snappy', null, 'Snappy') : null,
    c.authed ? attr('authed', `Authed${identity ? ` Identity:${identity}` : ''}`, 'Authed',
      identity ? ' ' : null,
      identity && identityUrl
        ? el('a', { href: identityUrl, 'data-attr': 'auth-identity', rel: 'noopener noreferrer', target: '_blank' }, identity)
        : (identity ? el('span', { 'data-attr': 'auth-identity' }, identity) : null)) : null);
}

/* The clients of a node's channels, one row each. */
function nodeClients(topics) {
  const rows = topics.flatMap((t) => t.channels.flatMap((ch) => (ch.clients ?? []).map((c) =>
    el('tr', { 'data-client-id': c.client_id, 'data-topic': t.topic_name, 'data-channel': ch.channel_name },
      el('td', {}, link(href(`/topics/${enc(t.topic_name)}/${enc(ch.channel_name)}`),
        `${t.topic_name} / ${ch.channel_name}`)),
      [c.client_id, c.hostname, c.remote_address, c.user_agent].map((text) => el('td', {}, text ?? '')),
      attributesCell(c),
      [c.ready_count, c.in_flight_count, c.message_count, c.finish_count, c.requeue_count].map(numCell),
      el('td', {}, time(c.connect_ts))))));
  return table('node-clients', ['Topic / channel', 'Client id', 'Hostname', 'Remote address',
    'User agent', 'Attributes', 'Ready', 'In flight', 'Messages', 'Finished', 'Requeued',
    'Connected since'], rows, 'No clients on this node.');
}

/* ---------- Graphite (as nsqadmin names the brokers' statsd metrics) ---------- */

/* A metric's full statsd key: --statsd-counter-format / --statsd-gauge-format around it. */
function statsdKey(type, key) {
  const fmt = type === 'counter' ? settings.statsd_counter_format : settings.statsd_gauge_format;
  return fmt ? fmt.replace(/%s/g, key) : key;
}

/* --statsd-prefix for a host ("*": every node), with its "." separator. */
function statsdPrefix(host) {
  const prefix = (settings.statsd_prefix || '').replace(/%s/g, host.replace(/[.:]/g, '_'));
  return prefix && !prefix.endsWith('.') ? `${prefix}.` : prefix;
}

/* A name as statsd daemons write it into a Graphite key. */
const graphiteKey = (s) => s.replaceAll(' ', '_').replaceAll('/', '-').replace(/[^a-zA-Z0-9-_.]/g, '');

/* nsqadmin's target for a topic's message rate over every node. */
function topicRateTarget(topic) {
  return `sumSeries(${statsdKey('counter', `${statsdPrefix('*')}topic.${graphiteKey(topic)}.message_count`)})`;
}

/* With --graphite-url: the topic's rate (from /api/graphite) and a chart of it (through
 * <base>/render with --proxy-graphite, else from Graphite itself). */
function topicGraphite(topic) {
  if (!settings.graphite_enabled) return [];
  const target = topicRateTarget(topic);
  const rate = el('span', { id: 'topic-rate', 'data-target': target }, '…');
  const gen = generation;
  api('GET', `/api/graphite?metric=rate&target=${enc(target)}`)
    .then((data) => { if (gen === generation) rate.textContent = `${data.rate} msg/s`; })
    .catch((err) => { if (gen === generation) rate.textContent = `unavailable (${err.message})`; });
  const interval = `${settings.statsd_interval}sec`;
  const query = new URLSearchParams({
    target: `summarize(scale(${target},${1 / settings.statsd_interval}),"${interval}","avg")`,
    from: '-2h', until: '-1min', width: '800', height: '200', yMin: '0', bgcolor: 'ff000000',
  });
  const render = settings.proxy_graphite ? href('/render') : `${settings.graphite_url}/render`;
  return [
    el('p', { class: 'graphite-rate' }, 'Rate (Graphite): ', rate),
    el('img', { id: 'topic-graph', alt: `message rate of ${topic}`, src: `${render}?${query}` }),
  ];
}

/* ---------- pages ---------- */

function renderTopics(data) {
  const rows = data.topics.map((name) =>
    el('tr', { 'data-topic': name }, el('td', {}, link(href(`/topics/${enc(name)}`), name)),
      rateCells()));
  const topics = table('topics', ['Topic', ...RATE_HEADINGS], rows, 'No topics.');
  fillRateCells(topics, 'topic', (rates, name) => rates.topics[name]);
  return [el('h1', {}, 'Topics'), topics];
}

function renderTopic(data, topic) {
  const topicHash = href(`/topics/${enc(topic)}`);
  const nodeRows = data.nodes.map((n) => el('tr', { 'data-node': n.node, class: rowClass(n.paused) },
    el('td', {}, link(href(`/nodes/${enc(n.node)}`), n.node)),
    [n.depth, n.memory_depth, n.backend_depth, n.message_count, n.channel_count].map(numCell),
    stateCell(n.paused),
    el('td', {}, actionButton('tombstone', 'Tombstone', () => runAction({
      confirm: `Tombstone topic "${topic}" of node ${n.node} at every lookup?`,
      method: 'DELETE', path: `/api/nodes/${enc(n.node)}`, body: { topic },
    })))));
  const channelRows = data.channels.map((c) =>
    el('tr', { 'data-channel': c.channel_name, class: rowClass(c.paused) },
      el('td', {}, link(`${topicHash}/${enc(c.channel_name)}`, c.channel_name)),
      [c.depth, c.in_flight_count, c.deferred_count, c.requeue_count, c.timeout_count,
        c.message_count, c.client_count].map(numCell),
      stateCell(c.paused), rateCells()));
  const channels = table('channels', ['Channel', 'Depth', 'In flight', 'Deferred', 'Requeued',
    'Timed out', 'Messages', 'Clients', 'State', ...RATE_HEADINGS], channelRows, 'No channels.');
  fillRateCells(channels, 'channel', (rates, name) => (rates.channels[topic] || {})[name]);
  return [
    kicker(link(href('/topics'), 'Topics'), ' › topic'),
    el('h1', {}, topic),
    stateLine('topic-state', data.paused),
    facts('topic-totals', [
      ['Depth', num(data.depth)], ['Memory depth', num(data.memory_depth)],
      ['Backend depth', num(data.backend_depth)], ['Messages', num(data.message_count)],
    ]),
    ...topicGraphite(topic),
    ratesSection({ topic }),
    deadLettersSection(topic),
    retentionSection(data, topic),
    ...replicationSection(data),
    entityActions('topic-actions', `/api/topics/${enc(topic)}`, data.paused, `topic "${topic}"`, href('/topics')),
    el('h2', {}, 'Nodes'),
    table('topic-nodes', ['Node', 'Depth', 'Memory', 'Backend', 'Messages', 'Channels', 'State', ''],
      nodeRows, 'No node has this topic.'),
    el('h2', {}, 'Channels'),
    channels,
  ];
}

/* A replicated topic's replicas, one row per node that reports one (nothing otherwise). */
function replicationSection(data) {
  const rows = (data.nodes || []).filter((n) => n.replication);
  if (!rows.length) return [];
  const r = (n) => n.replication;
  return [
    el('h2', {}, 'Replication'),
    table('topic-replicas', ['Node', 'Role', 'Leader', 'Epoch', 'In sync', 'Log start', 'Log end', 'Waiting publishes'],
      rows.map((n) => el('tr', { 'data-node': n.node },
        el('td', {}, n.node), el('td', {}, r(n).role), el('td', {}, String(r(n).leader)),
        numCell(r(n).epoch), el('td', {}, (r(n).isr || []).join(', ')),
        numCell(r(n).log_start), numCell(r(n).log_end), numCell(r(n).waiting_publishes))), ''),
  ];
}

function renderChannel(data, topic, channel) {
  const topicHash = href(`/topics/${enc(topic)}`);
  const nodeRows = data.nodes.map((n) => el('tr', { 'data-node': n.node, class: rowClass(n.paused) },
    el('td', {}, link(href(`/nodes/${enc(n.node)}`), n.node)),
    [n.depth, n.memory_depth, n.backend_depth, n.in_flight_count, n.deferred_count,
      n.requeue_count, n.timeout_count, n.message_count, n.client_count].map(numCell),
    stateCell(n.paused)));
  const clientRows = data.clients.map((c) => el('tr', { 'data-client-id': c.client_id },
    [c.node, c.client_id, c.hostname, c.remote_address, c.user_agent, c.version]
      .map((text) => el('td', {}, text ?? '')),
    attributesCell(c),
    [c.ready_count, c.in_flight_count, c.message_count, c.finish_count, c.requeue_count].map(numCell),
    el('td', {}, time(c.connect_ts))));
  return [
    kicker(link(href('/topics'), 'Topics'), ' › channel'),
    el('h1', {}, link(topicHash, topic), ' / ', channel),
    stateLine('channel-state', data.paused),
    facts('channel-totals', [
      ['Depth', num(data.depth)], ['Memory depth', num(data.memory_depth)],
      ['Backend depth', num(data.backend_depth)], ['In flight', num(data.in_flight_count)],
      ['Deferred', num(data.deferred_count)], ['Requeued', num(data.requeue_count)],
      ['Timed out', num(data.timeout_count)], ['Messages', num(data.message_count)],
      ['Clients', num(data.client_count)],
    ]),
    ratesSection({ topic, channel }),
    entityActions('channel-actions', `/api/topics/${enc(topic)}/${enc(channel)}`, data.paused,
      `channel "${channel}" of topic "${topic}"`, topicHash),
    channelConfigSection(data, topic, channel),
    rewindSection(topic, channel),
    el('h2', {}, 'Nodes'),
    table('channel-nodes', ['Node', 'Depth', 'Memory', 'Backend', 'In flight', 'Deferred',
      'Requeued', 'Timed out', 'Messages', 'Clients', 'State'], nodeRows, 'No node has this channel.'),
    el('h2', {}, 'Clients'),
    table('clients', ['Node', 'Client id', 'Hostname', 'Remote address', 'User agent', 'Version',
      'Attributes', 'Ready', 'In flight', 'Messages', 'Finished', 'Requeued', 'Connected since'],
    clientRows, 'No clients.'),
  ];
}

/* A node's registrations: how many lookups it is registered with (all of them, or fewer: a
 * warning), each one listed in the title. */
function lookupConnsCell(n, lookups) {
  const conns = n.remote_addresses || [];
  const partial = lookups.length > 0 && conns.length < lookups.length;
  return el('td', { class: partial ? 'num lookup-conns partial' : 'num lookup-conns', title: conns.join('\n') },
    String(conns.length));
}

/* A node's topics, each a link; a tombstoned one marked (as nsqadmin's labels). */
function nodeTopicsCell(n) {
  return el('td', { class: 'node-topics' },
    el('span', { class: 'badge' }, String(n.topics.length)),
    n.topics.flatMap((t) => [' ', link(href(`/topics/${enc(t.topic)}`), t.topic, {
      class: t.tombstoned ? 'topic-label tombstoned' : 'topic-label',
      title: t.tombstoned ? 'this topic is currently tombstoned on this node' : null,
    })]));
}

function renderNodes(data) {
  const lookups = data.lookups || [];
  const rows = data.nodes.map((n) => el('tr', { 'data-node': n.node, class: n.out_of_date ? 'out-of-date' : null },
    el('td', {}, link(href(`/nodes/${enc(n.node)}`), n.node)),
    el('td', {}, n.hostname ?? ''),
    el('td', { class: 'broadcast' }, n.broadcast_address ?? ''),
    plainCell(n.tcp_port),
    plainCell(n.http_port),
    el('td', {}, n.version ?? ''),
    lookups.length ? lookupConnsCell(n, lookups) : null,
    nodeTopicsCell(n),
    rateCells()));
  const headings = ['Node', 'Hostname', 'Broadcast address', 'TCP port', 'HTTP port', 'Version',
    ...(lookups.length ? ['Lookup conns'] : []), 'Topics', ...RATE_HEADINGS];
  const nodes = table('nodes', headings, rows, 'No nodes.');
  fillRateCells(nodes, 'node', (rates, name) => rates.nodes[name]);
  return [el('h1', {}, `Nodes (${data.nodes.length})`), nodes];
}

function renderNode(data, node) {
  const blank = () => el('td', {});
  const rows = data.topics.flatMap((t) => {
    const topicHash = href(`/topics/${enc(t.topic_name)}`);
    const topicRow = el('tr', { 'data-topic': t.topic_name, class: rowClass(t.paused, 'topic-row') },
      el('td', {}, link(topicHash, t.topic_name)),
      numCell(t.depth),
      el('td', { class: 'num' }, `${num(t.memory_depth)} / ${num(t.backend_depth)}`),
      blank(), blank(),
      numCell(t.message_count),
      blank(),
      stateCell(t.paused));
    const channelRows = t.channels.map((c) =>
      el('tr', { 'data-channel': c.channel_name, class: rowClass(c.paused, 'channel-row') },
        el('td', {}, link(`${topicHash}/${enc(c.channel_name)}`, c.channel_name)),
        numCell(c.depth),
        blank(),
        numCell(c.in_flight_count), numCell(c.deferred_count), numCell(c.message_count), numCell(c.client_count),
        stateCell(c.paused)));
    return [topicRow, ...channelRows];
  });
  return [
    kicker(link(href('/nodes'), 'Nodes'), ' › node'),
    el('h1', {}, node),
    facts('node-info', [
      ['Version', data.version ?? ''], ['Health', data.health ?? ''], ['Started', time(data.start_time)],
      ['Messages', num(data.total_messages)], ['Clients', num(data.total_clients)],
      ['Memory (heap in use)', data.memory ? bytesText(data.memory.heap_in_use_bytes) : '—'],
    ]),
    ratesSection({ node }),
    el('h2', {}, 'Topics and channels'),
    table('node-topics', ['Topic / channel', 'Depth', 'Memory / backend', 'In flight', 'Deferred',
      'Messages', 'Clients', 'State'], rows, 'No topics on this node.'),
    el('h2', {}, 'Clients'),
    nodeClients(data.topics),
  ];
}

/* nsqadmin's "Messages Processed": every channel's message count on every node, summed (a
 * message counts once per channel it reached). */
function processed(data) {
  return Object.values(data.stats || {}).reduce((n, s) => n + (s.message_count || 0), 0);
}

function counterTopics(data) {
  const perTopic = {};
  for (const s of Object.values(data.stats || {})) {
    perTopic[s.topic_name] = (perTopic[s.topic_name] || 0) + (s.message_count || 0);
  }
  const rows = (data.topics || []).map((t) => el('tr', { 'data-topic': t.topic_name },
    el('td', {}, link(href(`/topics/${enc(t.topic_name)}`), t.topic_name)),
    numCell(perTopic[t.topic_name] || 0),
    numCell(t.message_count)));
  return table('counter-topics', ['Topic', 'Processed (over its channels)', 'Published'], rows, 'No topics.');
}

function renderCounter(data) {
  const count = processed(data);
  const counter = el('div', { id: 'counter' }, String(count));
  const rate = el('div', { id: 'rate' }, '0 msg/s');
  const published = el('div', { id: 'published' }, `${num(data.message_count)} published`);
  const perTopic = el('div', {}, counterTopics(data));
  startCounter(count, counter, rate, published, perTopic);
  return [
    el('h1', {}, 'Counter'),
    el('section', { class: 'counter' }, kicker('messages processed'), counter, rate, published),
    el('h2', {}, 'Per topic'),
    perTopic,
  ];
}

/* Polls /api/counter every second while this page is shown (route() clears the timer). */
function startCounter(count, counterEl, rateEl, publishedEl, perTopicEl) {
  const gen = generation;
  let last = { count, at: performance.now() };
  let busy = false;
  pollTimer = setInterval(async () => {
    if (busy) return; // the previous poll has not answered yet
    busy = true;
    try {
      const data = await api('GET', '/api/counter');
      if (gen !== generation) return;
      const now = performance.now();
      const total = processed(data);
      const perSecond = Math.max(0, ((total - last.count) * 1000) / (now - last.at));
      last = { count: total, at: now };
      counterEl.textContent = String(total);
      rateEl.textContent = `${Math.round(perSecond * 10) / 10} msg/s`;
      publishedEl.textContent = `${num(data.message_count)} published`;
      perTopicEl.replaceChildren(counterTopics(data));
      clearError();
      showWarnings(data.warnings);
    } catch (err) {
      if (gen === generation) showError(err);
    } finally {
      busy = false;
    }
  }, 1000);
}

function lookupTopics(topics) {
  if (!topics.length) return '—';
  return el('ul', { class: 'plain' }, topics.map((t) => el('li', {},
    link(href(`/topics/${enc(t.topic_name)}`), t.topic_name),
    t.channels.length ? `: ${t.channels.join(', ')}` : null)));
}

function createForm() {
  const topic = el('input', { id: 'create-topic', name: 'topic', placeholder: 'topic', autocomplete: 'off' });
  const channel = el('input', {
    id: 'create-channel', name: 'channel', placeholder: 'channel (optional)', autocomplete: 'off',
  });
  const submit = (event) => {
    event.preventDefault();
    const body = { topic: topic.value.trim() };
    if (channel.value.trim()) body.channel = channel.value.trim();
    runAction({ method: 'POST', path: '/api/topics', body });
  };
  return el('form', { id: 'create-form', class: 'create', onsubmit: submit },
    el('label', {}, 'Topic ', topic),
    el('label', {}, 'Channel ', channel),
    el('button', { id: 'create-submit', type: 'submit' }, 'Create'));
}

function renderLookup(data) {
  const rows = data.lookups.map((l) =>
    el('tr', { 'data-lookup': l.address, class: l.reachable ? null : 'unreachable' },
      el('td', {}, l.address),
      el('td', { class: 'reachability' }, l.reachable ? 'reachable' : 'unreachable'),
      el('td', {}, lookupTopics(l.topics))));
  return [
    el('h1', {}, 'Lookup'),
    table('lookups', ['Address', 'Status', 'Topics and channels'], rows, 'No lookups configured.'),
    el('h2', {}, 'Inactive topics (no producer)'),
    inactiveTopics(),
    el('h2', {}, 'Create a topic (and channel)'),
    createForm(),
  ];
}

/* ---------- start ---------- */

/* Links to the page's own URLs are followed without reloading the page. */
document.addEventListener('click', (event) => {
  const a = event.target.closest && event.target.closest('a[href]');
  if (!a || a.target || event.defaultPrevented || event.button !== 0
      || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !parsePath(url.pathname)) return;
  event.preventDefault();
  navigate(url.pathname);
});
window.addEventListener('popstate', route);
window.addEventListener('hashchange', () => { if (redirectHash()) route(); });
route();
