// Drives Debian's Chromium with playwright-core for ferry's browser tests
// (e2e/browser_test.go). One scenario per run; its configuration comes as
// JSON in FERRY_E2E, its result goes to stdout as one line "RESULT {json}",
// preceded by one line "EXCHANGES [json]" (what Chromium sent ferry and what
// it answered, which the Go side holds to the API contract), and everything
// else goes to stderr.
//
//   FERRY_E2E='{"scenario":"ui-upload","url":…,"token":…,"file":…}' node run.mjs

import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import { mkdtempSync, readFileSync, readdirSync, rmSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'
import { chromium } from 'playwright-core'
import { launchDetached, setFiles } from './detached.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const cfg = JSON.parse(process.env.FERRY_E2E || '{}')
const log = (...a) => console.error('[browser]', ...a)
const MiB = 1 << 20

function fail(msg) {
  throw new Error(msg)
}

// crc32c is the base64 of the big-endian CRC32C (Castagnoli) of buf, as
// S3's x-amz-checksum-crc32c: written here, apart from the SDK's, so the
// tests check the SDK against an independent implementation.
const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1
  return c >>> 0
})
function crc32c(buf) {
  let c = 0xffffffff
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8)
  const out = Buffer.alloc(4)
  out.writeUInt32BE((c ^ 0xffffffff) >>> 0)
  return out.toString('base64')
}

async function until(what, fn, timeoutMs, everyMs = 100) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) fail(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, everyMs))
  }
}

async function api(method, path, body) {
  const resp = await fetch(cfg.url + path, {
    method,
    headers: { Authorization: 'Bearer ' + cfg.token, 'Content-Type': 'application/json' },
    body: body && JSON.stringify(body),
  })
  const text = await resp.text()
  return { status: resp.status, body: text ? JSON.parse(text) : null }
}

let profileDir = ''

async function launch({ bypassCSP = false } = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'ferry-chromium-'))
  profileDir = profile
  // A fresh profile for every run (playwright passes it as --user-data-dir).
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: cfg.chromium || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1100, height: 760 },
    bypassCSP,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  recordExchanges(context)
  const page = context.pages()[0] || await context.newPage()
  page.on('console', (m) => log('console:', m.type(), m.text()))
  page.on('pageerror', (e) => log('page error:', e.message))
  const close = async () => {
    await context.close()
    rmSync(profile, { recursive: true, force: true })
  }
  return { context, page, close }
}

// exchanges are the requests Chromium (pages and workers alike) finished
// with ferry at cfg.url, with ferry's answers: method, URL, headers
// (cookies included), the request body, the status, and the answer's body
// when it is JSON. CORS preflights are the browser's protocol, not calls
// of the API, and are left out; so are requests that got no answer (a
// reload or an abort cut them).
const exchanges = []
const pendingExchanges = []

function recordExchanges(context) {
  const origin = cfg.url && new URL(cfg.url).origin
  context.on('requestfinished', (req) => {
    if (!origin || new URL(req.url()).origin !== origin || req.method() === 'OPTIONS') return
    pendingExchanges.push((async () => {
      const resp = await req.response()
      if (!resp) return
      const headers = await resp.allHeaders()
      const json = /^application\/(problem\+)?json\b/.test(headers['content-type'] || '')
      exchanges.push({
        method: req.method(), url: req.url(), headers: await req.allHeaders(), body: req.postData() || '',
        status: resp.status(), respHeaders: headers, respBody: json ? await resp.text() : '',
      })
    })().catch((e) => log('exchange not recorded:', req.method(), req.url(), e.message)))
  })
}

// procStat reads a process's (or thread's) name, parent and CPU seconds
// (user and system) from its /proc stat file.
function procStat(path) {
  const stat = readFileSync(path, 'utf8')
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return { name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), ppid: Number(f[1]), secs: (Number(f[11]) + Number(f[12])) / 100 }
}

// cpuTimes reads the CPU seconds used so far by ferry (which runs the
// embedded S3 in its process) and by this run's Chromium processes, by
// kind (the renderer split into its main thread, its Web Workers and the
// rest), and how busy the whole machine was (other work included).
function cpuTimes() {
  const procs = new Map()
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      procs.set(Number(pid), { ...procStat(`/proc/${pid}/stat`), cmd: readFileSync(`/proc/${pid}/cmdline`, 'utf8') })
    } catch { /* gone meanwhile */ }
  }
  const browser = [...procs].find(([, p]) => !p.cmd.includes('--type=') && p.cmd.includes(profileDir))
  const ours = (pid) => {
    for (let i = 0; pid > 1 && i < 50; i++, pid = procs.get(pid)?.ppid ?? 0) if (browser && pid === browser[0]) return true
    return false
  }
  const out = { ferry: 0, browser: 0, renderer: 0, rendererMain: 0, workers: 0, network: 0, chromiumOther: 0 }
  for (const [pid, p] of procs) {
    if (pid === cfg.ferryPid) {
      out.ferry += p.secs
    } else if (!ours(pid)) {
      continue
    } else if (!p.cmd.includes('--type=')) {
      out.browser += p.secs
    } else if (p.cmd.includes('--type=renderer')) {
      out.renderer += p.secs
      for (const tid of readdirSync(`/proc/${pid}/task`)) {
        try {
          const t = procStat(`/proc/${pid}/task/${tid}/stat`)
          if (tid === String(pid)) out.rendererMain += t.secs
          else if (/Worker/.test(t.name)) out.workers += t.secs
        } catch { /* the thread ended */ }
      }
    } else if (p.cmd.includes('network.mojom.NetworkService')) {
      out.network += p.secs
    } else {
      out.chromiumOther += p.secs
    }
  }
  const [, ...t] = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).map(Number)
  out.machine = (t.reduce((a, b) => a + b, 0) - t[3] - t[4]) / 100
  return out
}

function cpuSince(before) {
  const now = cpuTimes()
  return Object.fromEntries(Object.entries(now).map(([k, v]) => [k, Math.round((v - before[k]) * 100) / 100]))
}

async function shot(page, name, { fullPage = true } = {}) {
  mkdirSync(cfg.artifacts, { recursive: true })
  const path = join(cfg.artifacts, name)
  log('screenshot', path)
  if (!fullPage) await page.evaluate(() => window.scrollTo(0, 0))
  return page.screenshot({ path, fullPage })
}

async function signIn(page) {
  await page.goto(cfg.url + '/')
  await page.locator('#token').waitFor()
  await page.locator('#token').fill(cfg.token)
  await page.keyboard.press('Enter') // the form works from the keyboard
  await page.locator('#app').waitFor({ state: 'visible' })
}

// S3 PUTs the page sends, by part number.
function countPuts(page) {
  const puts = []
  page.on('request', (r) => {
    if (r.method() === 'PUT' && r.url().startsWith(cfg.s3)) {
      puts.push(Number(new URL(r.url()).searchParams.get('partNumber')))
    }
  })
  return puts
}

async function throttle(page, bytesPerSecond) {
  const cdp = await page.context().newCDPSession(page)
  await cdp.send('Network.enable')
  await cdp.send('Network.emulateNetworkConditions', {
    offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: bytesPerSecond,
  })
  return cdp
}

async function uploadRow(page) {
  const row = page.locator('#uploads li').first()
  await row.waitFor()
  return row
}

async function waitFinal(row, timeoutMs) {
  await until('the upload to end', async () => ['success', 'failed', 'error', 'cancelled'].includes(await row.getAttribute('data-state')), timeoutMs)
  const state = await row.getAttribute('data-state')
  if (state !== 'success') fail(`upload ended ${state}: ${await row.innerText()}`)
}

