// ferry's web UI: sign in with a token, upload by drag and drop with
// progress, pause and resume, list files, create and follow exports.
// Plain DOM; every action is a button or form control, so it all works
// from the keyboard.

import { Ferry } from './ferry.js'

const ferry = new Ferry({ workerURL: new URL('./hash-worker.js', import.meta.url) })
const $ = (id) => document.getElementById(id)

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag)
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v)
    else e.setAttribute(k, v)
  }
  for (const c of children) e.append(c)
  return e
}

function bytes(n) {
  if (n < 1024) return n + ' B'
  const units = ['KiB', 'MiB', 'GiB', 'TiB']
  let i = -1
  do { n /= 1024; i++ } while (n >= 1024 && i < units.length - 1)
  return n.toFixed(n < 10 ? 1 : 0) + ' ' + units[i]
}

function duration(s) {
  if (s == null || !isFinite(s)) return '—'
  s = Math.ceil(s)
  if (s < 60) return s + ' s'
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s'
  return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min'
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : ''
}

function show(node, text) {
  node.textContent = text || ''
  node.hidden = !text
}

// ---- session ----------------------------------------------------------

async function boot() {
  try {
    const me = await ferry.me()
    $('who-name').textContent = 'Signed in as ' + me.name
    $('who').hidden = false
    $('signin').hidden = true
    $('app').hidden = false
    loadExports()
  } catch (err) {
    if (err.status !== 401) show($('banner'), 'Cannot reach ferry: ' + err.message)
    $('who').hidden = true
    $('app').hidden = true
    $('signin').hidden = false
    $('token').focus()
  }
}

$('signin-form').addEventListener('submit', async (ev) => {
  ev.preventDefault()
  show($('signin-error'))
  try {
    await ferry.signIn($('token').value.trim())
    $('token').value = ''
    await boot()
  } catch (err) {
    show($('signin-error'), err.status === 401 ? 'That token is not valid, or the account is deactivated.' : err.message)
  }
})

$('sign-out').addEventListener('click', async () => {
  try { await ferry.signOut() } catch { /* the cookie is cleared either way */ }
  location.reload()
})

// ---- tabs -------------------------------------------------------------

const tabs = ['upload', 'files', 'exports']
function select(name) {
  for (const t of tabs) {
    const tab = $('tab-' + t)
    tab.setAttribute('aria-selected', String(t === name))
    tab.tabIndex = t === name ? 0 : -1
    $(t).hidden = t !== name
  }
  if (name === 'files') loadFiles()
}
tabs.forEach((t, i) => {
  const tab = $('tab-' + t)
  tab.addEventListener('click', () => select(t))
  tab.addEventListener('keydown', (ev) => {
    const d = ev.key === 'ArrowRight' ? 1 : ev.key === 'ArrowLeft' ? -1 : 0
    if (!d) return
    const next = tabs[(i + d + tabs.length) % tabs.length]
    select(next)
    $('tab-' + next).focus()
  })
})

// ---- uploads ----------------------------------------------------------

const drop = $('drop')
const input = $('file-input')
drop.addEventListener('click', () => input.click())
drop.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); input.click() }
})
drop.addEventListener('dragover', (ev) => { ev.preventDefault(); drop.classList.add('over') })
drop.addEventListener('dragleave', () => drop.classList.remove('over'))
drop.addEventListener('drop', (ev) => {
  ev.preventDefault()
  drop.classList.remove('over')
  for (const f of ev.dataTransfer.files) startUpload(f)
})
input.addEventListener('change', () => {
  for (const f of input.files) startUpload(f)
  input.value = ''
})

const stateText = {
  hashing: 'Checking', uploading: 'Uploading', paused: 'Paused', completing: 'Completing',
  merging: 'Verifying', success: 'Done', failed: 'Failed', cancelled: 'Cancelled', error: 'Error',
}

