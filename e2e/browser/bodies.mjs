// What a PUT body costs Chromium, by kind, with no DevTools attached while
// the bytes move (BenchmarkBrowserBodies in e2e/browser_test.go), and
// what a worker's read of a File costs, by way of reading it
// (BenchmarkBrowserReads). The SDK
// reads each part once in its worker for the part's CRC32C and then PUTs
// a slice of the File, which Chromium reads from the disk again; sending
// the bytes the worker already read would save that second read. This
// measures whether it does.
//
// Playwright tracks every request of the pages and workers it is attached
// to, and the tracking of a body held in memory can carry the body too,
// so under run.mjs such PUTs measure the harness as much as Chromium.
// This launches Chromium itself (detached.mjs), attaches only to choose
// the file and start a leg, and detaches before any byte moves. The page
// reports back by POSTing to the server that serves it, here: a sink that
// reads and drops PUT bodies, counting them.
//
// Legs, alternated round by round, each after a settle:
//   file         part PUTs of File slices, 4 at once (the bare upload)
//   file+read    the same, each PUT waiting for its part to be read in a
//                worker (as a byte stream into a reused buffer): the SDK's
//                reads without its CRC32C
//   bytes-page   the worker reads each part into a buffer of its own and
//                transfers it to the page, which PUTs it (XMLHttpRequest)
//   bytes-blob   the same, the buffer wrapped in a Blob
//   bytes-worker the worker PUTs the buffers itself (fetch)
//   file-fetch, file+read-fetch
//                file and file+read, each PUT sent by fetch instead of
//                XMLHttpRequest (which has the upload progress events the
//                SDK's progress bar needs)
// and, with cfg.legs (BenchmarkBrowserReads), the worker's read alone, by
// each way a worker can read a File, nothing sent:
//   read-byob    one byte stream into a reused 8 MiB buffer (the SDK's)
//   read-stream  one byte stream, the chunks Chromium hands out
//   read-sync    FileReaderSync of each 8 MiB slice
//   read-slices  slice().arrayBuffer() of each 8 MiB slice
//
//   FERRY_E2E='{"chromium":"/usr/bin/chromium","file":"/tmp/256MiB","rounds":3}' node bodies.mjs
// prints "RESULT {json}": per leg and round, the page's ms from start to
// the last answer (or the read's end), the bytes the sink got (or the
// worker read) and the CPU seconds of Chromium's processes by kind.

import { execFileSync } from 'node:child_process'
import { createServer } from 'node:http'
import { readFileSync, readdirSync } from 'node:fs'
import { launchDetached, setFiles } from './detached.mjs'

const cfg = JSON.parse(process.env.FERRY_E2E || '{}')
const log = (...a) => console.error('[bodies]', ...a)
const legs = cfg.legs || ['file', 'file+read', 'bytes-page', 'bytes-blob', 'bytes-worker', 'file-fetch', 'file+read-fetch']
const legTimeout = 120000

