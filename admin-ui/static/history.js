/*
 * admin-ui front-end: the brokers' features beyond nsqd (see admin-ui/API.md "Beyond nsqd").
 *
 * This file owns the sections the topic and channel pages add for them: a dead-letter topic's
 * records and its "send back" action (`#dead-letters`), a channel's max attempts and
 * dead-letter topic form (`#channel-config`), a channel's rewind form (`#rewind`, whose
 * confirmation says how many messages will be delivered again, from a dry run), and a topic's
 * retention and its form (`#retention`). It is loaded before app.js and only defines
 * functions; they use app.js's helpers (el, api, runAction, generation) when called.
 *
 * Rules kept: data reaches the DOM only as text (a record's preview too); every destructive
 * action asks window.confirm first and does nothing if refused.
 */
'use strict';

/* A time in nanoseconds since the epoch as local date and time ("—" for 0). */
function nsTime(ns) {
  return ns ? new Date(ns / 1e6).toLocaleString() : '—';
}

/* ---------- a dead-letter topic's records ---------- */

/* The `#dead-letters` section of a topic page: empty (and hidden) unless the topic's brokers
 * hold origin records; then a table of them and the "send back" button. */
function deadLettersSection(topic) {
  const section = el('section', { id: 'dead-letters', 'data-loaded': 'false', hidden: true });
  const gen = generation;
  api('GET', `/api/dead_letters/${enc(topic)}`).then((data) => {
    if (gen !== generation) return;
    section.dataset.count = String(data.dead_letters.length);
    if (data.dead_letters.length) {
      section.replaceChildren(...deadLettersBody(topic, data.dead_letters));
      section.hidden = false;
    }
    section.dataset.loaded = 'true';
  }).catch((err) => {
    if (gen !== generation) return;
    section.replaceChildren(el('h2', {}, 'Dead letters'),
      el('p', { id: 'dead-letters-error', class: 'muted' }, `unavailable (${err.message})`));
    section.hidden = false;
    section.dataset.loaded = 'true';
  });
  return section;
}

function deadLettersBody(topic, records) {
  const rows = records.map((r) => el('tr', { 'data-id': r.id, 'data-node': r.node },
    el('td', {}, r.node),
    el('td', {}, link(href(`/topics/${enc(r.origin_topic)}`), r.origin_topic)),
    el('td', {}, link(href(`/topics/${enc(r.origin_topic)}/${enc(r.origin_channel)}`), r.origin_channel)),
    el('td', { class: 'num' }, num(r.attempts)),
    el('td', {}, nsTime(r.dead_lettered_at)),
    el('td', { class: 'num' }, num(r.body_size)),
    el('td', { class: 'preview' }, r.preview ?? '')));
  const origins = [...new Set(records.map((r) => r.origin_topic))].join(', ');
  return [
    el('h2', {}, 'Dead letters'),
    el('p', {}, `This is a dead-letter topic: ${records.length} message(s) kept with where they came from.`),
    table('dead-letter-records', ['Node', 'Origin topic', 'Origin channel', 'Attempts',
      'Dead-lettered at', 'Bytes', 'Preview'], rows, 'No dead letters.'),
    el('div', { class: 'actions' },
      actionButton('redrive', 'Send back to origin', () => runAction({
        confirm: `Publish the ${records.length} dead letter(s) of "${topic}" back to ${origins}?`
          + ' Every channel of the origin topic gets them again.',
        method: 'POST', path: `/api/dead_letters/${enc(topic)}`, body: { action: 'redrive' },
        notice: (a) => `Sent back ${a.redriven} message(s); ${a.missing} no longer held.`,
      }))),
  ];
}

/* ---------- a channel's max attempts and dead-letter topic ---------- */

/* The `#channel-config` section of a channel page: the settings in force (when the brokers
 * report a limit: `#dead-lettered-count` too) and a form setting them on every broker. */
function channelConfigSection(data, topic, channel) {
  const limited = data.max_attempts !== undefined;
  const maxAttempts = el('input', {
    id: 'max-attempts', name: 'max_attempts', size: 8, autocomplete: 'off',
    placeholder: '0 = unlimited', value: limited ? String(data.max_attempts) : '',
  });
  const deadLetterTopic = el('input', {
    id: 'dead-letter-topic', name: 'dead_letter_topic', autocomplete: 'off',
    placeholder: 'none: dropped', value: limited ? (data.dead_letter_topic || '') : '',
  });
  const submit = (event) => {
    event.preventDefault();
    const body = { action: 'config', dead_letter_topic: deadLetterTopic.value.trim() };
    if (maxAttempts.value.trim()) body.max_attempts = maxAttempts.value.trim();
    runAction({ method: 'POST', path: `/api/topics/${enc(topic)}/${enc(channel)}`, body });
  };
  const inForce = limited
    ? [facts('channel-limits', [
      ['Max attempts', data.max_attempts ? num(data.max_attempts) : 'unlimited'],
      ['Dead-letter topic', data.dead_letter_topic
        ? link(href(`/topics/${enc(data.dead_letter_topic)}`), data.dead_letter_topic)
        : 'none (dropped)'],
      ['Dead-lettered', el('span', { id: 'dead-lettered-count' }, num(data.dead_lettered_count))],
    ])]
    : [el('p', { class: 'muted' }, 'No limit on attempts (as nsqd).')];
  return el('section', { id: 'channel-config' },
    el('h2', {}, 'Attempts and dead letters'),
    ...inForce,
    el('form', { id: 'channel-config-form', class: 'settings', onsubmit: submit },
      el('label', {}, 'Max attempts (0: unlimited, default: the flag) ', maxAttempts),
      el('label', {}, 'Dead-letter topic (empty: drop) ', deadLetterTopic),
      el('button', { id: 'channel-config-submit', type: 'submit' }, 'Save')));
}

