'use strict'
// nsqjs with TLS, snappy, deflate, and TLS with each compression: a Writer publishes and a
// Reader consumes 1,000 messages, and /stats shows the flags each connection negotiated.
// Certificates come from the openssl command (a CA and a server certificate for 127.0.0.1).
// Run: BROKER_SHARDS=N node --test tests/node/

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const nsq = require('nsqjs')
const { startBroker, until } = require('./helpers')

const MESSAGES = 1000
let dir
let b

function openssl (...args) {
  execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' })
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'broker-node-tls-'))
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
  openssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2',
    '-subj', '/CN=broker test CA', '-addext', 'basicConstraints=critical,CA:TRUE')
  openssl('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1')
  fs.writeFileSync(path.join(dir, 'server.ext'),
    'basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n')
  openssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key',
    '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'server.ext')
  b = await startBroker([`--tls-cert=${path.join(dir, 'server.pem')}`,
    `--tls-key=${path.join(dir, 'server.key')}`, '--https-address=127.0.0.1:0'])
})

after(async () => {
  if (b) await b.stop()
  fs.rmSync(dir, { recursive: true, force: true })
})

function stats () {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port: b.httpPort, path: '/stats?format=json' }, (res) => {
      let body = ''
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve(JSON.parse(body)))
    }).on('error', reject)
  })
}

function clientsOf (doc, topic) {
  const out = (doc.producers || []).filter((p) => (p.pub_counts || []).some((c) => c.topic === topic))
  for (const t of doc.topics || []) {
    if (t.topic_name !== topic) continue
    for (const ch of t.channels) out.push(...(ch.clients || []))
  }
  return out
}

const MODES = {
  tls: { tls: true },
  snappy: { snappy: true },
  deflate: { deflate: true, deflateLevel: 5 },
  tls_snappy: { tls: true, snappy: true },
  tls_deflate: { tls: true, deflate: true, deflateLevel: 5 }
}

for (const [mode, flags] of Object.entries(MODES)) {
  test(`nsqjs publishes and consumes ${MESSAGES} messages with ${mode}`, async () => {
    const topic = `nsqjs_${mode}`
    const options = { ...flags }
    if (flags.tls) {
      options.tlsVerification = true
      options.ca = fs.readFileSync(path.join(dir, 'ca.pem'))
    }
    const w = new nsq.Writer(b.host, b.port, options)
    w.on('error', () => {})
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`Writer not ready in 10 s\n${b.stderr()}`)), 10000)
      w.on('ready', () => { clearTimeout(timer); resolve() })
      w.connect()
    })
    try {
      for (let start = 0; start < MESSAGES; start += 100) {
        const batch = []
        for (let i = start; i < start + 100; i++) batch.push(`m${i}`)
        await new Promise((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error('publish: no answer in 10 s')), 10000)
          w.publish(topic, batch, (err) => { clearTimeout(timer); err ? reject(err) : resolve() })
        })
      }
      const got = []
      const r = new nsq.Reader(topic, 'c', { nsqdTCPAddresses: [b.address], maxInFlight: 100, ...options })
      r.on('error', () => {})
      r.on('message', (m) => { got.push(m.body.toString()); m.finish() })
      r.connect()
      try {
        await until(() => got.length >= MESSAGES, 30000, `${MESSAGES} messages`)
        const want = { tls: !!flags.tls, snappy: !!flags.snappy, deflate: !!flags.deflate }
        const ours = clientsOf(await stats(), topic).filter((c) => c.user_agent.includes('nsqjs'))
        assert.ok(ours.length >= 2, JSON.stringify(ours))
        for (const c of ours) {
          assert.deepEqual({ tls: c.tls, snappy: c.snappy, deflate: c.deflate }, want, JSON.stringify(c))
          if (flags.tls) assert.match(c.tls_version, /^TLS1\.[23]$/)
        }
      } finally {
        r.close()
      }
      assert.deepEqual(got.sort(), Array.from({ length: MESSAGES }, (_, i) => `m${i}`).sort())
    } finally {
      w.close()
    }
  })
}
