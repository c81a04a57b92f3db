// ferry's web UI: sign in with a token, upload by drag and drop with
// progress, pause and resume, list files, create and follow exports.
// Plain DOM; every action is a button or form control, so it all works
// from the keyboard.
//
// What a user must never lose, or be left guessing about:
//   - a file dropped anywhere in the window uploads (the browser would
//     otherwise open it and leave ferry);
//   - leaving the page or signing out while uploads run asks first;
//   - a lost connection says so and counts down to the next try, and an
//     upload that gave up keeps its card with Retry (in place: the page
//     still holds the File, and only the parts S3 lacks are sent) and
//     Dismiss;
//   - screen readers hear state changes only, from one status region,
//     never every progress tick; the progress bars carry their value.

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
  for (const c of children) if (c != null) e.append(c)
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

// announce says text once through the status region (role=status), the
// only live region: the upload list itself is not live, so progress is
// never read out, only what changed.
function announce(text) {
  $('status').textContent = text
}

// ---- session ----------------------------------------------------------

let signedIn = false

async function boot() {
  try {
    me = await ferry.me()
    $('who-name').textContent = 'Signed in as ' + me.name
    $('who').hidden = false
    $('signin').hidden = true
    $('app').hidden = false
    signedIn = true
    // The hashing workers start now, while the user picks a file, not
    // with the first upload; one that cannot start fails that upload.
    ferry.warm().catch(() => {})
    loadExports()
    loadConversations()
    showRemembered()
    return true
  } catch (err) {
    if (err.status !== 401) show($('banner'), 'Cannot reach ferry: ' + err.message)
    signedOutView()
    return false
  }
}

function signedOutView(message) {
  signedIn = false
  $('who').hidden = true
  $('app').hidden = true
  $('signin').hidden = false
  show($('signin-error'), message)
  $('token').focus()
}

// sessionEnded is where any 401 from ferry leads: the header must not go
// on saying who is signed in, and the sign-in form comes back.
function sessionEnded() {
  if (!signedIn) return
  signedOutView('Your session ended; sign in again to continue.')
}

$('signin-form').addEventListener('submit', async (ev) => {
  ev.preventDefault()
  show($('signin-error'))
  show($('banner'))
  $('token').removeAttribute('aria-invalid')
  try {
    await ferry.signIn($('token').value.trim())
    $('token').value = ''
    if (await boot()) $('tab-upload').focus()
  } catch (err) {
    show($('signin-error'), err.status === 401 ? 'That token is not valid, or the account is deactivated.' : err.message)
    $('token').setAttribute('aria-invalid', 'true')
    $('token').focus()
  }
})

let leaving = false

$('sign-out').addEventListener('click', async () => {
  const n = running().length
  if (n && !confirm(`${n === 1 ? 'An upload is' : n + ' uploads are'} still running. Signing out stops ${n === 1 ? 'it' : 'them'} ` +
    '(choose the same file again later to resume). Sign out anyway?')) return
  leaving = true
  try { await ferry.signOut() } catch { /* the cookie is cleared either way */ }
  location.reload()
})

// Reloading or closing the tab mid-upload loses the upload's place in
// the page: the browser asks first.
window.addEventListener('beforeunload', (ev) => {
  if (leaving || !running().length) return
  ev.preventDefault()
  ev.returnValue = ''
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
    const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[ev.key]
    if (to === undefined) return
    ev.preventDefault()
    const next = tabs[(to + tabs.length) % tabs.length]
    select(next)
    $('tab-' + next).focus()
  })
})

// ---- remembered uploads -------------------------------------------------

