'use strict'
// The broker through nsqjs: Writer.publish (string and array = MPUB), Writer.deferPublish (DPUB),
// Reader with nsqdTCPAddresses, maxInFlight, message.finish() / requeue() / touch().
// Run: BROKER_SHARDS=N node --test tests/node/

const { test, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const nsq = require('nsqjs')
const { startBroker, until, sleep, makeChannels, SHARDS } = require('./helpers')

const cleanups = []
afterEach(async () => {
  const errors = []
  while (cleanups.length) {
    const fn = cleanups.pop()
    try { await fn() } catch (e) { if (e && e.brokerDied) errors.push(e) }
  }
  if (errors.length) throw errors[0]
})

async function broker (extra = []) {
  const b = await startBroker(extra)
  cleanups.push(async () => {
    const exited = b.exited()
    await b.stop()
    if (exited !== null) {
      const e = new Error(`broker died during the test: ${JSON.stringify(exited)}\n${b.stderr()}`)
      e.brokerDied = true
      throw e
    }
  })
  return b
}

// Adds the broker's stderr to an assertion failure.
async function withStderr (b, fn) {
  try {
    await fn()
  } catch (e) {
    e.message += `\n--- broker (--shards ${SHARDS}) args: ${b.args.join(' ')}\n--- stderr:\n${b.stderr()}`
    throw e
  }
}

function writer (b) {
  return new Promise((resolve, reject) => {
    const w = new nsq.Writer(b.host, b.port)
    const timer = setTimeout(() => reject(new Error('Writer not ready in 10 s')), 10000)
    w.on('ready', () => { clearTimeout(timer); resolve(w) })
    w.on('error', () => {})
    w.connect()
    cleanups.push(() => w.close())
  })
}

function pub (w, topic, msgs) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('publish: no answer in 10 s')), 10000)
    w.publish(topic, msgs, (err) => { clearTimeout(timer); err ? reject(err) : resolve() })
  })
}

// nsqjs 0.13.0's deferPublish hands its message straight to produceMessages, which throws
// unless it is an array ("Expect an array of messages"): pass a one-element array of a Buffer.
function dpub (w, topic, msg, ms) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('deferPublish: no answer in 10 s')), 10000)
    w.deferPublish(topic, [Buffer.from(msg)], ms, (err) => { clearTimeout(timer); err ? reject(err) : resolve() })
  })
}

async function reader (b, topic, channel, onMessage, options = {}) {
  const r = new nsq.Reader(topic, channel, {
    nsqdTCPAddresses: [b.address],
    maxInFlight: 1,
    ...options
  })
  let connected = false
  r.on('nsqd_connected', () => { connected = true })
  r.on('error', () => {})
  r.on('message', onMessage)
  r.connect()
  cleanups.push(() => r.close())
  await until(() => connected, 10000, 'Reader connection')
  return r
}

test('publish, MPUB (array) and deferPublish reach two channels', async () => {
  const b = await broker()
  await withStderr(b, async () => {
    const topic = 'js_fanout'
    await makeChannels(b, topic, ['a', 'b'])
    const got = { a: [], b: [] }
    for (const ch of ['a', 'b']) {
      await reader(b, topic, ch, (m) => {
        got[ch].push(`${m.body.toString()}/${m.attempts}`)
        m.finish()
      }, { maxInFlight: 10 })
    }
    const w = await writer(b)
    await pub(w, topic, 'single')
    await pub(w, topic, ['multi-0', 'multi-1', 'multi-2'])
    await dpub(w, topic, 'deferred', 300)
    await until(() => got.a.length >= 5 && got.b.length >= 5, 15000, '5 messages per channel')
    await sleep(300)
    const want = ['deferred/1', 'multi-0/1', 'multi-1/1', 'multi-2/1', 'single/1']
    assert.deepEqual([...got.a].sort(), want)
    assert.deepEqual([...got.b].sort(), want)
  })
})