const page = `<!doctype html><meta charset="utf-8"><input type="file" id="f">
<script>
const partSize = 8 << 20
const concurrency = 4
// put sends one part and resolves once the sink answered with its length.
async function put(n, body, size, viaFetch) {
  if (viaFetch) {
    const r = await fetch('/part?n=' + n, { method: 'PUT', body })
    const got = await r.text()
    if (r.status !== 200 || Number(got) !== size) throw new Error('part ' + n + ': ' + r.status + ' ' + got)
    return
  }
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest()
    x.open('PUT', '/part?n=' + n)
    x.upload.onprogress = () => {} // the SDK listens, for its progress bar
    x.onload = () => (x.status === 200 && Number(x.responseText) === size ? resolve() : reject(new Error('part ' + n + ': ' + x.status + ' ' + x.responseText)))
    x.onerror = () => reject(new Error('part ' + n + ': network error'))
    x.send(body)
  })
}
window.runLeg = async (name) => {
  const viaFetch = name.endsWith('-fetch')
  const leg = name.replace(/-fetch$/, '')
  const file = document.getElementById('f').files[0]
  const count = Math.ceil(file.size / partSize)
  const size = (n) => Math.min(partSize, file.size - (n - 1) * partSize)
  const t0 = performance.now()
  const worker = leg === 'file' ? null : new Worker('/worker.js')
  let read = 0
  if (leg.startsWith('read-')) {
    read = await new Promise((resolve, reject) => {
      worker.onmessage = (e) => (e.data.error ? reject(new Error(e.data.error)) : resolve(e.data.bytes))
      worker.postMessage({ op: leg, file, partSize })
    })
  } else if (leg === 'bytes-worker') {
    await new Promise((resolve, reject) => {
      worker.onmessage = (e) => (e.data.error ? reject(new Error(e.data.error)) : resolve())
      worker.postMessage({ op: 'put', file, partSize, concurrency })
    })
  } else {
    // read[n] resolves when the worker has read part n (with its bytes
    // for the bytes legs); 'file' reads nothing ahead.
    const read = Array.from({ length: count + 1 }, () => { let r; const p = new Promise((res) => { r = res }); p.resolve = r; return p })
    if (worker) {
      worker.onmessage = (e) => read[e.data.n].resolve(e.data.buf)
      worker.postMessage({ op: leg === 'file+read' ? 'read' : 'transfer', file, partSize })
    }
    let next = 1
    await Promise.all(Array.from({ length: concurrency }, async () => {
      for (let n = next++; n <= count; n = next++) {
        const buf = worker ? await read[n] : null
        const body = leg === 'bytes-page' ? buf : leg === 'bytes-blob' ? new Blob([buf]) : file.slice((n - 1) * partSize, (n - 1) * partSize + size(n))
        await put(n, body, size(n), viaFetch)
      }
    }))
  }
  if (worker) worker.terminate()
  return { ms: performance.now() - t0, read }
}
</script>`

const worker = `
// parts reads file in order, a part at a time, as a byte stream into
// buffers: one reused, or a fresh one per part when the part's bytes leave.
async function* parts(file, partSize, fresh) {
  const reader = file.stream().getReader({ mode: 'byob' })
  let buf = null
  for (let start = 0; start < file.size; start += partSize) {
    const len = Math.min(partSize, file.size - start)
    if (fresh || !buf) buf = new ArrayBuffer(len)
    for (let got = 0; got < len;) {
      const { done, value } = await reader.read(new Uint8Array(buf, got, len - got))
      if (done) throw new Error('the file ended early')
      buf = value.buffer
      got += value.byteLength
    }
    yield new Uint8Array(buf, 0, len)
  }
}
// readAll reads file to its end the way op names and returns the bytes
// it got; nothing keeps them.
async function readAll(op, file, partSize) {
  let bytes = 0
  if (op === 'read-byob') {
    for await (const b of parts(file, partSize, false)) bytes += b.byteLength
  } else if (op === 'read-stream') {
    const reader = file.stream().getReader()
    for (let r = await reader.read(); !r.done; r = await reader.read()) bytes += r.value.byteLength
  } else if (op === 'read-sync') {
    const reader = new FileReaderSync()
    for (let s = 0; s < file.size; s += partSize) bytes += reader.readAsArrayBuffer(file.slice(s, s + partSize)).byteLength
  } else if (op === 'read-slices') {
    for (let s = 0; s < file.size; s += partSize) bytes += (await file.slice(s, s + partSize).arrayBuffer()).byteLength
  } else {
    throw new Error('unknown leg ' + op)
  }
  return bytes
}
self.onmessage = async (e) => {
  const { op, file, partSize, concurrency } = e.data
  try {
    let n = 0
    if (op.startsWith('read-')) postMessage({ bytes: await readAll(op, file, partSize) })
    if (op === 'read') for await (const b of parts(file, partSize, false)) postMessage({ n: ++n })
    if (op === 'transfer') for await (const b of parts(file, partSize, true)) postMessage({ n: ++n, buf: b.buffer }, [b.buffer])
    if (op === 'put') {
      const inflight = new Set()
      for await (const b of parts(file, partSize, true)) {
        while (inflight.size >= concurrency) await Promise.race(inflight)
        const k = ++n
        const p = fetch('/part?n=' + k, { method: 'PUT', body: b }).then(async (r) => {
          if (!r.ok || Number(await r.text()) !== b.byteLength) throw new Error('part ' + k + ': ' + r.status)
        }).finally(() => inflight.delete(p))
        inflight.add(p)
      }
      await Promise.all(inflight)
      postMessage({ done: true })
    }
  } catch (err) {
    postMessage({ error: String(err) })
  }
}`

