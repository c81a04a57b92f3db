// Drives Debian's Chromium with playwright-core for ferry's browser tests
// (e2e/browser_test.go). One scenario per run; its configuration comes as
// JSON in FERRY_E2E, its result goes to stdout as one line "RESULT {json}",
// and everything else goes to stderr.
//
//   FERRY_E2E='{"scenario":"ui-upload","url":…,"token":…,"file":…}' node run.mjs

import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import { mkdtempSync, readFileSync, rmSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'
import { chromium } from 'playwright-core'

const here = dirname(fileURLToPath(import.meta.url))
const cfg = JSON.parse(process.env.FERRY_E2E || '{}')
const log = (...a) => console.error('[browser]', ...a)
const MiB = 1 << 20

function fail(msg) {
  throw new Error(msg)
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

async function launch({ bypassCSP = false } = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'ferry-chromium-'))
  // A fresh profile for every run (playwright passes it as --user-data-dir).
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: cfg.chromium || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1100, height: 760 },
    bypassCSP,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  const page = context.pages()[0] || await context.newPage()
  page.on('console', (m) => log('console:', m.type(), m.text()))
  page.on('pageerror', (e) => log('page error:', e.message))
  const close = async () => {
    await context.close()
    rmSync(profile, { recursive: true, force: true })
  }
  return { context, page, close }
}

function shot(page, name) {
  mkdirSync(cfg.artifacts, { recursive: true })
  const path = join(cfg.artifacts, name)
  log('screenshot', path)
  return page.screenshot({ path, fullPage: true })
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
    return {
      uploadId: await row.getAttribute('data-upload-id'), puts: puts.length, downloadURL: await link.getAttribute('href'),
      download: { name: dl.suggestedFilename(), sha256: createHash('sha256').update(readFileSync(saved)).digest('hex') },
    }
  },

  // Done-when 2: the page is reloaded mid-upload and the same file chosen
  // again; only the parts S3 lacks (or holds damaged) are sent.
  async 'ui-resume'({ page }) {
    await signIn(page)
    const data = readFileSync(cfg.file)
    const sha = createHash('sha256').update(data).digest('hex')
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
    let found = await api('GET', `/uploads?sha256=${sha}&size=${data.length}`)
    if (found.status !== 200) fail(`the upload is not resumable after the reload: ${found.status} ${JSON.stringify(found.body)}`)
    // A part S3 holds with other bytes (what a PUT cut off mid-way can
    // leave on some stores): the last part, right size, wrong content.
    let up = found.body
    const damaged = up.part_count
    const signed = await api('POST', `/uploads/${up.upload_id}/presign`, { part_numbers: [damaged] })
    const bad = await fetch(signed.body.urls[damaged].url, { method: 'PUT', body: Buffer.alloc(data.length - (damaged - 1) * up.part_size, 7) })
    if (bad.status !== 200) fail('PUT of the damaged part: ' + bad.status)
    found = await api('GET', `/uploads?sha256=${sha}&size=${data.length}`)
    up = found.body
    const intact = []
    for (const p of up.parts) {
      const part = data.subarray((p.part_number - 1) * up.part_size, Math.min(p.part_number * up.part_size, data.length))
      if (p.size === part.length && p.etag.replaceAll('"', '') === createHash('md5').update(part).digest('hex')) intact.push(p.part_number)
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
    // The proof: nothing is PUT, the file exists at once.
    await page.locator('#file-input').setInputFiles(cfg.known)
    const known = await uploadRow(page)
    await waitFinal(known, 60000)
    const instant = { instant: await known.getAttribute('data-instant'), puts: puts.length, uploadId: await known.getAttribute('data-upload-id') }

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
    await throttle(page, 8 * MiB)
    await page.locator('#file-input').setInputFiles(cfg.file)
    const row = page.locator('#uploads li').first()
    await until('the second upload to start', async () => (await row.getAttribute('data-upload-id')) !== instant.uploadId &&
      (await row.getAttribute('data-state')) === 'uploading' && Number(await row.getAttribute('data-parts')) >= 1, 120000, 20)
    await row.getByRole('button', { name: 'Pause' }).click()
    await until('the pause', async () => (await row.getAttribute('data-state')) === 'paused', 5000, 20)
    const atPause = puts.length
    await page.waitForTimeout(2000)
    const duringPause = puts.length - atPause
    await shot(page, 'ui-paused.png')
    await row.getByRole('button', { name: 'Resume' }).focus()
    await page.keyboard.press('Enter')
    await waitFinal(row, 240000)
    return {
      instant, duringPause, attempts, presigns, uploadId: await row.getAttribute('data-upload-id'),
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
    await page.goto(cfg.url + '/')
    const r = await page.evaluate(async (token) => (await fetch('/session', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token }),
    })).status, cfg.token)
    if (r !== 200) fail('sign-in from the page answered ' + r)
    await page.evaluate(() => document.body.append(Object.assign(document.createElement('input'), { type: 'file', id: 'f' })))
    await page.addScriptTag({ content: await bundle(join(here, 'uppy6-entry.js')) })
    return runUppy(page, { companionEndpoint: cfg.url })
  },

  // Done-when 5: @uppy/aws-s3 5.1.0 in endpoint mode with an
  // Authorization header, from a page of another origin that ferry allows
  // (served here by a small local server).
  async uppy5({ page }) {
    const js = await bundle(join(here, 'uppy5', 'uppy5-entry.js'))
    const { hostname, port } = new URL(cfg.origin)
    const srv = createServer((req, res) => {
      res.setHeader('Content-Type', 'text/html; charset=utf-8')
      res.end('<!doctype html><meta charset="utf-8"><title>uppy 5</title><input type="file" id="f"><script>' + js.replaceAll('</script', '<\\/script') + '</script>')
    })
    await new Promise((resolve) => srv.listen(Number(port), hostname, resolve))
    try {
      await page.goto(cfg.origin + '/')
      return await runUppy(page, { endpoint: cfg.url, headers: { authorization: 'Bearer ' + cfg.token } })
    } finally {
      srv.close()
    }
  },
}

async function bundle(entry) {
  const out = await build({ entryPoints: [entry], bundle: true, format: 'iife', write: false, logLevel: 'warning' })
  return out.outputFiles[0].text
}

// runUppy uploads the file from disk with Uppy, already on the page.
async function runUppy(page, options) {
  await page.locator('#f').setInputFiles(cfg.file)
  const res = await page.evaluate((opts) => window.uppyUpload(document.getElementById('f').files[0], opts), options)
  log('uppy result', JSON.stringify(res))
  if (res.failed && res.failed.length) fail('uppy failed: ' + JSON.stringify(res.failed))
  return res
}

const { page, close } = await launch({ bypassCSP: cfg.scenario === 'uppy6' })
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
await close()
process.stdout.write('RESULT ' + JSON.stringify(result) + '\n')