test('two readers on one channel split the messages, nothing lost', async () => {
  const b = await broker()
  await withStderr(b, async () => {
    const topic = 'js_split'
    await makeChannels(b, topic, ['ch'])
    const got = { 1: [], 2: [] }
    for (const k of [1, 2]) {
      await reader(b, topic, 'ch', (m) => {
        got[k].push(m.body.toString())
        setTimeout(() => m.finish(), 10)
      }, { maxInFlight: 5 })
    }
    await sleep(300)
    const w = await writer(b)
    const bodies = Array.from({ length: 60 }, (_, i) => `s${String(i).padStart(3, '0')}`)
    await pub(w, topic, bodies.slice(0, 30))
    for (const body of bodies.slice(30)) await pub(w, topic, body)
    await until(() => got[1].length + got[2].length >= 60, 20000, '60 messages')
    await sleep(300)
    const all = [...got[1], ...got[2]].sort()
    assert.deepEqual(all, bodies, 'every message exactly once')
    assert.ok(got[1].length > 0 && got[2].length > 0,
      `one reader got nothing: ${got[1].length} / ${got[2].length}`)
  })
})

test('requeue brings the message back with attempts + 1', async () => {
  const b = await broker()
  await withStderr(b, async () => {
    const topic = 'js_requeue'
    await makeChannels(b, topic, ['ch'])
    const seen = []
    await reader(b, topic, 'ch', (m) => {
      seen.push({ id: m.id, body: m.body.toString(), attempts: m.attempts })
      if (m.attempts === 1) m.requeue(0, false)
      else m.finish()
    })
    const w = await writer(b)
    await pub(w, topic, 'flaky')
    await until(() => seen.length >= 2, 15000, 'redelivery after requeue')
    await sleep(700)
    assert.equal(seen.length, 2)
    assert.equal(seen[0].id, seen[1].id)
    assert.deepEqual(seen.map((s) => s.attempts), [1, 2])
    assert.equal(seen[1].body, 'flaky')
  })
})

test('an unanswered message comes back after --msg-timeout with attempts 2', async () => {
  const b = await broker(['--msg-timeout=2s'])
  await withStderr(b, async () => {
    const topic = 'js_timeout'
    await makeChannels(b, topic, ['ch'])
    const seen = []
    await reader(b, topic, 'ch', (m) => {
      seen.push({ id: m.id, attempts: m.attempts, at: Date.now() })
      if (m.attempts > 1) m.finish()
    })
    const w = await writer(b)
    await pub(w, topic, 'slow')
    await until(() => seen.length >= 2, 10000, 'redelivery after msg-timeout')
    await sleep(300)
    assert.equal(seen.length, 2)
    assert.equal(seen[0].id, seen[1].id)
    assert.deepEqual(seen.map((s) => s.attempts), [1, 2])
    const elapsed = seen[1].at - seen[0].at
    assert.ok(elapsed >= 1500 && elapsed <= 7000, `redelivered after ${elapsed} ms`)
  })
})

test('touch holds a message past --msg-timeout, then finish', async () => {
  const b = await broker(['--msg-timeout=2s'])
  await withStderr(b, async () => {
    const topic = 'js_touch'
    await makeChannels(b, topic, ['ch'])
    const seen = []
    await reader(b, topic, 'ch', (m) => { seen.push(m) })
    const w = await writer(b)
    await pub(w, topic, 'touch-me')
    await until(() => seen.length >= 1, 10000, 'first delivery')
    for (let i = 0; i < 5; i++) {
      await sleep(1000)
      assert.equal(seen.length, 1, 'redelivered while being touched')
      seen[0].touch()
    }
    seen[0].finish()
    await sleep(2500)
    assert.equal(seen.length, 1)
    assert.equal(seen[0].attempts, 1)
  })
})

test('deferPublish is not delivered before its delay', async () => {
  const b = await broker()
  await withStderr(b, async () => {
    const topic = 'js_defer'
    await makeChannels(b, topic, ['ch'])
    const seen = []
    await reader(b, topic, 'ch', (m) => { seen.push({ body: m.body.toString(), at: Date.now() }); m.finish() })
    const w = await writer(b)
    const t0 = Date.now()
    await dpub(w, topic, 'later', 1500)
    await until(() => seen.length >= 1, 8000, 'deferred message')
    assert.equal(seen[0].body, 'later')
    assert.ok(seen[0].at - t0 >= 1400, `delivered after ${seen[0].at - t0} ms`)
  })
})