const scenarios = {
  // Done-when 1 and 6: a file uploaded through the UI ends success; a
  // screenshot is taken mid-upload.
  async 'ui-upload'({ page }) {
    await signIn(page)
    // Signed in, the UI starts its hashing worker before a file is chosen
    // (Ferry.warm), so the first upload does not wait for it; the page
    // (on 127.0.0.1, a secure context) has WebCrypto, so the SDK needs no
    // second one for SHA-256s.
    const hashWorkers = () => page.workers().filter((w) => w.url().includes('hash-worker')).length
    await until('the hashing worker to start', async () => hashWorkers() >= 1, 10000).catch(() => {})
    const workersBeforeFile = hashWorkers()
    const puts = countPuts(page)
    await throttle(page, 24 * MiB) // slow enough to photograph mid-way
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = await uploadRow(page)
    const size = readFileSync(cfg.file).length
    await until('the upload to be a third done', async () =>
      (await row.getAttribute('data-state')) === 'uploading' && Number(await row.getAttribute('data-bytes')) > size / 3, 120000)
    await page.waitForTimeout(600) // a rate and an ETA to show
    await shot(page, 'ui-upload-progress.png')
    await waitFinal(row, 240000)
    await shot(page, 'ui-upload-done.png')
    await page.locator('#tab-files').click()
    await page.locator('#files-body tr').first().waitFor()
    await shot(page, 'ui-files.png')
    // The files list's link downloads the file through ferry's proxy.
    const link = page.locator('#files-body a').first()
    const [dl] = await Promise.all([page.waitForEvent('download'), link.click()])
    const saved = join(mkdtempSync(join(tmpdir(), 'ferry-dl-')), 'file')
    await dl.saveAs(saved)
    // The SDK's warm() resolves once its worker compiled its hashes.
    const warmed = await page.evaluate(async () => {
      const { Ferry } = await import('/assets/ferry.js')
      return new Ferry().warm()
    })
    return {
      uploadId: await row.getAttribute('data-upload-id'), puts: puts.length, downloadURL: await link.getAttribute('href'), workersBeforeFile, warmed,
      download: { name: dl.suggestedFilename(), sha256: createHash('sha256').update(readFileSync(saved)).digest('hex') },
    }
  },

  // Done-when 2: the page is reloaded mid-upload and the same file chosen
  // again; only the parts S3 lacks (or holds damaged) are sent.
  async 'ui-resume'({ page }) {
    await signIn(page)
    const data = readFileSync(cfg.file)
    const cdp = await throttle(page, 16 * MiB)
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = await uploadRow(page)
    await until('some parts to reach S3', async () =>
      (await row.getAttribute('data-state')) === 'uploading' && Number(await row.getAttribute('data-parts')) >= 3, 120000, 20)
    const firstRun = await row.getAttribute('data-upload-id')
    await page.reload()
    await page.locator('#app').waitFor({ state: 'visible' })
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 })
    await page.waitForTimeout(1500) // let S3 settle the PUTs the reload cut
    let found = await api('GET', `/uploads/${firstRun}`)
    if (found.status !== 200 || found.body.state !== 'uploading') fail(`the upload is not resumable after the reload: ${found.status} ${JSON.stringify(found.body)}`)
    if (found.body.checksum_algorithm !== 'CRC32C') fail('the upload does not have S3 check CRC32Cs: ' + JSON.stringify(found.body))
    // New content: ferry gave no instant_candidate, so the page never
    // hashed the file (ferry computes the SHA-256 after the merge).
    if (found.body.sha256) fail(`the page declared sha256 ${found.body.sha256} for content ferry does not hold`)
    // A part S3 holds with other bytes (what a PUT cut off mid-way can
    // leave on some stores): the last part, right size, wrong content.
    let up = found.body
    const damaged = up.part_count
    const body = Buffer.alloc(data.length - (damaged - 1) * up.part_size, 7)
    const signed = await api('POST', `/uploads/${up.upload_id}/presign`, { part_numbers: [damaged], checksum_crc32c: { [damaged]: crc32c(body) } })
    const u = signed.body.urls[damaged]
    const bad = await fetch(u.url, { method: 'PUT', headers: u.headers, body })
    if (bad.status !== 200) fail('PUT of the damaged part: ' + bad.status)
    found = await api('GET', `/uploads/${firstRun}`)
    up = found.body
    const intact = []
    for (const p of up.parts) {
      const part = data.subarray((p.part_number - 1) * up.part_size, Math.min(p.part_number * up.part_size, data.length))
      if (p.size === part.length && p.checksum_crc32c === crc32c(part)) intact.push(p.part_number)
    }
    log(`after the reload S3 holds ${up.parts.length} of ${up.part_count} parts, ${intact.length} intact`)
    const puts = countPuts(page)
    await page.locator('#file-input').setInputFiles(cfg.file)
    const again = await uploadRow(page)
    await waitFinal(again, 240000)
    return {
      uploadId: await again.getAttribute('data-upload-id'), firstRun, partCount: up.part_count, damaged,
      listed: up.parts.map((p) => p.part_number), intact, puts,
    }
  },

  // The SDK's behaviours through the UI: instant upload after a proof of
  // possession (someone else holds the content), pause and resume, a
  // failed PUT retried after a backoff, and a refused URL signed again.
  async 'ui-sdk'({ page }) {
    await signIn(page)
    const puts = countPuts(page)
    // The hashing workers (started at sign-in) note the size of each
    // input WebCrypto digests: a file of up to 16 MiB, and each range a
    // proof hashes, should be one.
    await until('the hashing worker to start', async () => page.workers().some((w) => w.url().includes('hash-worker')), 10000)
    const hashWorkers = page.workers().filter((w) => w.url().includes('hash-worker'))
    for (const w of hashWorkers) {
      await w.evaluate(() => {
        const digest = crypto.subtle.digest.bind(crypto.subtle)
        self.digested = []
        crypto.subtle.digest = (alg, data) => { self.digested.push(data.byteLength); return digest(alg, data) }
      })
    }
    // The proof: nothing is PUT, the file exists at once.
    await page.locator('#file-input').setInputFiles(cfg.known)
    const known = await uploadRow(page)
    await waitFinal(known, 60000)
    const digested = []
    for (const w of hashWorkers) digested.push(...await w.evaluate(() => self.digested))
    const instant = { instant: await known.getAttribute('data-instant'), puts: puts.length, uploadId: await known.getAttribute('data-upload-id'), digested }

    // Part 2's first PUT fails at the network, part 3's first is refused
    // with 403 as an expired URL would be.
    const attempts = {}
    const presigns = []
    page.on('request', (r) => {
      if (r.method() === 'POST' && /\/uploads\/[^/]+\/presign$/.test(new URL(r.url()).pathname)) presigns.push(JSON.parse(r.postData()).part_numbers)
    })
    await page.route((u) => u.href.startsWith(cfg.s3), async (route) => {
      const n = Number(new URL(route.request().url()).searchParams.get('partNumber'))
      const seen = (attempts[n] = attempts[n] || []).push(Date.now())
      if (n === 2 && seen === 1) return route.abort('connectionreset')
      if (n === 3 && seen === 1) {
        return route.fulfill({ status: 403, headers: { 'Access-Control-Allow-Origin': '*' }, body: '<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>' })
      }
      return route.continue()
    })
    // Which PUTs the page sends while paused is told on the page's own
    // clock: Playwright's request event reaches this harness some time
    // after the send (later still with the requests routed and
    // throttled), so counting those events could place a PUT sent just
    // before the pause after it.
    await page.evaluate((s3) => {
      window.sentPuts = []
      const { open, send } = XMLHttpRequest.prototype
      XMLHttpRequest.prototype.open = function (method, url, ...rest) {
        this.toS3 = method === 'PUT' && String(url).startsWith(s3)
        return open.call(this, method, url, ...rest)
      }
      XMLHttpRequest.prototype.send = function (body) {
        if (this.toS3) window.sentPuts.push(performance.now())
        return send.call(this, body)
      }
    }, cfg.s3)
    await throttle(page, 8 * MiB)
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = page.locator('#uploads li').first()
    await until('the second upload to start', async () => (await row.getAttribute('data-upload-id')) !== instant.uploadId &&
      (await row.getAttribute('data-state')) === 'uploading' && Number(await row.getAttribute('data-parts')) >= 1, 120000, 20)
    await row.evaluate((li) => {
      new MutationObserver(() => {
        if (li.dataset.state === 'paused' && window.pausedAt === undefined) window.pausedAt = performance.now()
      }).observe(li, { attributes: true, attributeFilter: ['data-state'] })
    })
    await row.getByRole('button', { name: 'Pause' }).click()
    await until('the pause', async () => (await row.getAttribute('data-state')) === 'paused', 5000, 20)
    await page.waitForTimeout(2000)
    const duringPause = await page.evaluate(() => {
      if (window.pausedAt === undefined || window.sentPuts.length === 0) throw new Error('the pause or the PUTs before it went unseen')
      return window.sentPuts.filter((t) => t > window.pausedAt).length
    })
    await shot(page, 'ui-paused.png')
    await row.getByRole('button', { name: 'Resume' }).focus()
    await page.keyboard.press('Enter')
    await waitFinal(row, 240000)
    return {
      instant, duringPause, attempts, presigns, uploadId: await row.getAttribute('data-upload-id'),
    }
  },

  // A part damaged on its way to S3 (one bit flipped in the PUT's body,
  // as a bad link or proxy might) is refused by S3, whose signed CRC32C
  // does not match, and the SDK reads the part again and sends it.
  async 'ui-corrupt'({ page }) {
    await signIn(page)
    const data = readFileSync(cfg.file)
    const answers = {}
    page.on('response', async (r) => {
      const req = r.request()
      if (req.method() !== 'PUT' || !r.url().startsWith(cfg.s3)) return
      const n = new URL(r.url()).searchParams.get('partNumber')
      const code = r.status() === 200 ? '' : (/<Code>([^<]+)<\/Code>/.exec(await r.text().catch(() => '')) || [])[1] || '?'
      ;(answers[n] = answers[n] || []).push({ status: r.status(), code, crc32c: (await req.allHeaders())['x-amz-checksum-crc32c'] || '' })
    })
    let damaged = 0
    await page.route((u) => u.href.startsWith(cfg.s3), async (route) => {
      const req = route.request()
      const n = Number(new URL(req.url()).searchParams.get('partNumber'))
      if (req.method() === 'PUT' && n === cfg.damage && damaged++ === 0) {
        const part = Buffer.from(data.subarray((n - 1) * 8 * MiB, Math.min(n * 8 * MiB, data.length)))
        part[12345] ^= 1
        return route.continue({ postData: part })
      }
      return route.continue()
    })
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = await uploadRow(page)
    await waitFinal(row, 240000)
    const local = {}
    for (let n = 1; n <= Math.ceil(data.length / (8 * MiB)); n++) local[n] = crc32c(data.subarray((n - 1) * 8 * MiB, Math.min(n * 8 * MiB, data.length)))
    return { uploadId: await row.getAttribute('data-upload-id'), answers, local }
  },

  // A store without checksums, as ferry would find at start-up: the
  // upload's POST /uploads loses its checksum_algorithm on the way, so
  // ferry does not grant CRC32C, and the SDK pins each part's Content-MD5
  // instead (some parts were streamed before it knew, and are read again
  // for their MD5).
  async 'ui-md5'({ page }) {
    await signIn(page)
    await page.route((u) => u.href === cfg.url + '/uploads', async (route) => {
      const req = route.request()
      if (req.method() !== 'POST') return route.continue()
      const body = JSON.parse(req.postData())
      delete body.checksum_algorithm
      return route.continue({ postData: JSON.stringify(body) })
    })
    const presigns = []
    const puts = []
    page.on('request', async (r) => {
      const url = new URL(r.url())
      if (r.method() === 'POST' && /\/uploads\/[^/]+\/presign$/.test(url.pathname)) presigns.push(JSON.parse(r.postData()))
      if (r.method() === 'PUT' && r.url().startsWith(cfg.s3)) {
        const h = await r.allHeaders()
        puts.push({ part: Number(url.searchParams.get('partNumber')), md5: h['content-md5'] || '', crc32c: h['x-amz-checksum-crc32c'] || '' })
      }
    })
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = await uploadRow(page)
    await waitFinal(row, 240000)
    const data = readFileSync(cfg.file)
    const local = {}
    for (let n = 1; (n - 1) * 8 * MiB < data.length; n++) local[n] = createHash('md5').update(data.subarray((n - 1) * 8 * MiB, n * 8 * MiB)).digest('base64')
    return { uploadId: await row.getAttribute('data-upload-id'), presigns, puts, local }
  },

  // A read of the file that never answers, as headless Chromium's Blob
  // streams now and then did under load: the hashing worker's reads are
  // made to stall once, at the first read after 8 MiB. The worker gives
  // up on it after a few seconds, reads the rest by slices, and the
  // upload ends done.
  async 'ui-stalled-read'({ page }) {
    await signIn(page)
    await until('the hashing worker to start', async () => page.workers().some((w) => w.url().includes('hash-worker')), 10000)
    const workers = page.workers().filter((w) => w.url().includes('hash-worker'))
    for (const w of workers) {
      await w.evaluate((after) => {
        const read = ReadableStreamBYOBReader.prototype.read
        let seen = 0
        self.stalls = 0
        ReadableStreamBYOBReader.prototype.read = function (view) {
          if (seen >= after && self.stalls === 0) {
            self.stalls++
            return new Promise(() => {})
          }
          return read.call(this, view).then((r) => {
            if (r.value) seen += r.value.byteLength
            return r
          })
        }
      }, 8 * MiB)
    }
    const started = Date.now()
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = await uploadRow(page)
    await waitFinal(row, 60000)
    let stalls = 0
    for (const w of workers) stalls += await w.evaluate(() => self.stalls)
    return { uploadId: await row.getAttribute('data-upload-id'), stalls, ms: Date.now() - started }
  },

  // A part PUT whose connection freezes mid-body (the Go test holds the
  // first connection to S3 that carries 3 MiB; later ones pass): the SDK,
  // given a short idleTimeout, aborts it and sends the part again, and the
  // upload ends in success. Without the bound the PUT waits for ever; the
  // race below ends the wait after 60 s.
  async 'sdk-frozen-put'({ page }) {
    await signIn(page)
    await page.goto(cfg.url + '/readyz')
    await page.evaluate(() => { document.body.innerHTML = '<input type="file" id="f">' })
    await page.locator('#f').setInputFiles(cfg.file)
    const r = await page.evaluate(async (idle) => {
      const { Ferry } = await import('/assets/ferry.js')
      const up = new Ferry({ idleTimeout: idle }).upload(document.getElementById('f').files[0])
      const retries = []
      up.addEventListener('retry', (ev) => retries.push(ev.detail.message))
      const t0 = performance.now()
      const res = await Promise.race([up.start(), new Promise((resolve) => setTimeout(() => resolve({ state: 'still waiting after 60 s' }), 60000))])
      return { state: res.state, uploadId: res.upload_id, retries, ms: Math.round(performance.now() - t0) }
    }, cfg.idle)
    if (r.state !== 'success') fail(`upload with a frozen PUT: ${JSON.stringify(r)}`)
    return r
  },

  // A page without WebCrypto (plain HTTP on a host other than localhost),
  // made here by hiding crypto.subtle in the page and in the hashing
  // worker's script: the SDK hashes with hash-wasm, the file's SHA-256 on
  // its second worker. Content someone else holds is still proved and
  // given at once.
  async 'ui-no-webcrypto'({ page }) {
    await withoutWebCrypto(page)
    await signIn(page)
    const puts = countPuts(page)
    await page.locator('#file-input').setInputFiles(cfg.known)
    const row = await uploadRow(page)
    await waitFinal(row, 60000)
    const workers = page.workers().filter((w) => w.url().includes('hash-worker'))
    const subtle = [await page.evaluate(() => !!self.crypto.subtle)]
    for (const w of workers) subtle.push(await w.evaluate(() => !!self.crypto.subtle))
    return { instant: await row.getAttribute('data-instant'), puts: puts.length, subtle }
  },

  // Hashing alongside the PUTs: content the user already has, and content
  // someone else holds, sent on a slow link. Once the SHA-256 is known the
  // SDK declares it; ferry answers with the file at once (after a proof,
  // for someone else's), and the running upload is abandoned with most of
  // its parts never sent.
  async 'ui-declare'({ page }) {
    await signIn(page)
    const puts = countPuts(page)
    const calls = []
    page.on('request', (r) => {
      const path = new URL(r.url()).pathname
      if (!r.url().startsWith(cfg.url)) return
      if ((r.method() === 'POST' && /^\/uploads\/[^/]+\/sha256$/.test(path)) || (r.method() === 'POST' && path.startsWith('/uploads/proofs/')) ||
        (r.method() === 'DELETE' && path.startsWith('/uploads/'))) calls.push(r.method() + ' ' + path)
    })
    await throttle(page, 8 * MiB)
    const out = {}
    for (const [name, file] of Object.entries(cfg.files)) {
      const before = puts.length
      const first = calls.length
      await page.locator('#file-input').setInputFiles(file)
      const row = page.locator(`#uploads li[data-upload="${basename(file)}"]`)
      await row.waitFor()
      await waitFinal(row, 120000)
      out[name] = {
        instant: await row.getAttribute('data-instant'), uploadId: await row.getAttribute('data-upload-id'),
        puts: puts.length - before, calls: calls.slice(first),
      }
    }
    return out
  },

  // The SDK's skipHash: the same file uploaded twice from ferry's page
  // with the SHA-256 left to ferry. Neither upload declares a SHA-256 (at
  // init, mid-transfer or at complete), so the second cannot be instant and
  // sends every part again; each completes with S3's CRC32C alone. The
  // calls also list part reports (PUT /uploads/{id}/parts/{n}), which the
  // SDK does not make.
  async 'sdk-skip-hash'({ page }) {
    await signIn(page)
    const puts = countPuts(page)
    const calls = []
    const presigns = []
    page.on('request', (r) => {
      if (!r.url().startsWith(cfg.url)) return
      const path = new URL(r.url()).pathname
      if (r.method() === 'POST' && /^\/uploads\/[^/]+\/presign$/.test(path)) {
        presigns.push(JSON.parse(r.postData()).part_numbers)
        return
      }
      const call = r.method() === 'POST' && /^\/uploads(\/[^/]+\/(sha256|complete))?$/.test(path)
      const report = r.method() === 'PUT' && /^\/uploads\/[^/]+\/parts\/\d+$/.test(path)
      if (!call && !report) return
      calls.push({
        path: (report ? 'PUT ' : '') + path.replace(/^\/uploads\/[^/]+\//, '/uploads/{id}/'),
        body: JSON.parse(r.postData() || '{}'),
      })
    })
    await page.evaluate(() => document.body.append(Object.assign(document.createElement('input'), { type: 'file', id: 'f' })))
    const out = []
    for (let i = 0; i < 2; i++) {
      await page.locator('#f').setInputFiles(cfg.file)
      const before = puts.length
      const first = calls.length
      const signed = presigns.length
      const r = await page.evaluate(async () => {
        const { Ferry } = await import('/assets/ferry.js')
        const up = new Ferry().upload(document.getElementById('f').files[0], { skipHash: true })
        const res = await up.start()
        return { state: res.state, uploadId: res.upload_id, sha256: up.sha256, crc32c: up.crc32c }
      })
      out.push({ ...r, puts: puts.length - before, calls: calls.slice(first), presigns: presigns.slice(signed) })
      log('skip-hash', i + 1, JSON.stringify(out[i]))
    }
    return { uploads: out }
  },

  // The benchmark: the same 256 MiB sent from the same page as bare part
  // PUTs (no hashing: presigned up front, 8 MiB parts, 4 at once, like the
  // SDK), once without checksums, once with each part's CRC32C (computed
  // here beforehand) for S3 to check, and once more with the CRC32Cs and
  // then complete (the whole file's CRC32C, also computed here) and the
  // wait for success: an upload that reads and hashes nothing, which
  // pays S3's CompleteMultipartUpload as the UI does; and through the UI
  // (hashing in the worker, CRC32C-checked parts, complete, S3's check of
  // the whole file, success), and through the SDK with skipHash (the same
  // without the SHA-256: what the client's hash costs). Runs alternate,
  // each leg after a settle; every UI run has a file of its own, since a
  // second upload of the same content would be instant; skipHash never
  // is, so it sends the bare file.
  // cfg.uplink (MiB/s), when set, limits the page's upload rate, as a real
  // link would. Without it the legs run in a Chromium of the benchmark's
  // own, with DevTools detached while each leg runs (detached.mjs): the
  // page starts the leg on its own and titles itself when done. Throttling
  // needs DevTools attached, so a limited uplink runs attached.
  // BenchmarkBrowserFirstUpload: a fresh page's first upload through the
  // SDK, of files of new random bytes, three ways each round: the hashing
  // worker started by the upload (cold), started ahead by warm() (warm),
  // and warm on a page without WebCrypto (no-webcrypto). Each page is a
  // new tab on a bare document of ferry's origin, so nothing but the leg
  // starts the workers; ms from start() to POST /uploads sent and to
  // success.
  async 'first-upload'({ page }) {
    await signIn(page)
    const runs = []
    for (let round = 1; round <= cfg.rounds; round++) {
      for (const leg of ['cold', 'warm', 'no-webcrypto']) {
        for (const file of cfg.files[round - 1][leg]) {
          const tab = await page.context().newPage()
          const restore = leg === 'no-webcrypto' ? await withoutWebCrypto(tab) : null
          await tab.goto(cfg.url + '/readyz')
          await tab.evaluate(() => { document.body.innerHTML = '<input type="file" id="f">' })
          await tab.locator('#f').setInputFiles(file)
          await tab.evaluate(async (warm) => {
            const { Ferry } = await import('/assets/ferry.js')
            window.ferry = new Ferry()
            if (warm) await window.ferry.warm()
          }, leg !== 'cold')
          // Routing has Playwright hold every request of the page, the
          // part PUTs too; the workers have their script by now.
          if (restore) await restore()
          const r = await tab.evaluate(async () => {
            const f = document.getElementById('f').files[0]
            const t0 = performance.now()
            const res = await window.ferry.upload(f).start()
            const total = performance.now() - t0
            const post = performance.getEntriesByType('resource').find((e) => new URL(e.name).pathname === '/uploads' && e.startTime >= t0)
            return { state: res.state, size: f.size, post: post ? post.startTime - t0 : null, total }
          })
          if (r.state !== 'success' || r.post === null) fail(`${leg} upload of ${file}: ${JSON.stringify(r)}`)
          runs.push({ round, leg, ...r })
          await tab.close()
        }
      }
    }
    return { runs }
  },

  async bench({ page: launched }) {
    const detached = cfg.uplink ? null : await launchDetached(cfg.chromium || '/usr/bin/chromium')
    try {
      return await benchRounds(launched, detached)
    } finally {
      if (detached) await detached.close()
    }
  },

  // Done-when 3 and 6: a double click on "Create export" makes one job;
  // the exports page is photographed once it is done.
  async 'ui-export'({ page }) {
    await signIn(page)
    const posts = []
    page.on('request', (r) => {
      if (r.method() === 'POST' && new URL(r.url()).pathname === '/exports') posts.push(r.headers()['idempotency-key'])
    })
    await page.locator('#tab-exports').click()
    await page.locator('#export-create').dblclick()
    await until('both clicks to be sent', async () => posts.length >= 2, 10000)
    const row = page.locator('#exports-body tr').first()
    await row.waitFor()
    await until('the export to finish', async () => ['done', 'failed'].includes(await row.getAttribute('data-state')), 120000, 250)
    await page.waitForTimeout(300)
    await shot(page, 'ui-exports.png')
    const ids = await page.locator('#exports-body tr').evaluateAll((trs) => trs.map((tr) => tr.dataset.export))
    // The download button fetches a fresh signed link and follows it
    // (through ferry's download proxy).
    const [dl] = await Promise.all([page.waitForEvent('download'), row.getByRole('button', { name: 'Download' }).click()])
    const saved = join(mkdtempSync(join(tmpdir(), 'ferry-dl-')), 'export')
    await dl.saveAs(saved)
    const body = readFileSync(saved)
    return {
      keys: posts, rows: ids, state: await row.getAttribute('data-state'),
      download: { name: dl.suggestedFilename(), bytes: body.length, sha256: createHash('sha256').update(body).digest('hex') },
    }
  },

  // Done-when 4: unmodified Uppy 6 with companionEndpoint pointing at
  // ferry, running in a page of ferry's own origin (ferry's UI page, with
  // the test's script added) and signed in with the session cookie.
  async uppy6({ page }) {
    await uppy6Page(page)
    return runUppy(page, { companionEndpoint: cfg.url })
  },

  // Issue 11, item 6: Uppy 6 on ferry's page uploads a small file through
  // a POST policy (GET /s3/params, same-origin); then a link on a page of
  // another site (localhost is not 127.0.0.1's site) sends the signed-in
  // browser to /s3/params, carrying the SameSite=Lax cookie, and ferry
  // refuses it.
  async 'uppy6-params'({ page }) {
    await uppy6Page(page)
    const uppy = await runUppy(page, { companionEndpoint: cfg.url })
    const target = cfg.url + '/s3/params?filename=planted.txt&type=text%2Fplain'
    const srv = createServer((req, res) => {
      res.setHeader('Content-Type', 'text/html; charset=utf-8')
      res.end(`<!doctype html><meta charset="utf-8"><title>elsewhere</title><a id="go" href="${target}">win a prize</a>`)
    })
    const { port } = new URL(cfg.crossSite)
    await new Promise((resolve) => srv.listen(Number(port), '127.0.0.1', resolve))
    try {
      await page.goto(cfg.crossSite + '/')
      const [resp] = await Promise.all([
        page.waitForResponse((r) => r.url().startsWith(cfg.url + '/s3/params'), { timeout: 30000 }),
        page.click('#go'),
      ])
      const req = resp.request()
      return {
        uppy,
        crossSite: {
          status: resp.status(), body: await resp.text(),
          secFetchSite: (await req.allHeaders())['sec-fetch-site'] || '',
          sentCookie: /ferry_session=/.test((await req.allHeaders()).cookie || ''),
        },
      }
    } finally {
      srv.close()
    }
  },

  // Done-when 5: @uppy/aws-s3 5.1.0 in endpoint mode with an
  // Authorization header, from a page of another origin that ferry allows
  // (served here by a small local server).
  async uppy5({ page }) {
    return onOrigin(page, join(here, 'uppy5', 'uppy5-entry.js'),
      () => runUppy(page, { endpoint: cfg.url, headers: { authorization: 'Bearer ' + cfg.token } }))
  },

  // Issue 20, item 1: the server stops answering mid-upload (connections
  // refused, as from a stopped server). The card says the connection is
  // lost and counts down to the next try; once the SDK gives up (its
  // budget is run through on the page's fake clock) it says the upload
  // stopped and offers Retry and Dismiss; with the server back, Retry
  // resumes in the same card, sending only the parts S3 lacks.
  async 'ui-connection-lost'({ page }) {
    await page.clock.install()
    await signIn(page)
    const puts = countPuts(page)
    const cdp = await throttle(page, 4 * MiB)
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = await uploadRow(page)
    await until('some parts to reach S3', async () =>
      (await row.getAttribute('data-state')) === 'uploading' && Number(await row.getAttribute('data-parts')) >= 2, 120000, 20)
    const firstRun = await row.getAttribute('data-upload-id')
    const down = (u) => u.href.startsWith(cfg.url) || u.href.startsWith(cfg.s3)
    await page.route(down, (route) => route.abort('connectionrefused'))
    const note = row.locator('.note')
    const lost = await until('the connection-lost note', async () => {
      const t = await note.isVisible() ? await note.innerText() : ''
      return /Connection lost — retrying in \d+ s/.test(t) && t
    }, 60000, 50)
    const stateWhileLost = await row.locator('.state').innerText()
    await shot(page, 'ui-connection-lost.png')
    for (let i = 0; i < 60 && (await row.getAttribute('data-state')) !== 'error'; i++) {
      await page.clock.fastForward(5000)
      await page.waitForTimeout(50)
    }
    const stopped = await row.locator('p.error').innerText()
    const buttons = []
    for (const b of await row.locator('button').all()) if (await b.isVisible()) buttons.push(await b.innerText())
    await shot(page, 'ui-connection-stopped.png')
    const partsBefore = (await api('GET', `/uploads/${firstRun}`)).body
    await page.unroute(down)
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 })
    const before = puts.length
    await row.getByRole('button', { name: 'Retry' }).click()
    await waitFinal(row, 240000)
    return {
      lost, stateWhileLost, stopped, buttons, firstRun, uploadId: await row.getAttribute('data-upload-id'),
      cards: await page.locator('#uploads li').count(), partCount: partsBefore.part_count,
      listedBefore: partsBefore.parts.length, putsAfterRetry: puts.slice(before),
    }
  },

  // Issue 20, items 1 and 2: a file dropped outside the drop zone uploads
  // (the page stays); Cancel asks first; a reload and a sign-out while an
  // upload runs ask first; Stop upload cancels, with Retry and Dismiss.
  async 'ui-guards'({ page }) {
    await signIn(page)
    await throttle(page, 2 * MiB)
    const dialogs = []
    page.on('dialog', async (d) => { dialogs.push({ type: d.type(), message: d.message() }); await d.dismiss() })
    const start = page.url()
    const dt = await page.evaluateHandle(() => {
      const d = new DataTransfer()
      const bytes = new Uint8Array(24 << 20)
      crypto.getRandomValues(bytes.subarray(0, 65536))
      d.items.add(new File([bytes], 'dropped.bin', { type: 'application/octet-stream' }))
      return d
    })
    for (const type of ['dragenter', 'dragover', 'drop']) await page.dispatchEvent('header h1', type, { dataTransfer: dt })
    const row = page.locator('#uploads li[data-upload="dropped.bin"]')
    await row.waitFor()
    await until('the dropped file to upload', async () => (await row.getAttribute('data-state')) === 'uploading', 60000, 50)
    const out = { stayed: page.url() === start }

    await row.getByRole('button', { name: 'Cancel' }).click()
    out.confirmShown = await row.locator('.confirm').isVisible()
    out.focusAfterCancel = await page.evaluate(() => document.activeElement.textContent)
    await row.getByRole('button', { name: 'Keep uploading' }).click()
    out.afterKeep = await row.getAttribute('data-state')

    // A reload while the upload runs: the browser asks (beforeunload),
    // and staying keeps the upload.
    await page.evaluate(() => setTimeout(() => location.reload(), 0))
    await until('the beforeunload dialog', async () => dialogs.length >= 1, 10000, 50)
    await page.waitForTimeout(300)
    out.afterReload = { state: await row.getAttribute('data-state'), cards: await page.locator('#uploads li').count() }

    // Signing out while it runs asks too; declining keeps the session.
    await page.locator('#sign-out').click()
    await until('the sign-out question', async () => dialogs.length >= 2, 10000, 50)
    await page.waitForTimeout(300)
    out.afterSignOut = { signedIn: await page.locator('#app').isVisible(), state: await row.getAttribute('data-state') }

    await row.getByRole('button', { name: 'Cancel' }).click()
    await row.getByRole('button', { name: 'Stop upload' }).click()
    await until('the cancel', async () => (await row.getAttribute('data-state')) === 'cancelled', 10000, 50)
    out.cancelled = []
    for (const b of await row.locator('button').all()) if (await b.isVisible()) out.cancelled.push(await b.innerText())
    await shot(page, 'ui-cancelled.png')
    await row.getByRole('button', { name: 'Dismiss' }).click()
    out.afterDismiss = { cards: await page.locator('#uploads li').count(), focus: await page.evaluate(() => document.activeElement.id || document.activeElement.tagName) }
    out.dialogs = dialogs
    return out
  },

  // Issue 20, items 3, 4, 10 and 12: every screen at desktop width, at a
  // phone's 375 px and at 200 % zoom (a 1280 px window zoomed to 200 %
  // lays out as 640 CSS px), checked for sideways scrolling and by axe-core;
  // an upload's announcements counted in the status region against its
  // progress bar's changes; the files list paged past 100.
  async 'ui-a11y'({ page }) {
    const axePath = join(here, 'node_modules', 'axe-core', 'axe.min.js')
    const audit = async (screen) => {
      if (!await page.evaluate(() => typeof window.axe !== 'undefined')) await page.addScriptTag({ path: axePath })
      const r = await page.evaluate(async () => {
        const res = await window.axe.run(document)
        return {
          passes: res.passes.map((x) => x.id),
          violations: res.violations.map((x) => ({ id: x.id, impact: x.impact, help: x.help, targets: x.nodes.slice(0, 3).map((n) => n.target.join(' ')) })),
        }
      })
      log('axe on', screen, JSON.stringify(r.violations), r.passes.length, 'rules passed')
      return { screen, ...r }
    }
    const overflow = () => page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)
    const widths = [{ name: 'phone', width: 375, height: 812 }, { name: 'zoom200', width: 640, height: 400 }]
    const desktop = { width: 1100, height: 760 }
    const out = { audits: [], reflow: [] }
    const reflow = async (screen, shotName) => {
      for (const w of widths) {
        await page.setViewportSize({ width: w.width, height: w.height })
        await page.waitForTimeout(100)
        out.reflow.push({ screen, viewport: w.name, overflow: await overflow() })
        if (w.name === 'phone' && shotName) await shot(page, shotName, { fullPage: false })
      }
      await page.setViewportSize(desktop)
    }

    await page.goto(cfg.url + '/')
    await page.locator('#token').waitFor()
    out.audits.push(await audit('sign-in'))
    await shot(page, 'ui-signin.png', { fullPage: false })
    await reflow('sign-in', 'ui-signin-phone.png')
    await page.locator('#token').fill(cfg.token)
    await page.keyboard.press('Enter')
    await page.locator('#app').waitFor({ state: 'visible' })
    out.focusAfterSignIn = await page.evaluate(() => document.activeElement.id)

    // One upload: what the status region says, against how often the
    // progress bar changed.
    await page.evaluate(() => {
      window.said = []
      window.ticks = 0
      const status = document.getElementById('status')
      new MutationObserver(() => window.said.push(status.textContent)).observe(status, { childList: true, characterData: true, subtree: true })
      new MutationObserver((ms) => { window.ticks += ms.filter((m) => m.attributeName === 'aria-valuenow').length })
        .observe(document.getElementById('uploads'), { attributes: true, subtree: true, attributeFilter: ['aria-valuenow'] })
    })
    const cdp = await throttle(page, 6 * MiB)
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = await uploadRow(page)
    await until('the upload to be under way', async () => (await row.getAttribute('data-state')) === 'uploading' &&
      Number(await row.getAttribute('data-bytes')) > 6 * MiB, 60000, 50)
    await page.waitForTimeout(600) // a rate and a time left to show
    await shot(page, 'ui-upload-progress.png', { fullPage: false })
    await reflow('upload (in progress)', 'ui-upload-phone.png')
    await waitFinal(row, 240000)
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 })
    out.live = await page.evaluate(() => {
      const lists = []
      for (let n = document.getElementById('uploads'); n; n = n.parentElement) if (n.getAttribute('aria-live') || ['status', 'log', 'alert'].includes(n.getAttribute('role'))) lists.push(n.id || n.tagName)
      const bar = document.querySelector('#uploads [role=progressbar]')
      return { said: window.said, ticks: window.ticks, liveAncestors: lists, valueNow: bar.getAttribute('aria-valuenow'), valueText: bar.getAttribute('aria-valuetext') }
    })
    await row.locator('a.download').waitFor({ timeout: 10000 })
    out.doneLink = await row.locator('a.download').getAttribute('href')
    out.audits.push(await audit('upload'))
    await shot(page, 'ui-upload.png', { fullPage: false })

    await page.locator('#tab-files').click()
    await page.locator('#files-body tr').first().waitFor()
    out.files = { firstPage: await page.locator('#files-body tr').count(), more: await page.locator('#files-more').isVisible() }
    await page.locator('#files-more').click()
    await until('the second page', async () => (await page.locator('#files-body tr').count()) > out.files.firstPage, 10000, 50)
    out.files.all = await page.locator('#files-body tr').count()
    out.files.moreAfter = await page.locator('#files-more').isVisible()
    out.audits.push(await audit('files'))
    await shot(page, 'ui-files.png', { fullPage: false })
    await reflow('files', 'ui-files-phone.png')

    await page.locator('#tab-exports').click()
    await until('the exports to finish', async () => (await page.locator('#exports-body tr[data-state=done]').count()) >= cfg.exports, 60000, 100)
    out.audits.push(await audit('exports'))
    await shot(page, 'ui-exports.png', { fullPage: false })
    await reflow('exports', 'ui-exports-phone.png')
    await page.locator('#tab-upload').focus()
    await page.keyboard.press('End')
    out.endKey = await page.evaluate(() => document.activeElement.id)
    return out
  },

  // Issue 20, items 5 and 7: a pause keeps the bytes S3 has on the bar,
  // and says what will be sent again; after a reload the page remembers
  // the unfinished upload (IndexedDB: name, size, upload id) and says how
  // much is already uploaded; choosing the file continues it, and once it
  // is done it is forgotten.
  async 'ui-remembered'({ page }) {
    await signIn(page)
    const cdp = await throttle(page, 6 * MiB)
    await page.locator('#file-input').setInputFiles(cfg.file)
    let row = await uploadRow(page)
    await until('a third of the file in S3', async () => (await row.getAttribute('data-state')) === 'uploading' &&
      Number(await row.getAttribute('data-parts')) * 8 * MiB >= cfg.size / 3, 120000, 20)
    const out = {}
    await row.getByRole('button', { name: 'Pause' }).click()
    await until('the pause', async () => (await row.getAttribute('data-state')) === 'paused', 5000, 20)
    await page.waitForTimeout(300)
    out.paused = {
      parts: Number(await row.getAttribute('data-parts')), valueNow: Number(await row.locator('[role=progressbar]').getAttribute('aria-valuenow')),
      text: await row.locator('.stats').innerText(),
    }
    // The lowest the bar goes from Resume until the next part lands.
    await row.locator('[role=progressbar]').evaluate((bar) => {
      window.lowest = Number(bar.getAttribute('aria-valuenow'))
      new MutationObserver(() => { window.lowest = Math.min(window.lowest, Number(bar.getAttribute('aria-valuenow'))) })
        .observe(bar, { attributes: true, attributeFilter: ['aria-valuenow'] })
    })
    await row.getByRole('button', { name: 'Resume' }).click()
    await until('another part', async () => Number(await row.getAttribute('data-parts')) > out.paused.parts, 60000, 20)
    out.resumed = { valueNow: await page.evaluate(() => window.lowest) }
    const uploadId = await row.getAttribute('data-upload-id')
    await page.reload()
    await page.locator('#app').waitFor({ state: 'visible' })
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 })
    const note = page.locator('#uploads li.remembered')
    await note.waitFor({ timeout: 15000 })
    out.note = { text: await note.innerText(), id: await note.getAttribute('data-remembered') }
    await shot(page, 'ui-remembered.png')
    await page.locator('#file-input').setInputFiles(cfg.file)
    out.notesAfterChoosing = await page.locator('#uploads li.remembered').count()
    row = await uploadRow(page)
    await waitFinal(row, 240000)
    out.uploadId = uploadId
    out.resumedId = await row.getAttribute('data-upload-id')
    await page.reload()
    await page.locator('#app').waitFor({ state: 'visible' })
    await page.waitForTimeout(1500)
    out.notesAfterDone = await page.locator('#uploads li.remembered').count()
    return out
  },

  // Issue 20, items 8 and 9: a file over FERRY_MAX_UPLOAD_SIZE, and an
  // empty one, are refused in words before any read or request; an ended
  // session (the account deactivated) brings the sign-in form back.
  async 'ui-limits'({ page }) {
    await signIn(page)
    const calls = []
    page.on('request', (r) => { if (r.url().startsWith(cfg.url + '/uploads')) calls.push(r.method() + ' ' + new URL(r.url()).pathname) })
    await page.locator('#file-input').setInputFiles(cfg.file)
    await page.locator('#file-input').setInputFiles({ name: 'empty.txt', mimeType: 'text/plain', buffer: Buffer.alloc(0) })
    const out = { cards: [] }
    await page.waitForTimeout(500)
    for (const li of await page.locator('#uploads li').all()) {
      out.cards.push({ name: await li.getAttribute('data-upload'), state: await li.getAttribute('data-state'), text: await li.locator('p.error').innerText() })
    }
    out.status = await page.locator('#status').textContent()
    out.calls = calls
    await shot(page, 'ui-limits.png')
    const r = await fetch(cfg.url + '/admin/users/' + cfg.userId + '/deactivate', { method: 'POST', headers: { Authorization: 'Bearer ' + cfg.admin } })
    if (r.status !== 200) fail('deactivate: ' + r.status)
    await page.locator('#tab-files').click()
    await page.locator('#signin').waitFor({ state: 'visible', timeout: 10000 })
    out.ended = {
      who: await page.locator('#who').isVisible(), app: await page.locator('#app').isVisible(),
      message: await page.locator('#signin-error').innerText(), focus: await page.evaluate(() => document.activeElement.id),
    }
    return out
  },

  // Issue 20, item 6: ferry unreachable when the upload is opened (after
  // the first part is hashed) and again at complete: both are retried, the
  // card says so, and the upload ends done, never a red 100 %.
  async 'ui-complete-retry'({ page }) {
    await signIn(page)
    const refused = { open: 0, complete: 0 }
    await page.route((u) => u.href === cfg.url + '/uploads' || /\/uploads\/[^/]+\/complete$/.test(u.pathname), async (route) => {
      const req = route.request()
      if (req.method() !== 'POST') return route.continue()
      const kind = req.url().endsWith('/complete') ? 'complete' : 'open'
      if (refused[kind] < 2) {
        refused[kind]++
        return route.abort('connectionrefused')
      }
      return route.continue()
    })
    const notes = []
    await page.exposeFunction('sawNote', (t) => notes.push(t))
    await page.evaluate(() => new MutationObserver(() => {
      for (const n of document.querySelectorAll('#uploads .note')) if (!n.hidden) window.sawNote(n.textContent)
    }).observe(document.getElementById('uploads'), { subtree: true, childList: true, characterData: true, attributes: true }))
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = await uploadRow(page)
    await waitFinal(row, 120000)
    return { refused, notes: [...new Set(notes)], uploadId: await row.getAttribute('data-upload-id'), error: await row.locator('p.error').isVisible() }
  },

  // Issue 20, items 10 and 16: two files chosen together read as one job
  // on the overall line while both run, and it goes once they are done;
  // the same bytes uploaded again (instant) are marked as such in Files.
  async 'ui-several'({ page }) {
    await signIn(page)
    await throttle(page, 6 * MiB)
    await page.locator('#file-input').setInputFiles(cfg.files)
    const overall = page.locator('#overall')
    await until('the overall line', async () => overall.isVisible(), 30000, 50)
    const out = { overall: await overall.innerText() }
    await until('the overall line to count bytes', async () => !/: 0 B of/.test(await overall.innerText()), 60000, 100)
    out.overallLater = await overall.innerText()
    for (const f of cfg.files) await waitFinal(page.locator(`#uploads li[data-upload="${basename(f)}"]`), 120000)
    out.overallAfter = await overall.isVisible()
    await page.locator('#file-input').setInputFiles(cfg.files[0])
    await until('the instant re-upload', async () => (await page.locator(`#uploads li[data-upload="${basename(cfg.files[0])}"]`).count()) === 2, 30000, 50)
    // The new card is the first: cards are added at the top.
    await waitFinal(page.locator(`#uploads li[data-upload="${basename(cfg.files[0])}"]`).first(), 60000)
    await page.locator('#tab-files').click()
    await until('three files listed', async () => (await page.locator('#files-body tr').count()) === 3, 30000, 100)
    out.rows = await page.locator('#files-body td.name').allInnerTexts()
    // Of two loads of the list, the later is shown even when the earlier
    // is answered last: here it is held back and then answered empty.
    let held = null
    const files = (u) => new URL(u).pathname === '/files'
    await page.route(files, async (route) => {
      if (!held) held = route
      else await route.continue()
    })
    await page.locator('#files-refresh').click()
    await until('the first load to be held', async () => held, 10000, 50)
    const later = page.waitForResponse((r) => files(r.url()))
    await page.locator('#files-refresh').click()
    await later
    await page.waitForTimeout(200) // the later answer is shown
    await held.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ files: [], next: null }) })
    await page.waitForTimeout(300) // the earlier one would be shown by now
    out.rowsAfterLateAnswer = await page.locator('#files-body tr').count()
    await page.unroute(files)
    return out
  },

  // Issue 20, items 10 and 11: a file's link copied and the file deleted
  // from the list; an export of one conversation picked by its title,
  // shown by its title with a capitalised state.
  async 'ui-files-exports'({ page }) {
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: cfg.url })
    await signIn(page)
    page.on('dialog', (d) => d.accept())
    await page.locator('#tab-files').click()
    await page.locator('#files-body tr').first().waitFor()
    const out = { before: await page.locator('#files-body tr').count() }
    const first = page.locator('#files-body tr').first()
    await first.getByRole('button', { name: 'Copy link' }).click()
    out.copied = await page.evaluate(() => navigator.clipboard.readText())
    out.firstLink = await first.locator('a').getAttribute('href')
    out.deletedName = await first.locator('a').innerText()
    await first.getByRole('button', { name: 'Delete' }).click()
    await until('the row to go', async () => (await page.locator('#files-body tr').count()) === out.before - 1, 10000, 50)
    out.listed = (await api('GET', '/files')).body.files.map((f) => f.name)
    await page.locator('#tab-exports').click()
    await page.locator('#export-scope').selectOption('conv')
    out.options = await page.locator('#export-conv option').allInnerTexts()
    await page.locator('#export-conv').selectOption({ label: 'team' })
    await page.locator('#export-create').click()
    const row = page.locator('#exports-body tr').first()
    await until('the export to finish', async () => (await row.getAttribute('data-state')) === 'done', 60000, 100)
    out.export = await row.innerText()
    return out
  },

  // Issue 17, item 1: ferry's JS SDK on a host app's page of another
  // origin (localhost vs 127.0.0.1, other ports): imported from ferry, its
  // hashing worker started from a Blob URL, uploading with a token (then
  // downloading the file) and with a ticket.
  async 'sdk-cross-origin'({ page }) {
    const { hostname, port } = new URL(cfg.origin)
    const assets = []
    page.on('request', (r) => {
      if (r.url().startsWith(cfg.url + '/assets/')) assets.push({ url: r.url().slice(cfg.url.length), origin: r.headers().origin || '' })
    })
    const srv = createServer((req, res) => {
      res.setHeader('Content-Type', 'text/html; charset=utf-8')
      res.end('<!doctype html><meta charset="utf-8"><title>host app</title><input type="file" id="f">')
    })
    await new Promise((resolve) => srv.listen(Number(port), hostname === 'localhost' ? '127.0.0.1' : hostname, resolve))
    try {
      await page.goto(cfg.origin + '/')
      const out = {}
      for (const [name, cred] of [['token', { token: cfg.token }], ['ticket', { ticket: cfg.ticket }]]) {
        await page.locator('#f').setInputFiles(cfg.files[name])
        out[name] = await page.evaluate(sdkPage, { baseURL: cfg.url, ...cred })
        log('sdk', name, JSON.stringify(out[name]))
      }
      out.pageOrigin = await page.evaluate(() => location.origin)
      out.assets = assets
      return out
    } finally {
      srv.close()
    }
  },

  // Issue 14: unmodified Uppy 6 on a page of another origin that ferry
  // allows, with an upload ticket in its companionEndpoint's path, since
  // Uppy 6 sends no headers there.
  async 'uppy6-ticket'({ page }) {
    return onOrigin(page, join(here, 'uppy6-entry.js'),
      () => runUppy(page, { companionEndpoint: cfg.url + '/tickets/' + cfg.ticket }))
  },
}