function startUpload(file) {
  const up = ferry.upload(file)
  const state = el('span', { class: 'state' }, 'Waiting')
  const bar = el('div')
  const meter = el('div', { class: 'meter', role: 'progressbar', 'aria-label': 'Progress of ' + file.name, 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': '0' }, bar)
  const done = el('span', {}, '0 B of ' + bytes(file.size))
  const speed = el('span', {})
  const pause = el('button', { type: 'button', class: 'secondary' }, 'Pause')
  const cancel = el('button', { type: 'button', class: 'secondary' }, 'Cancel')
  const error = el('p', { class: 'error', role: 'alert', hidden: '' })
  const item = el('li', { 'data-upload': file.name },
    el('div', { class: 'head' }, el('span', { class: 'name' }, file.name), state),
    meter, el('div', { class: 'stats' }, done, speed),
    el('div', { class: 'actions' }, pause, cancel), error)
  $('uploads').prepend(item)

  pause.addEventListener('click', () => (up.state === 'paused' ? up.resume() : up.pause()))
  cancel.addEventListener('click', () => up.cancel())
  up.addEventListener('state', ({ detail: { state: s } }) => {
    state.textContent = stateText[s] || s
    state.className = 'state ' + s
    meter.className = 'meter ' + s
    item.dataset.state = s
    if (up.uploadId) item.dataset.uploadId = up.uploadId
    pause.textContent = s === 'paused' ? 'Resume' : 'Pause'
    pause.hidden = !(s === 'uploading' || s === 'paused')
    cancel.hidden = !['hashing', 'uploading', 'paused'].includes(s)
    if (s === 'paused') speed.textContent = 'paused: parts in flight are sent again on resume'
    if (s === 'merging') speed.textContent = 'verifying the whole file…'
    if (s === 'success') {
      item.dataset.instant = up.result.instant ? 'true' : 'false'
      speed.textContent = up.result.instant ? 'already stored: no bytes sent' : 'verified'
      if (!$('files').hidden) loadFiles()
    }
    if (s === 'cancelled') speed.textContent = ''
  })
  up.addEventListener('progress', ({ detail: p }) => {
    const pct = p.bytesTotal ? (100 * p.bytesDone) / p.bytesTotal : 100
    bar.style.width = pct.toFixed(1) + '%'
    meter.setAttribute('aria-valuenow', pct.toFixed(0))
    item.dataset.bytes = p.bytesDone
    if (p.phase === 'hashing') {
      done.textContent = 'Checking ' + bytes(p.bytesDone) + ' of ' + bytes(p.bytesTotal)
      speed.textContent = ''
    } else {
      done.textContent = bytes(p.bytesDone) + ' of ' + bytes(p.bytesTotal) + ' (' + pct.toFixed(0) + '%)'
      if (up.state === 'uploading') speed.textContent = bytes(p.rate) + '/s · ' + duration(p.eta) + ' left'
    }
  })
  up.addEventListener('part', () => { item.dataset.parts = up.etags.size })
  up.start().then((res) => {
    if (res && res.state === 'failed') show(error, 'Verification failed: ' + (res.error || 'unknown reason'))
  }, (err) => show(error, describe(err)))
}

function describe(err) {
  if (err.status === 401) return 'Your session ended; sign in again.'
  if (err.code === 'size_too_large') return err.message
  if (err.status === 0 && err.retryable) return 'Network error: ' + err.message + '. Choose the file again to resume.'
  return err.message + (err.code ? ' (' + err.code + ')' : '')
}

// ---- files ------------------------------------------------------------

async function loadFiles() {
  show($('files-error'))
  try {
    const { files } = await ferry.listFiles()
    $('files-body').replaceChildren(...files.map((f) => el('tr', {},
      el('td', {}, f.name), el('td', {}, bytes(f.size)), el('td', {}, when(f.created_at)),
      el('td', { class: 'mono', title: f.sha256 }, f.sha256.slice(0, 12) + '…'),
      el('td', {}, el('a', { href: f.download_url, download: f.name }, 'Download')))))
    $('files-empty').hidden = files.length > 0
  } catch (err) {
    show($('files-error'), 'Could not list files: ' + describe(err))
  }
}
$('files-refresh').addEventListener('click', loadFiles)

// ---- exports ----------------------------------------------------------

// One idempotency key per intent: clicks on the same form within a few
// seconds of each other (a double click, an impatient second click) send
// the same key, so ferry makes one job. Changing the form, or a pause
// after the answer, starts a new intent.
let exportKey = null
let keyTimer = null
function intentKey() {
  if (!exportKey) exportKey = crypto.randomUUID()
  clearTimeout(keyTimer)
  return exportKey
}
function endIntent(afterMs) {
  clearTimeout(keyTimer)
  keyTimer = setTimeout(() => { exportKey = null }, afterMs)
}

const rows = new Map()

$('export-scope').addEventListener('change', () => {
  $('export-conv').hidden = $('export-scope').value !== 'conv'
  exportKey = null
})
$('export-conv').addEventListener('input', () => { exportKey = null })

$('export-form').addEventListener('submit', async (ev) => {
  ev.preventDefault()
  show($('export-error'))
  let scope = 'all'
  if ($('export-scope').value === 'conv') {
    const id = $('export-conv').value.trim()
    if (!id) return show($('export-error'), 'Enter the conversation id to export.')
    scope = 'conv:' + id
  }
  const key = intentKey()
  $('export-create').textContent = 'Creating…'
  try {
    const job = await ferry.createExport(scope, key)
    watchExport({ job_id: job.job_id, state: job.state, scope })
    endIntent(3000)
  } catch (err) {
    show($('export-error'), 'Could not create the export: ' + describe(err))
    endIntent(0)
  } finally {
    $('export-create').textContent = 'Create export'
  }
})

async function loadExports() {
  try {
    const { exports } = await ferry.api('GET', '/exports')
    for (const job of exports.reverse()) watchExport(job)
  } catch (err) {
    show($('export-error'), 'Could not list exports: ' + describe(err))
  }
}

// download fetches a fresh signed link (they live minutes) and follows it.
async function download(id) {
  show($('export-error'))
  try {
    const job = await ferry.getExport(id)
    if (!job.download_url) throw new Error('the export is ' + job.state)
    location.assign(job.download_url)
  } catch (err) {
    show($('export-error'), 'Could not download the export: ' + describe(err))
  }
}

function exportRow(id) {
  let r = rows.get(id)
  if (!r) {
    r = { state: el('span', { class: 'state' }, '…'), scope: el('td'), created: el('td'), link: el('td', { class: 'nowrap' }) }
    r.tr = el('tr', { 'data-export': id }, el('td', { class: 'mono' }, id), r.scope, r.created, el('td', {}, r.state), r.link)
    rows.set(id, r)
    $('exports-body').prepend(r.tr)
    $('exports-empty').hidden = true
  }
  return r
}

function renderExport(r, job) {
  r.tr.dataset.state = job.state
  r.state.textContent = job.state
  r.state.className = 'state ' + (job.state === 'done' ? 'success' : job.state)
  r.scope.textContent = job.scope === 'all' ? 'All conversations' : job.scope
  r.created.textContent = when(job.created_at)
  if (job.state === 'done') {
    const info = [job.messages != null ? job.messages + ' messages' : '', job.bytes ? bytes(job.bytes) : ''].filter(Boolean).join(' · ')
    r.link.replaceChildren(el('button', { type: 'button', class: 'secondary', onclick: () => download(job.job_id) }, 'Download'), ' ' + info)
  } else {
    r.link.textContent = job.error || ''
  }
}

// watchExport shows a job and follows it until it is done or failed.
async function watchExport(job) {
  const r = exportRow(job.job_id)
  renderExport(r, job)
  if (r.watching) return
  r.watching = true
  for (let i = 0; job.state === 'queued' || job.state === 'running' || job.created_at === undefined; i++) {
    await new Promise((res) => setTimeout(res, i === 0 ? 200 : Math.min(1000 + i * 250, 5000)))
    try {
      job = await ferry.getExport(job.job_id)
    } catch (err) {
      if (err.status === 404) { r.tr.remove(); rows.delete(job.job_id); return }
      r.link.textContent = describe(err)
      continue
    }
    renderExport(r, job)
  }
  r.watching = false
}

boot()