// memory keeps the unfinished uploads of this browser in IndexedDB: the
// file's name, size and last-modified time, the upload id and the user
// (never the bytes), so that after a reload the page can say what is
// waiting to be resumed. Storage may be refused (private windows); the
// UI then just remembers nothing.
const memory = (() => {
  let db = null
  const open = () => db || (db = new Promise((resolve, reject) => {
    const req = indexedDB.open('ferry-ui', 1)
    req.onupgradeneeded = () => req.result.createObjectStore('uploads', { keyPath: 'uploadId' })
    req.onsuccess = () => resolve(req.result)
    req.onerror = () => reject(req.error)
  }))
  const run = async (mode, fn) => {
    const d = await open()
    return new Promise((resolve, reject) => {
      const tx = d.transaction('uploads', mode)
      const req = fn(tx.objectStore('uploads'))
      tx.oncomplete = () => resolve(req && req.result)
      tx.onerror = () => reject(tx.error)
    })
  }
  return {
    put: (rec) => run('readwrite', (st) => st.put(rec)).catch(() => {}),
    del: (id) => run('readwrite', (st) => st.delete(id)).catch(() => {}),
    all: () => run('readonly', (st) => st.getAll()).catch(() => []),
  }
})()

let me = null

// showRemembered lists this user's unfinished uploads that ferry still
// holds open, each with what S3 already has, asking for the file again
// (the page cannot reopen a file by itself).
async function showRemembered() {
  for (const rec of await memory.all()) {
    if (rec.user !== me.id || document.querySelector(`[data-remembered="${rec.uploadId}"]`)) continue
    let st
    try {
      st = await ferry.api('GET', '/uploads/' + encodeURIComponent(rec.uploadId))
    } catch (err) {
      if (err.status === 404) memory.del(rec.uploadId)
      continue
    }
    if (st.state !== 'uploading') { memory.del(rec.uploadId); continue }
    const have = (st.parts || []).reduce((n, p) => n + p.size, 0)
    const li = el('li', { class: 'remembered', 'data-remembered': rec.uploadId, 'data-name': rec.name, 'data-size': String(rec.size) },
      el('p', {}, el('strong', {}, 'Resume ' + rec.name), ' — ' + bytes(have) + ' of ' + bytes(rec.size) + ' already uploaded; choose the file to continue.'),
      el('div', { class: 'actions' },
        el('button', { type: 'button', 'aria-label': 'Choose ' + rec.name + ' to resume it', onclick: () => input.click() }, 'Choose file'),
        el('button', { type: 'button', class: 'secondary', 'aria-label': 'Forget ' + rec.name, onclick: () => forget(li, rec.uploadId) }, 'Forget')))
    $('uploads').append(li)
  }
}

async function forget(li, id) {
  li.remove()
  memory.del(id)
  try { await ferry.api('DELETE', '/uploads/' + encodeURIComponent(id)) } catch { /* gone already */ }
  $('choose').focus()
}

// remembered drops the note for a file that was chosen again.
function resumedNote(file) {
  for (const li of document.querySelectorAll('#uploads li.remembered')) {
    if (li.dataset.name === file.name && Number(li.dataset.size) === file.size) li.remove()
  }
}

// ---- uploads ----------------------------------------------------------

const drop = $('drop')
const input = $('file-input')
drop.addEventListener('click', () => input.click())
drop.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); input.click() }
})
$('choose').addEventListener('click', (ev) => { ev.stopPropagation(); input.click() })
input.addEventListener('change', () => {
  for (const f of input.files) new Card(f)
  input.value = ''
})

// Drops are caught on the whole window: a file let go just outside the
// drop zone would otherwise be opened by the browser, leaving ferry.
const hasFiles = (ev) => ev.dataTransfer && [...ev.dataTransfer.types].includes('Files')
window.addEventListener('dragover', (ev) => {
  if (!hasFiles(ev)) return
  ev.preventDefault()
  ev.dataTransfer.dropEffect = signedIn ? 'copy' : 'none'
  if (signedIn) drop.classList.add('over')
})
window.addEventListener('dragleave', (ev) => { if (!ev.relatedTarget) drop.classList.remove('over') })
window.addEventListener('drop', (ev) => {
  if (!hasFiles(ev)) return
  ev.preventDefault()
  drop.classList.remove('over')
  if (!signedIn) return
  if ($('upload').hidden) select('upload')
  for (const f of ev.dataTransfer.files) new Card(f)
})

const stateText = {
  hashing: 'Checking', uploading: 'Uploading', paused: 'Paused', completing: 'Completing',
  merging: 'Verifying', success: 'Done', failed: 'Failed', cancelled: 'Cancelled', error: 'Stopped',
}