/* ---------- a channel's rewind ---------- */

/* The `#rewind` section of a channel page: a local date and time; on submit a dry run counts
 * what the rewind would deliver again, window.confirm says so, and only then it is done. */
function rewindSection(topic, channel) {
  const at = el('input', { id: 'rewind-time', type: 'datetime-local', step: 1, required: true });
  const path = `/api/topics/${enc(topic)}/${enc(channel)}`;
  const submit = async (event) => {
    event.preventDefault();
    const when = new Date(at.value);
    if (!at.value || Number.isNaN(when.getTime())) {
      showError('Give the date and time to rewind to.');
      return;
    }
    const timestamp = when.toISOString();
    const gen = generation;
    clearError();
    let plan;
    try {
      plan = await api('POST', path, { action: 'rewind', timestamp, dry_run: true });
    } catch (err) {
      if (gen === generation) showError(err);
      return;
    }
    if (gen !== generation) return;
    runAction({
      confirm: `Rewind channel "${channel}" of topic "${topic}" to ${when.toLocaleString()}? `
        + `${plan.redelivered} message(s) will be delivered again.`,
      method: 'POST', path, body: { action: 'rewind', timestamp },
      notice: () => `Rewound to ${when.toLocaleString()}: ${plan.redelivered} message(s) to deliver again.`,
    });
  };
  return el('section', { id: 'rewind' },
    el('h2', {}, 'Replay'),
    el('p', { class: 'muted' }, 'Deliver again every message kept since a time (the topic\'s retention decides how far back).'),
    el('form', { id: 'rewind-form', class: 'settings', onsubmit: submit },
      el('label', {}, 'Rewind to (local time) ', at),
      el('button', { id: 'rewind-submit', type: 'submit' }, 'Rewind…')));
}

/* ---------- a topic's retention ---------- */

/* Nanoseconds as the largest whole unit that fits: "24h", "90m", "45s" ("none" for 0). */
function durationText(ns) {
  if (!ns) return 'none';
  const s = ns / 1e9;
  for (const [unit, size] of [['h', 3600], ['m', 60], ['s', 1]]) {
    if (s >= size && Number.isInteger(s / size)) return `${s / size}${unit}`;
  }
  return `${s}s`;
}

/* The `#retention` section of a topic page: the retention in force when the brokers report
 * one, and a form setting retention_time / retention_bytes on every broker. */
function retentionSection(data, topic) {
  const r = data.retention;
  const time = el('input', { id: 'retention-time', name: 'retention_time', size: 10, autocomplete: 'off', placeholder: '24h, 0, default' });
  const bytes = el('input', { id: 'retention-bytes', name: 'retention_bytes', size: 10, autocomplete: 'off', placeholder: '10GiB, 0, default' });
  const submit = (event) => {
    event.preventDefault();
    const body = { action: 'config' };
    if (time.value.trim()) body.retention_time = time.value.trim();
    if (bytes.value.trim()) body.retention_bytes = bytes.value.trim();
    runAction({ method: 'POST', path: `/api/topics/${enc(topic)}`, body });
  };
  const inForce = r
    ? facts('retention-info', [
      ['Keep for', el('span', { id: 'retention-time-value' }, durationText(r.time_ns))],
      ['Keep up to', el('span', { id: 'retention-bytes-value' }, r.bytes ? bytesText(r.bytes) : 'no limit')],
      ['Retained', el('span', { id: 'retained-bytes' }, bytesText(r.retained_bytes))],
      ['Oldest message', el('span', { id: 'retention-oldest' }, nsTime(r.oldest_timestamp))],
    ])
    : el('p', { class: 'muted' }, 'No retention: messages go once every channel has them (as nsqd).');
  return el('section', { id: 'retention' },
    el('h2', {}, 'Retention'),
    inForce,
    el('form', { id: 'retention-form', class: 'settings', onsubmit: submit },
      el('label', {}, 'Time (24h, 90m; 0: none; default: the flag) ', time),
      el('label', {}, 'Bytes (10GiB, 500MB; 0: none; default: the flag) ', bytes),
      el('button', { id: 'retention-submit', type: 'submit' }, 'Save')));
}
