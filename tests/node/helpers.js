'use strict'
// Starts the broker for the nsqjs tests: ephemeral ports on 127.0.0.1, a fresh --data-path,
// --shards from BROKER_SHARDS (default 1); waits (bounded) until the TCP port accepts; stops it
// with SIGTERM, then SIGKILL after 5 s.

const { spawn } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')

const REPO = path.resolve(__dirname, '..', '..')
const BROKER_BIN = process.env.BROKER_BIN || path.join(REPO, 'target', 'release', 'broker')
const SHARDS = parseInt(process.env.BROKER_SHARDS || '1', 10)

function accepts (port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port })
    const done = (ok) => { s.destroy(); resolve(ok) }
    s.setTimeout(500, () => done(false))
    s.on('connect', () => done(true))
    s.on('error', () => done(false))
  })
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function startBroker (extra = []) {
  if (!fs.existsSync(BROKER_BIN)) {
    throw new Error(`broker binary not found: ${BROKER_BIN}`)
  }
  // Port 0: the broker picks free ports, keeps them reserved, and logs them; picking them here
  // races with brokers started side by side (SO_REUSEPORT would let two share a port).
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'broker-node-'))
  const dataPath = path.join(dir, 'data')
  fs.mkdirSync(dataPath)
  const args = [
    '--tcp-address=127.0.0.1:0',
    '--http-address=127.0.0.1:0',
    `--data-path=${dataPath}`,
    `--shards=${SHARDS}`,
    ...extra
  ]
  const proc = spawn(BROKER_BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  proc.stderr.on('data', (d) => {
    stderr += d.toString()
    if (stderr.length > 50000) stderr = stderr.slice(-50000)
  })
  let exited = null
  proc.on('exit', (code, signal) => { exited = { code, signal } })

  const broker = {
    host: '127.0.0.1',
    port: null,
    httpPort: null,
    get address () { return `127.0.0.1:${this.port}` },
    args,
    stderr: () => stderr,
    exited: () => exited,
    async stop () {
      if (exited === null) {
        proc.kill('SIGTERM')
        const deadline = Date.now() + 5000
        while (exited === null && Date.now() < deadline) await sleep(50)
        if (exited === null) {
          proc.kill('SIGKILL')
          const d2 = Date.now() + 5000
          while (exited === null && Date.now() < d2) await sleep(50)
        }
      }
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }

  const deadline = Date.now() + 10000
  while (Date.now() < deadline) {
    if (exited !== null) {
      throw new Error(`broker exited at start-up (${JSON.stringify(exited)})\nargs: ${args.join(' ')}\nstderr:\n${stderr}`)
    }
    if (broker.port === null) {
      const tcp = /TCP: listening tcp=[^ ]*:(\d+)/.exec(stderr)
      const http = /HTTP: listening http=[^ ]*:(\d+)/.exec(stderr)
      if (tcp && http) {
        broker.port = Number(tcp[1])
        broker.httpPort = Number(http[1])
      }
    }
    if (broker.port !== null && await accepts(broker.port)) {
      if (SHARDS > 1) await sleep(200)
      return broker
    }
    await sleep(50)
  }
  await broker.stop()
  throw new Error(`broker did not accept on port ${broker.port} within 10 s\nstderr:\n${stderr}`)
}

// Resolves when pred() is true; rejects after timeoutMs.
async function until (pred, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (pred()) return
    await sleep(20)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
}

// Subscribes to each channel with a raw connection and leaves, so the channels exist before
// anything is published.
function makeChannels (broker, topic, channels) {
  return Promise.all(channels.map((ch) => new Promise((resolve, reject) => {
    const s = net.connect({ host: broker.host, port: broker.port })
    let buf = Buffer.alloc(0)
    let oks = 0
    let connected = false
    const timer = setTimeout(() => {
      s.destroy()
      reject(new Error(`makeChannels(${topic}, ${ch}) timed out after 10 s: connected=${connected}, ` +
        `OK frames=${oks}, unparsed bytes=${buf.length}, broker exited=${JSON.stringify(broker.exited())}`))
    }, 10000)
    s.on('error', (e) => { clearTimeout(timer); reject(e) })
    s.on('connect', () => {
      connected = true
      const body = Buffer.from('{}')
      const len = Buffer.alloc(4)
      len.writeUInt32BE(body.length)
      s.write(Buffer.concat([Buffer.from('  V2IDENTIFY\n'), len, body,
        Buffer.from(`SUB ${topic} ${ch}\n`)]))
    })
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d])
      while (buf.length >= 8) {
        const size = buf.readUInt32BE(0)
        if (buf.length < 4 + size) break
        const type = buf.readUInt32BE(4)
        const data = buf.subarray(8, 4 + size).toString()
        buf = buf.subarray(4 + size)
        if (type !== 0 || data !== 'OK') {
          clearTimeout(timer)
          s.destroy()
          reject(new Error(`makeChannels: unexpected frame ${type} ${data}`))
          return
        }
        oks++
        if (oks === 2) {
          clearTimeout(timer)
          s.end()
          resolve()
        }
      }
    })
  })))
}

module.exports = { startBroker, until, sleep, makeChannels, SHARDS }