// The sink: the page, its worker, part PUTs (read and dropped, answered
// with their length) and the legs' reports.
let report = null
const received = { bytes: 0 }
const sink = createServer((req, res) => {
  if (req.url === '/') return res.writeHead(200, { 'Content-Type': 'text/html' }).end(page)
  if (req.url === '/worker.js') return res.writeHead(200, { 'Content-Type': 'text/javascript' }).end(worker)
  const body = []
  let n = 0
  req.on('data', (c) => {
    n += c.length
    if (req.url === '/report') body.push(c)
  })
  req.on('end', () => {
    if (req.url.startsWith('/part')) received.bytes += n
    if (req.url === '/report') report = JSON.parse(Buffer.concat(body))
    res.writeHead(200).end(String(n))
  })
})
await new Promise((resolve) => sink.listen(0, '127.0.0.1', resolve))
const origin = `http://127.0.0.1:${sink.address().port}`

const chrome = await launchDetached(cfg.chromium || '/usr/bin/chromium')

// chromiumCPU is the CPU seconds of the launched Chromium's processes so
// far, by kind.
function chromiumCPU() {
  const procs = new Map()
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      procs.set(Number(pid), { ppid: Number(f[1]), secs: (Number(f[11]) + Number(f[12])) / 100, cmd: readFileSync(`/proc/${pid}/cmdline`, 'utf8') })
    } catch { /* gone meanwhile */ }
  }
  const ours = (pid) => {
    for (let i = 0; pid > 1 && i < 50; i++, pid = procs.get(pid)?.ppid ?? 0) if (pid === chrome.pid) return true
    return false
  }
  const out = { browser: 0, renderer: 0, network: 0, other: 0 }
  for (const [pid, p] of procs) {
    if (!ours(pid)) continue
    if (pid === chrome.pid) out.browser += p.secs
    else if (p.cmd.includes('--type=renderer')) out.renderer += p.secs
    else if (p.cmd.includes('network.mojom.NetworkService')) out.network += p.secs
    else out.other += p.secs
  }
  return out
}

async function runLeg(leg) {
  const { browser, context, page: pg } = await chrome.connect()
  await pg.goto(origin + '/')
  await setFiles(context, pg, '#f', [cfg.file])
  execFileSync('sync')
  await new Promise((resolve) => setTimeout(resolve, 3000))
  report = null
  received.bytes = 0
  const before = chromiumCPU()
  // The leg starts once the page is on its own.
  await pg.evaluate((leg) => {
    setTimeout(async () => {
      let out
      try {
        out = await window.runLeg(leg)
      } catch (err) {
        out = { error: String(err) }
      }
      await fetch('/report', { method: 'POST', body: JSON.stringify(out) })
    }, 500)
  }, leg)
  await browser.close() // disconnects; the browser and its page go on
  const deadline = Date.now() + legTimeout
  while (!report && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
  const after = chromiumCPU()
  if (!report) throw new Error(`leg ${leg} did not finish in ${legTimeout} ms`)
  if (report.error) throw new Error(`leg ${leg}: ${report.error}`)
  const cpu = Object.fromEntries(Object.keys(after).map((k) => [k, Math.round((after[k] - before[k]) * 100) / 100]))
  return { leg, ms: report.ms, bytes: leg.startsWith('read-') ? report.read : received.bytes, cpu }
}

let code = 0
try {
  const runs = []
  for (let round = 0; round < (cfg.rounds || 3); round++) {
    for (const leg of legs) {
      const r = await runLeg(leg)
      log(`round ${round + 1} ${leg}: ${r.ms.toFixed(0)} ms, Chromium CPU ${JSON.stringify(r.cpu)}`)
      runs.push({ round: round + 1, ...r })
    }
  }
  process.stdout.write('RESULT ' + JSON.stringify({ runs }) + '\n')
} catch (err) {
  log('FAILED:', err.stack || err.message)
  code = 1
} finally {
  await chrome.close()
  sink.close()
}
process.exit(code)
