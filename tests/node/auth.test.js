'use strict'
// AUTH through nsqjs (authSecret): the broker asks a real HTTP auth server (node's http module,
// answering per secret) and enforces its authorizations.
// Run: BROKER_SHARDS=N node --test tests/node/

const { test, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const nsq = require('nsqjs')
const { startBroker, until, SHARDS } = require('./helpers')

const cleanups = []
afterEach(async () => {
  while (cleanups.length) {
    try { await cleanups.pop()() } catch (e) {}
  }
})

const ANSWERS = {
  'pub-only': {
    ttl: 3600,
    identity: 'producer',
    identity_url: '',
    authorizations: [{ topic: '^orders$', channels: ['.*'], permissions: ['publish'] }]
  },
  'sub-only': {
    ttl: 3600,
    identity: 'consumer',
    identity_url: 'http://id.example/consumer',
    authorizations: [{ topic: '^orders$', channels: ['^billing$'], permissions: ['subscribe'] }]
  }
}

// An auth server on an ephemeral port; resolves to { address, requests }.
function authServer () {
  const requests = []
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x')
    const secret = url.searchParams.get('secret')
    requests.push({ path: url.pathname, secret, tls: url.searchParams.get('tls') })
    const answer = ANSWERS[secret]
    res.writeHead(answer ? 200 : 403, { 'Content-Type': 'application/json' })
    res.end(JSON.stringify(answer || { message: 'FORBIDDEN' }))
  })
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      cleanups.push(() => new Promise((done) => server.close(done)))
      resolve({ address: `127.0.0.1:${server.address().port}`, requests })
    })
  })
}

async function broker (extra) {
  const b = await startBroker(extra)
  cleanups.push(() => b.stop())
  return b
}

function writer (b, authSecret) {
  return new Promise((resolve, reject) => {
    const w = new nsq.Writer(b.host, b.port, { authSecret })
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

test(`nsqjs with authSecret publishes and consumes what its authorizations allow (--shards ${SHARDS})`, async () => {
  const auth = await authServer()
  const b = await broker([`--auth-http-address=${auth.address}`])
  const got = []
  const r = new nsq.Reader('orders', 'billing', {
    nsqdTCPAddresses: [b.address],
    maxInFlight: 10,
    authSecret: 'sub-only'
  })
  let subscribed = false
  r.on('nsqd_connected', () => { subscribed = true })
  r.on('error', () => {})
  r.on('message', (m) => { got.push(m.body.toString()); m.finish() })
  r.connect()
  cleanups.push(() => r.close())
  await until(() => subscribed, 10000, 'Reader connection')

  const w = await writer(b, 'pub-only')
  for (let i = 0; i < 20; i++) await pub(w, 'orders', `n${i}`)
  await until(() => got.length >= 20, 15000, '20 messages')
  assert.deepEqual(got.slice().sort(), Array.from({ length: 20 }, (_, i) => `n${i}`).sort())

  // A topic outside the authorizations is refused (and the connection closed).
  await assert.rejects(pub(w, 'other', 'x'), /E_UNAUTHORIZED AUTH failed for PUB on "other" ""/)

  assert.ok(auth.requests.some((q) => q.secret === 'sub-only' && q.path === '/auth' && q.tls === 'false'))
  assert.ok(auth.requests.some((q) => q.secret === 'pub-only'))
})