// sdkPage runs in a host app's page on another origin: it imports ferry's
// SDK from ferry (a cross-origin module), uploads the chosen file with a
// bearer token or a ticket, and, with a token, downloads the file through
// ferry's proxy and hashes what came back.
async function sdkPage({ baseURL, token, ticket }) {
  const { Ferry } = await import(baseURL + '/assets/ferry.js')
  const file = document.getElementById('f').files[0]
  const ferry = new Ferry(ticket ? { baseURL, ticket } : { baseURL, token })
  const up = ferry.upload(file)
  const states = []
  up.addEventListener('state', (e) => states.push(e.detail.state))
  const res = await up.start()
  const out = { states, result: res, crc32c: up.crc32c, sha256: up.sha256, workerURL: String(ferry.hasher().url) }
  if (ticket) {
    try { await ferry.me(); out.me = 'allowed' } catch (err) { out.me = err.status + ' ' + err.code }
    return out
  }
  const f = await ferry.api('GET', '/files/' + encodeURIComponent(res.file_id))
  const resp = await fetch(f.download_url)
  const body = await resp.arrayBuffer()
  out.download = {
    status: resp.status, bytes: body.byteLength, etag: resp.headers.get('ETag'),
    sha256: Array.from(new Uint8Array(await crypto.subtle.digest('SHA-256', body)), (b) => b.toString(16).padStart(2, '0')).join(''),
  }
  // Credentials (cookies) are never allowed cross-origin: the browser
  // withholds any answer to a request that includes them.
  try {
    out.cookieMe = String((await fetch(baseURL + '/me', { credentials: 'include' })).status)
  } catch {
    out.cookieMe = 'blocked'
  }
  return out
}