// The states in which leaving the page would lose the upload's progress
// in the page (merging runs on the server).
const active = new Set(['idle', 'hashing', 'uploading', 'paused', 'completing'])
const cards = new Set()
const running = () => [...cards].filter((c) => active.has(c.up.state))

// overall sums the uploads still running, so several files read as one
// job: "Uploading 3 files: 45 MiB of 120 MiB".
let overallQueued = false
function overall() {
  if (overallQueued) return
  overallQueued = true
  requestAnimationFrame(() => {
    overallQueued = false
    const now = running()
    if (now.length < 2) return show($('overall'))
    const total = now.reduce((n, c) => n + c.file.size, 0)
    const done = now.reduce((n, c) => n + (c.sent || 0), 0)
    show($('overall'), 'Uploading ' + now.length + ' files: ' + bytes(done) + ' of ' + bytes(total))
  })
}

// Card is one file's upload on the page. It outlives its Upload: Retry
// starts a new one for the same File in the same card, which finds the
// unfinished upload on ferry and sends only the parts S3 lacks.
class Card {
  constructor(file) {
    this.file = file
    const name = file.name
    this.stateEl = el('span', { class: 'state' }, 'Waiting')
    this.bar = el('div')
    this.meter = el('div', {
      class: 'meter', role: 'progressbar', 'aria-label': 'Progress of ' + name,
      'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': '0', 'aria-valuetext': '0%',
    }, this.bar)
    this.done = el('span', {}, '0 B of ' + bytes(file.size))
    this.speed = el('span', {})
    this.note = el('p', { class: 'note', hidden: '' })
    const button = (text, label, onclick, cls = 'secondary') =>
      el('button', { type: 'button', class: cls, 'aria-label': text + ' ' + name, onclick }, text)
    this.pause = button('Pause', 'Pause', () => (this.up.state === 'paused' ? this.up.resume() : this.up.pause()))
    this.cancel = button('Cancel', 'Cancel', () => this.askCancel())
    this.retry = button('Retry', 'Retry', () => this.start(), '')
    this.dismiss = button('Dismiss', 'Dismiss', () => this.remove())
    this.confirmStop = button('Stop upload', 'Stop upload', () => { this.closeConfirm(); this.up.cancel() }, 'danger')
    this.keep = button('Keep uploading', 'Keep uploading', () => { this.closeConfirm(); this.cancel.focus() })
    this.confirm = el('div', { class: 'confirm', role: 'group', 'aria-label': 'Stop uploading ' + name + '?', hidden: '' },
      el('span', {}, 'Stop uploading this file?'), this.confirmStop, this.keep)
    this.error = el('p', { class: 'error', hidden: '' })
    this.item = el('li', { 'data-upload': name },
      el('div', { class: 'head' }, el('span', { class: 'name' }, name), this.stateEl),
      this.meter, el('div', { class: 'stats' }, this.done, this.speed), this.note,
      el('div', { class: 'actions' }, this.pause, this.cancel, this.retry, this.dismiss), this.confirm, this.error)
    resumedNote(file)
    $('uploads').prepend(this.item)
    cards.add(this)
    const refused = refusal(file)
    if (refused) {
      // Said before a byte is read: a file ferry would refuse is not
      // hashed first.
      this.up = { state: 'refused', uploadId: null }
      this.item.dataset.state = 'refused'
      this.stateEl.textContent = 'Not uploaded'
      this.stateEl.className = 'state error'
      this.meter.hidden = true
      this.done.textContent = bytes(file.size)
      for (const b of [this.pause, this.cancel, this.retry]) b.hidden = true
      show(this.error, refused)
      this.say(refused)
      return
    }
    this.start()
  }