// onOrigin serves a page with the bundle of entry and a file input on
// cfg.origin (a small local server), opens it and runs fn there.
async function onOrigin(page, entry, fn) {
  const js = await bundle(entry)
  const { hostname, port } = new URL(cfg.origin)
  const srv = createServer((req, res) => {
    res.setHeader('Content-Type', 'text/html; charset=utf-8')
    res.end('<!doctype html><meta charset="utf-8"><title>uppy</title><input type="file" id="f"><script>' + js.replaceAll('</script', '<\\/script') + '</script>')
  })
  await new Promise((resolve) => srv.listen(Number(port), hostname, resolve))
  try {
    await page.goto(cfg.origin + '/')
    return await fn()
  } finally {
    srv.close()
  }
}

// settle starts every leg of the benchmark from the same state, as
// bench/ starts every case: the dirty pages the last leg left are written
// back, and the memory it freed (an aborted upload's parts, a merge's)
// has time to go back to a host that reclaims free guest pages. Without
// it the first leg of a round always paid for fresh memory and the next
// one reused the pages the first had just freed: on a 2-core VM the bare
// PUTs, always first, took 1142-1411 ms and the CRC32C PUTs right after
// them 736-971 ms, which flattered the UI's ratio to the bare PUTs.
async function settle() {
  execFileSync('sync')
  await new Promise((resolve) => setTimeout(resolve, 3000))
}

// rawPuts runs in the page: it opens an upload, signs every part URL up
// front (with the parts' CRC32Cs when crcs are given, so S3 checks them),
// PUTs the parts from the file chosen in #raw (concurrency at once, with
// XMLHttpRequest as the SDK does), and returns how long the PUTs took in
// ms. The upload is then aborted. With complete (the whole file's
// CRC32C) it is completed instead and followed to success with the long
// poll, as the SDK does, and the answer is {lastPut, completed, total}:
// ms from the first PUT to the last PUT's answer, to complete's answer
// and to success.
async function rawPuts({ concurrency, partSize, crcs, complete }) {
  const file = document.getElementById('raw').files[0]
  const api = async (method, path, body) => {
    const r = await fetch(path, { method, headers: { 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) })
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`)
    return r.status === 204 ? null : r.json()
  }
  const up = await api('POST', '/uploads', { file_name: 'raw.bin', size: file.size, part_size: partSize, checksum_algorithm: crcs ? 'CRC32C' : undefined })
  if (crcs && up.checksum_algorithm !== 'CRC32C') throw new Error('the store does not check CRC32Cs')
  const nums = Array.from({ length: up.part_count }, (_, i) => i + 1)
  const { urls } = await api('POST', `/uploads/${up.upload_id}/presign`, { part_numbers: nums, checksum_crc32c: crcs })
  const etags = {}
  const put = (n) => new Promise((resolve, reject) => {
    const u = urls[n]
    const xhr = new XMLHttpRequest()
    xhr.open('PUT', u.url)
    for (const [k, v] of Object.entries(u.headers || {})) xhr.setRequestHeader(k, v)
    xhr.onload = () => {
      if (xhr.status !== 200) return reject(new Error(`part ${n}: ${xhr.status}`))
      etags[n] = xhr.getResponseHeader('ETag')
      resolve()
    }
    xhr.onerror = () => reject(new Error(`part ${n}: network error`))
    xhr.send(file.slice((n - 1) * partSize, Math.min(n * partSize, file.size)))
  })
  const t0 = performance.now()
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < nums.length) await put(nums[next++])
  }))
  const lastPut = performance.now() - t0
  if (!complete) {
    await api('DELETE', `/uploads/${up.upload_id}`)
    return lastPut
  }
  const parts = nums.map((n) => ({ part_number: n, etag: etags[n] }))
  await api('POST', `/uploads/${up.upload_id}/complete`, { parts, checksum_crc32c: complete })
  const completed = performance.now() - t0
  for (let i = 0; i < 20; i++) {
    const st = await api('GET', `/uploads/${up.upload_id}?wait=30s`)
    if (st.state === 'success') return { total: performance.now() - t0, lastPut, completed }
    if (st.state !== 'pending' && st.state !== 'merging') throw new Error('the bare upload ended ' + st.state)
  }
  throw new Error('the bare upload did not finish')
}

// benchRounds runs the benchmark's rounds on launched, or, given detached,
// in that Chromium with DevTools detached during every leg.
async function benchRounds(launched, detached) {
  let conn = detached ? await detached.connect() : { context: launched.context(), page: launched }
  if (detached) profileDir = detached.profile // cpuTimes counts that Chromium's processes
  log(detached ? 'legs run with DevTools detached' : 'legs run with DevTools attached')
  await signIn(conn.page)
  if (cfg.uplink) await throttle(conn.page, cfg.uplink * MiB)
  const rawData = readFileSync(cfg.raw)
  const crcs = {}
  for (let n = 1; (n - 1) * 8 * MiB < rawData.length; n++) crcs[n] = crc32c(rawData.subarray((n - 1) * 8 * MiB, n * 8 * MiB))
  const wholeCRC = crc32c(rawData)
  await conn.page.evaluate(() => {
    for (const id of ['raw', 'uifile']) document.body.append(Object.assign(document.createElement('input'), { type: 'file', id }))
    performance.setResourceTimingBufferSize(10000)
    // The UI's row states, with the page's clock.
    window.benchStates = []
    new MutationObserver((ms) => {
      for (const m of ms) if (m.attributeName === 'data-state') window.benchStates.push([m.target.dataset.state, performance.now()])
    }).observe(document.getElementById('uploads'), { subtree: true, attributes: true, attributeFilter: ['data-state'] })
    document.getElementById('file-input').addEventListener('change', () => { window.benchStart = performance.now() }, { capture: true })
  })
  // Evaluated as source, not called through eval: ferry's CSP forbids eval.
  await conn.page.evaluate(`window.benchLegs = { rawPuts: ${rawPuts}, ui: ${uiLeg}, skipHash: ${skipHashLeg} }`)
  let legs = 0
  // leg runs window.benchLegs[name](arg) after a settle and returns its
  // result and the CPU seconds spent meanwhile.
  const leg = async (name, arg) => {
    await settle()
    const cpu = cpuTimes()
    if (!detached) return [await conn.page.evaluate(([n, a]) => window.benchLegs[n](a), [name, arg]), cpuSince(cpu)]
    const title = `ferry-bench-leg-${++legs}`
    await conn.page.evaluate(([n, a, title]) => {
      setTimeout(async () => {
        try {
          window.benchOut = { value: await window.benchLegs[n](a) }
        } catch (err) {
          window.benchOut = { error: String((err && err.stack) || err) }
        }
        document.title = title
      }, 500)
    }, [name, arg, title])
    await conn.browser.close()
    await detached.titled(title, 240000)
    const used = cpuSince(cpu)
    conn = await detached.connect()
    const out = await conn.page.evaluate(() => window.benchOut)
    if (out.error) fail(`${name}: ${out.error}`)
    return [out.value, used]
  }
  const runs = []
  for (let i = 0; i < cfg.ui.length; i++) {
    await setFiles(conn.context, conn.page, '#raw', [cfg.raw])
    const [raw, rawCPU] = await leg('rawPuts', { concurrency: 4, partSize: 8 * MiB })
    const [rawCRC, rawCRCCPU] = await leg('rawPuts', { concurrency: 4, partSize: 8 * MiB, crcs })
    const [rawDone, rawDoneCPU] = await leg('rawPuts', { concurrency: 4, partSize: 8 * MiB, crcs, complete: wholeCRC })
    await conn.page.evaluate(() => { performance.clearResourceTimings(); window.benchStates = [] })
    await setFiles(conn.context, conn.page, '#uifile', [cfg.ui[i]])
    const [, uiCPU] = await leg('ui', basename(cfg.ui[i]))
    const ui = await conn.page.evaluate((s3) => {
      const t0 = window.benchStart
      const at = (state) => { const s = window.benchStates.find(([st]) => st === state); return s ? s[1] - t0 : null }
      const res = performance.getEntriesByType('resource')
      const puts = res.filter((r) => r.name.startsWith(s3) && r.name.includes('partNumber='))
      const api = (re) => res.filter((r) => re.test(new URL(r.name).pathname))
      const first = (list, f) => (list.length ? Math.min(...list.map(f)) - t0 : null)
      const last = (list, f) => (list.length ? Math.max(...list.map(f)) - t0 : null)
      return {
        total: at('success'), initSent: first(api(/^\/uploads$/), (r) => r.startTime), init: last(api(/^\/uploads$/), (r) => r.responseEnd), firstPresign: first(api(/\/presign$/), (r) => r.startTime), firstPresignEnd: first(api(/\/presign$/), (r) => r.responseEnd), firstPut: first(puts, (r) => r.startTime),
        declared: first(api(/\/sha256$/), (r) => r.startTime), lastPut: last(puts, (r) => r.responseEnd),
        completeSent: first(api(/\/complete$/), (r) => r.startTime), completed: last(api(/\/complete$/), (r) => r.responseEnd),
        puts: puts.length, presigns: api(/\/presign$/).length,
      }
    }, cfg.s3)
    // After the UI's stages are read: this leg's requests would mix in.
    const [skipHash, skipHashCPU] = await leg('skipHash')
    runs.push({ raw, rawCRC, rawDone, ui, skipHash, rawCPU, rawCRCCPU, rawDoneCPU, uiCPU, skipHashCPU })
    log(`run ${i + 1}: bare PUTs ${raw.toFixed(0)} ms, UI ${ui.total.toFixed(0)} ms, SDK skipHash ${skipHash.toFixed(0)} ms`, JSON.stringify({ ui, rawCPU, uiCPU }))
  }
  return { runs, detached: !!detached }
}

// uiLeg runs in the page: it hands the UI's file input the file chosen in
// #uifile, as a user choosing it would, and waits for the upload's row to
// end.
async function uiLeg(name) {
  const input = document.getElementById('file-input')
  input.files = document.getElementById('uifile').files
  input.dispatchEvent(new Event('change'))
  const deadline = performance.now() + 240000
  while (performance.now() < deadline) {
    const row = document.querySelector(`#uploads li[data-upload="${name}"]`)
    const state = row && row.dataset.state
    if (['success', 'failed', 'error', 'cancelled'].includes(state)) {
      if (state !== 'success') throw new Error(`upload ended ${state}: ${row.innerText}`)
      return state
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error('the upload did not end in 240 s')
}

// skipHashLeg runs in the page: the file in #raw through the SDK with
// skipHash, timed from start() to its success.
async function skipHashLeg() {
  const { Ferry } = await import('/assets/ferry.js')
  const t0 = performance.now()
  const res = await new Ferry().upload(document.getElementById('raw').files[0], { skipHash: true }).start()
  if (res.state !== 'success') throw new Error('skipHash upload ended ' + res.state)
  return performance.now() - t0
}

async function bundle(entry) {
  const out = await build({ entryPoints: [entry], bundle: true, format: 'iife', write: false, logLevel: 'warning' })
  return out.outputFiles[0].text
}

// uppy6Page signs in from ferry's own page and adds Uppy 6 and a file
// input to it.
async function uppy6Page(page) {
  await page.goto(cfg.url + '/')
  const r = await page.evaluate(async (token) => (await fetch('/session', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token }),
  })).status, cfg.token)
  if (r !== 200) fail('sign-in from the page answered ' + r)
  await page.evaluate(() => document.body.append(Object.assign(document.createElement('input'), { type: 'file', id: 'f' })))
  await page.addScriptTag({ content: await bundle(join(here, 'uppy6-entry.js')) })
}