  start() {
    this.clearCountdown()
    if (this.link) { this.link.remove(); this.link = null }
    show(this.error)
    show(this.note)
    this.closeConfirm()
    this.announced = ''
    const up = (this.up = ferry.upload(this.file))
    up.addEventListener('state', ({ detail: { state } }) => up === this.up && this.onState(state))
    up.addEventListener('progress', ({ detail }) => up === this.up && this.onProgress(detail))
    up.addEventListener('part', () => { if (up === this.up) this.item.dataset.parts = up.etags.size })
    up.addEventListener('retry', ({ detail }) => up === this.up && this.onRetry(detail))
    up.addEventListener('recovered', () => up === this.up && this.onRecovered())
    this.onState('idle')
    up.start().then((res) => {
      if (up !== this.up) return
      if (res && res.state === 'failed') this.stopped('Verification failed: ' + (res.error || 'unknown reason'))
    }, (err) => {
      if (up !== this.up) return
      if (err.status === 401) sessionEnded()
      this.stopped(err.code === 'connection_lost' ? 'Upload stopped: connection lost.' : 'Upload stopped: ' + describe(err))
    })
  }

  // remember keeps an unfinished upload in IndexedDB while it runs (and
  // after it stopped: Retry or a reload resumes it), and forgets it once
  // it is done or cancelled.
  remember(s) {
    const id = this.up.uploadId
    if (!id || !me) return
    if (['success', 'failed', 'cancelled'].includes(s)) {
      memory.del(id)
    } else if (this.remembered !== id) {
      this.remembered = id
      memory.put({ uploadId: id, user: me.id, name: this.file.name, size: this.file.size, lastModified: this.file.lastModified, savedAt: Date.now() })
    }
  }

  say(text) {
    if (text === this.announced) return
    this.announced = text
    announce(text)
  }

  onState(s) {
    const up = this.up
    const name = this.file.name
    this.stateEl.textContent = stateText[s] || 'Waiting'
    this.stateEl.className = 'state ' + s
    this.meter.className = 'meter ' + s
    this.item.dataset.state = s
    if (up.uploadId) this.item.dataset.uploadId = up.uploadId
    this.remember(s)
    overall()
    this.pause.textContent = s === 'paused' ? 'Resume' : 'Pause'
    this.pause.setAttribute('aria-label', this.pause.textContent + ' ' + name)
    this.pause.hidden = !(s === 'uploading' || s === 'paused')
    this.cancel.hidden = !['idle', 'hashing', 'uploading', 'paused'].includes(s)
    const ended = ['failed', 'cancelled', 'error'].includes(s)
    this.retry.hidden = !ended
    this.dismiss.hidden = !(ended || s === 'success')
    if (this.cancel.hidden) this.closeConfirm()
    if (s !== 'uploading') this.clearCountdown()
    if (s === 'paused') {
      const inflight = this.inflightBytes || 0
      this.speed.textContent = inflight ? 'paused: ' + bytes(inflight) + ' in flight will be sent again' : 'paused'
    }
    if (s === 'merging') this.speed.textContent = 'checking the whole file…'
    if (s === 'success') {
      this.item.dataset.instant = up.result.instant ? 'true' : 'false'
      this.speed.textContent = up.result.instant ? 'already stored: no bytes sent' : 'stored, checked by S3'
      if (!$('files').hidden) loadFiles()
      this.linkTo(up.result.file_id)
    }
    if (s === 'cancelled') {
      this.speed.textContent = ''
      show(this.error, 'Upload cancelled.')
    }
    const said = {
      hashing: 'Checking ' + name, uploading: 'Uploading ' + name, paused: name + ' paused',
      completing: 'Verifying ' + name, merging: 'Verifying ' + name, success: name + ' uploaded',
      cancelled: 'Upload of ' + name + ' cancelled',
    }[s]
    if (said) this.say(said)
  }

  onProgress(p) {
    const pct = p.bytesTotal ? (100 * p.bytesDone) / p.bytesTotal : 100
    this.item.dataset.bytes = p.bytesDone
    // The bar shows what reached S3; the read before the first request is
    // told in words, so the bar never runs ahead and back.
    const shown = p.phase === 'hashing' ? 0 : pct
    this.sent = p.phase === 'hashing' ? 0 : p.bytesDone
    overall()
    this.bar.style.transform = 'scaleX(' + (shown / 100).toFixed(3) + ')'
    this.meter.setAttribute('aria-valuenow', shown.toFixed(0))
    this.inflightBytes = p.phase === 'uploading' ? Math.max(0, p.bytesDone - this.up.bytesDone) : 0
    if (p.phase === 'hashing') {
      this.meter.setAttribute('aria-valuetext', 'checking, ' + pct.toFixed(0) + '%')
      this.done.textContent = 'Checking ' + bytes(p.bytesDone) + ' of ' + bytes(p.bytesTotal)
      this.speed.textContent = ''
    } else {
      this.meter.setAttribute('aria-valuetext', pct.toFixed(0) + '%, ' + bytes(p.bytesDone) + ' of ' + bytes(p.bytesTotal))
      this.done.textContent = bytes(p.bytesDone) + ' of ' + bytes(p.bytesTotal) + ' (' + pct.toFixed(0) + '%)'
      if (this.up.state === 'uploading' && !this.countdown) {
        this.speed.textContent = p.rate > 0 ? bytes(p.rate) + '/s · ' + duration(p.eta) + ' left' : 'Starting…'
      }
    }
  }

  // linkTo gives a done card the file's download link, so it is not a
  // dead end.
  async linkTo(fileID) {
    if (!fileID || this.link) return
    try {
      const f = await ferry.api('GET', '/files/' + encodeURIComponent(fileID))
      this.link = el('a', { href: f.download_url, download: f.name, class: 'download', 'aria-label': 'Download ' + f.name }, 'Download')
      this.dismiss.before(this.link)
    } catch { /* the Files tab has it */ }
  }

  // onRetry counts down to the SDK's next try: a lost connection says so,
  // instead of a rate of 0 B/s.
  onRetry({ reason, delay }) {
    const until = Date.now() + delay
    const lost = reason === 'connection'
    this.item.dataset.connection = lost ? 'lost' : 'busy'
    const tick = () => {
      const n = Math.max(1, Math.ceil((until - Date.now()) / 1000))
      show(this.note, (lost ? 'Connection lost — retrying in ' : 'ferry or the storage is not answering — retrying in ') + n + ' s')
      this.speed.textContent = ''
    }
    this.clearCountdown()
    tick()
    this.countdown = setInterval(tick, 1000)
    this.say(lost ? 'Connection lost; ' + this.file.name + ' will retry' : this.file.name + ': the server is not answering; retrying')
  }

  onRecovered() {
    this.clearCountdown()
    show(this.note)
    delete this.item.dataset.connection
    this.say('Uploading ' + this.file.name)
  }

  clearCountdown() {
    if (this.countdown) clearInterval(this.countdown)
    this.countdown = null
  }

  stopped(message) {
    this.clearCountdown()
    show(this.note)
    show(this.error, message)
    this.say(this.file.name + ': ' + message)
  }

  // askCancel asks once, in the card, before throwing an upload away.
  askCancel() {
    this.confirm.hidden = false
    this.item.dataset.confirm = 'cancel'
    this.confirmStop.focus()
  }

  closeConfirm() {
    this.confirm.hidden = true
    delete this.item.dataset.confirm
  }

  // remove dismisses the card; focus goes to the next card's first button,
  // or the Choose files button, never to the page's body.
  remove() {
    this.clearCountdown()
    if (this.up.uploadId) memory.del(this.up.uploadId)
    const next = this.item.nextElementSibling || this.item.previousElementSibling
    this.item.remove()
    cards.delete(this)
    const target = next && [...next.querySelectorAll('button')].find((b) => !b.hidden)
    ;(target || $('choose')).focus()
  }
}

// refusal says why ferry would refuse file, from what GET /me told of
// its limits, or ''. Empty files are refused: ferry stores content in S3
// multipart uploads, which need at least one byte.
function refusal(file) {
  const limit = me && me.quota && me.quota.max_file_size
  if (file.size === 0) return file.name + ' is empty; ferry does not store empty files.'
  if (limit && file.size > limit) return file.name + ' is ' + bytes(file.size) + '; the largest file ferry accepts is ' + bytes(limit) + '.'
  return ''
}

function describe(err) {
  if (err.code === 'size_too_large' && err.problem && err.problem.max_size) return 'the largest file accepted here is ' + bytes(err.problem.max_size) + '.'
  if (err.status === 401) return 'your session ended; sign in again.'
  if (err.code === 'connection_lost') return 'connection lost.'
  if (err.status === 0 && err.retryable) return 'ferry cannot be reached (' + err.message + ').'
  return err.message
}