// withoutWebCrypto makes page what a page on plain HTTP (another host
// than localhost) is to the SDK: crypto.subtle is hidden in it and in the
// hashing worker's script. It returns what stops the rewriting of the
// script, for once the workers have it.
async function withoutWebCrypto(page) {
  const hide = 'Object.defineProperty(self.crypto, "subtle", { value: undefined });\n'
  await page.addInitScript(hide)
  const script = (u) => new URL(u).pathname === '/assets/hash-worker.js'
  await page.route(script, async (route) => {
    const resp = await route.fetch()
    await route.fulfill({ response: resp, body: hide + await resp.text() })
  })
  return () => page.unroute(script)
}

// runUppy uploads the file from disk with Uppy, already on the page.
async function runUppy(page, options) {
  await page.locator('#f').setInputFiles(cfg.file)
  const res = await page.evaluate((opts) => window.uppyUpload(document.getElementById('f').files[0], opts), options)
  log('uppy result', JSON.stringify(res))
  if (res.failed && res.failed.length) fail('uppy failed: ' + JSON.stringify(res.failed))
  return res
}

// axe-core is injected as a script, which ferry's CSP would refuse.
const { page, close } = await launch({ bypassCSP: cfg.scenario.startsWith('uppy6') || cfg.scenario === 'ui-a11y' })
let result
try {
  const fn = scenarios[cfg.scenario] || fail('unknown scenario ' + cfg.scenario)
  result = await fn({ page })
} catch (err) {
  log('FAILED:', err.stack || err.message)
  try { await shot(page, `failure-${cfg.scenario}.png`) } catch { /* best effort */ }
  await close()
  process.exit(1)
}
await Promise.allSettled(pendingExchanges)
await close()
process.stdout.write('EXCHANGES ' + JSON.stringify(exchanges) + '\n')
process.stdout.write('RESULT ' + JSON.stringify(result) + '\n')