// ---- files ------------------------------------------------------------

const filesPage = 100
let filesNext = null
// listedBySHA counts the files listed so far per content, so that
// re-uploads of the same bytes (an instant upload makes one in a moment)
// do not read as one file listed twice. Rows already shown keep their
// note when Show more files lists another copy.
let listedBySHA = new Map()

// sameContentNote says how many other listed files hold f's bytes.
function sameContentNote(f) {
  const others = (listedBySHA.get(f.sha256) || 0) - 1
  if (others < 1) return null
  return el('span', { class: 'muted note' }, 'same content as ' + others + (others === 1 ? ' other file' : ' other files'))
}

// filesLoads counts the loads of the files list, so that only the latest
// is shown: an answer can arrive after a later call's (the Files tab
// opened just as an upload succeeds), and would show a list from before.
let filesLoads = 0

async function loadFiles(more = false) {
  const load = ++filesLoads
  show($('files-error'))
  try {
    const path = '/files?limit=' + filesPage + (more && filesNext ? '&cursor=' + encodeURIComponent(filesNext) : '')
    const { files, next } = await ferry.api('GET', path)
    if (load !== filesLoads) return
    filesNext = next || null
    if (!more) listedBySHA = new Map()
    for (const f of files) listedBySHA.set(f.sha256, (listedBySHA.get(f.sha256) || 0) + 1)
    const rows = files.map((f) => el('tr', {},
      el('td', { 'data-label': 'Name', class: 'name' }, el('a', { href: f.download_url, download: f.name, 'aria-label': 'Download ' + f.name }, f.name),
        sameContentNote(f)),
      el('td', { 'data-label': 'Size' }, bytes(f.size)),
      el('td', { 'data-label': 'Uploaded' }, when(f.created_at)),
      // Until ferry has hashed the stored bytes, the SHA-256 is the one
      // the upload declared.
      el('td', { 'data-label': 'SHA-256', class: 'mono', title: f.sha256 + (f.sha256_verified ? '' : ' (declared; ferry is checking it)') },
        f.sha256.slice(0, 12) + '…' + (f.sha256_verified ? '' : ' (checking)')),
      el('td', { 'data-label': 'Actions', class: 'row-actions' },
        el('button', { type: 'button', class: 'secondary', 'aria-label': 'Copy link to ' + f.name, onclick: (ev) => copyLink(ev.target, f) }, 'Copy link'),
        el('button', { type: 'button', class: 'secondary', 'aria-label': 'Delete ' + f.name, onclick: (ev) => deleteFile(ev.target, f) }, 'Delete'))))
    if (more) $('files-body').append(...rows)
    else $('files-body').replaceChildren(...rows)
    $('files-more').hidden = !filesNext
    $('files-empty').hidden = $('files-body').children.length > 0
  } catch (err) {
    if (err.status === 401) return sessionEnded()
    if (load !== filesLoads) return
    show($('files-error'), 'Could not list files: ' + describe(err))
  }
}
// copyLink puts the file's download link (valid for
// FERRY_DOWNLOAD_LINK_TTL) on the clipboard.
async function copyLink(button, f) {
  try {
    await navigator.clipboard.writeText(f.download_url)
    button.textContent = 'Copied'
    announce('Download link of ' + f.name + ' copied')
  } catch {
    button.textContent = 'Copy failed'
  }
  setTimeout(() => { button.textContent = 'Copy link' }, 2000)
}

async function deleteFile(button, f) {
  if (!confirm('Delete ' + f.name + '? Its download links stop working.')) return
  try {
    await ferry.deleteFile(f.file_id)
    const row = button.closest('tr')
    const next = row.nextElementSibling || row.previousElementSibling
    row.remove()
    announce(f.name + ' deleted')
    ;(next ? next.querySelector('a') : $('files-refresh')).focus()
    $('files-empty').hidden = $('files-body').children.length > 0
  } catch (err) {
    if (err.status === 401) return sessionEnded()
    show($('files-error'), 'Could not delete ' + f.name + ': ' + describe(err))
  }
}

$('files-refresh').addEventListener('click', () => loadFiles())
$('files-more').addEventListener('click', () => loadFiles(true))

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

// Conversations by id, for the picker and to show an export's scope by
// its title.
const conversations = new Map()

async function loadConversations() {
  try {
    const { conversations: list } = await ferry.api('GET', '/conversations?limit=1000')
    for (const c of list) conversations.set(c.id, c.title)
    const pick = $('export-conv')
    pick.replaceChildren(...list.map((c) => el('option', { value: c.id }, c.title || c.id)))
    if (!list.length) pick.replaceChildren(el('option', { value: '' }, 'You are in no conversation'))
    for (const [id, r] of rows) if (r.job) renderExport(r, r.job)
  } catch (err) {
    if (err.status === 401) sessionEnded()
  }
}

function scopeText(scope) {
  if (scope === 'all') return 'All conversations'
  const id = String(scope).replace(/^conv:/, '')
  const title = conversations.get(id)
  return title ? 'Conversation “' + title + '”' : 'Conversation ' + id
}

$('export-scope').addEventListener('change', () => {
  $('export-conv').hidden = $('export-scope').value !== 'conv'
  exportKey = null
})
$('export-conv').addEventListener('change', () => { exportKey = null })

$('export-form').addEventListener('submit', async (ev) => {
  ev.preventDefault()
  show($('export-error'))
  let scope = 'all'
  if ($('export-scope').value === 'conv') {
    const id = $('export-conv').value
    if (!id) return show($('export-error'), 'Choose the conversation to export.')
    scope = 'conv:' + id
  }
  const key = intentKey()
  $('export-create').textContent = 'Creating…'
  try {
    const job = await ferry.createExport(scope, key)
    watchExport({ job_id: job.job_id, state: job.state, scope })
    endIntent(3000)
  } catch (err) {
    if (err.status === 401) sessionEnded()
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
    if (err.status === 401) return sessionEnded()
    show($('export-error'), 'Could not list exports: ' + describe(err))
  }
}

// download fetches a fresh signed link (they live minutes) and follows it.
async function download(id) {
  show($('export-error'))
  try {
    const job = await ferry.getExport(id)
    if (!job.download_url) throw new Error('the export is ' + job.state)
    leaving = true // a download navigation does not leave the page
    location.assign(job.download_url)
    setTimeout(() => { leaving = false }, 1000)
  } catch (err) {
    if (err.status === 401) sessionEnded()
    show($('export-error'), 'Could not download the export: ' + describe(err))
  }
}

const exportStates = { queued: 'Queued', running: 'Running', done: 'Done', failed: 'Failed', revoked: 'Revoked', expired: 'Expired' }

function exportRow(id) {
  let r = rows.get(id)
  if (!r) {
    r = {
      state: el('span', { class: 'state' }, '…'), scope: el('td', { 'data-label': 'Scope' }),
      created: el('td', { 'data-label': 'Created' }), link: el('td', { class: 'nowrap', 'data-label': 'Download' }),
    }
    r.tr = el('tr', { 'data-export': id }, el('td', { class: 'mono', 'data-label': 'Export' }, id), r.scope, r.created,
      el('td', { 'data-label': 'State' }, r.state), r.link)
    rows.set(id, r)
    $('exports-body').prepend(r.tr)
    $('exports-empty').hidden = true
  }
  return r
}

function renderExport(r, job) {
  r.job = job
  r.tr.dataset.state = job.state
  r.state.textContent = exportStates[job.state] || job.state
  r.state.className = 'state ' + (job.state === 'done' ? 'success' : job.state)
  r.scope.textContent = scopeText(job.scope)
  r.created.textContent = when(job.created_at)
  if (job.state === 'done') {
    const info = [job.messages != null ? job.messages + (job.messages === 1 ? ' message' : ' messages') : '', job.bytes ? bytes(job.bytes) : ''].filter(Boolean).join(' · ')
    r.link.replaceChildren(el('button', { type: 'button', class: 'secondary', 'aria-label': 'Download export ' + job.job_id, onclick: () => download(job.job_id) }, 'Download'), ' ' + info)
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
      if (err.status === 401) { sessionEnded(); break }
      r.link.textContent = describe(err)
      continue
    }
    renderExport(r, job)
  }
  r.watching = false
}

boot()
