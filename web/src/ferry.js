// ferry's JS client SDK for the native API (ES module).
//
//   import { Ferry } from '/assets/ferry.js'
//   const ferry = new Ferry()                  // same origin, session cookie
//   const ferry = new Ferry({ baseURL, token }) // or a bearer token
//   const up = ferry.upload(file)
//   up.addEventListener('progress', (e) => console.log(e.detail))
//   const result = await up.start()           // {state: 'success', file_id, ...}
//
// An upload hashes the file in a Web Worker (SHA-256 of the whole file and
// MD5 of each part, streaming), asks ferry for it by content — which
// gives an instant file, a proof-of-possession challenge, or the parts S3
// already holds — sends the missing parts straight to S3 with their
// Content-MD5 pinned in the signature, completes, and polls until the
// upload is verified. See docs/browser.md.

const MiB = 1 << 20
const defaultPartSize = 8 * MiB
const maxParts = 10000

/** FerryError is an API or transfer failure with ferry's problem code. */
export class FerryError extends Error {
  constructor(message, { status = 0, code = '', problem = null, retryable = false } = {}) {
    super(message)
    this.name = 'FerryError'
    this.status = status
    this.code = code
    this.problem = problem
    this.retryable = retryable
  }
}

/** Ferry is a client of one ferry server. */
export class Ferry {
  /**
   * @param {object} [opts]
   * @param {string} [opts.baseURL] ferry's URL; default the page's origin
   * @param {string} [opts.token] a bearer token; default the session cookie
   * @param {string|URL} [opts.workerURL] the hashing worker's script
   */
  constructor({ baseURL = '', token = null, workerURL = null } = {}) {
    this.baseURL = baseURL.replace(/\/$/, '')
    this.token = token
    this.workerURL = workerURL || new URL('./hash-worker.js', import.meta.url)
    this._hasher = null
  }

  /** api sends a JSON request and returns the decoded answer (null for 204). */
  async api(method, path, body, headers = {}) {
    const h = { Accept: 'application/json', ...headers }
    if (body !== undefined) h['Content-Type'] = 'application/json'
    if (this.token) h.Authorization = 'Bearer ' + this.token
    let resp
    try {
      resp = await fetch(this.baseURL + path, {
        method, headers: h, credentials: 'same-origin',
        body: body === undefined ? undefined : JSON.stringify(body),
      })
    } catch (err) {
      throw new FerryError('ferry is unreachable: ' + err.message, { retryable: true })
    }
    if (resp.status === 204) return null
    let data = null
    try {
      data = await resp.json()
    } catch {
      // An answer that is not JSON (a proxy's error page) is described below.
    }
    if (!resp.ok) {
      const msg = (data && (data.detail || data.title)) || `${method} ${path} failed with HTTP ${resp.status}`
      throw new FerryError(msg, {
        status: resp.status, code: (data && data.code) || '', problem: data,
        retryable: resp.status >= 500 || resp.status === 429,
      })
    }
    return data
  }

  me() { return this.api('GET', '/me') }
  signIn(token) { return this.api('POST', '/session', { token }) }
  signOut() { return this.api('DELETE', '/session') }
  listFiles(limit = 100) { return this.api('GET', '/files?limit=' + limit) }
  deleteFile(id) { return this.api('DELETE', '/files/' + encodeURIComponent(id)) }

  /**
   * createExport starts an export. Send the same idempotencyKey for the
   * same intent (a retry, a double click): ferry makes one job for it.
   */
  createExport(scope, idempotencyKey) {
    return this.api('POST', '/exports', { scope }, { 'Idempotency-Key': idempotencyKey })
  }
  getExport(id) { return this.api('GET', '/exports/' + encodeURIComponent(id)) }

  /** upload prepares an upload of file; call start() on the result. */
  upload(file, opts = {}) { return new Upload(this, file, opts) }

  /** hasher is the shared hashing worker. */
  hasher() {
    if (!this._hasher) this._hasher = new Hasher(this.workerURL)
    return this._hasher
  }
}

/** Hasher runs hashing jobs on one module Web Worker. */
class Hasher {
  constructor(url) {
    this.worker = new Worker(url, { type: 'module' })
    this.next = 1
    this.jobs = new Map()
    this.worker.onmessage = (ev) => {
      const { id, progress, result, error } = ev.data
      const job = this.jobs.get(id)
      if (!job) return
      if (progress !== undefined) return job.onProgress && job.onProgress(progress)
      this.jobs.delete(id)
      if (error) job.reject(new FerryError('hashing failed: ' + error))
      else job.resolve(result)
    }
    this.worker.onerror = (ev) => {
      const err = new FerryError('the hashing worker failed: ' + (ev.message || 'unknown error'))
      for (const job of this.jobs.values()) job.reject(err)
      this.jobs.clear()
    }
  }

  run(msg, onProgress) {
    const id = this.next++
    return new Promise((resolve, reject) => {
      this.jobs.set(id, { resolve, reject, onProgress })
      this.worker.postMessage({ id, ...msg })
    })
  }

  /** file hashes a whole file: {sha256 (hex), md5s: [base64 per part]}. */
  file(file, partSize, onProgress) { return this.run({ op: 'file', file, partSize }, onProgress) }
  md5(blob) { return this.run({ op: 'md5', blob }) }
  sha256(blob) { return this.run({ op: 'sha256', blob }) }
}

/** partSizeFor is ferry's default layout: 8 MiB parts, more when that needs over 10,000. */
export function partSizeFor(size) {
  let ps = defaultPartSize
  if (Math.ceil(size / ps) > maxParts) ps = Math.ceil(Math.ceil(size / maxParts) / MiB) * MiB
  return ps
}

/** backoff is the retry delay before attempt n (1-based): 1 s, 2 s, 4 s … capped at 10 s. */
export function backoff(n) {
  return Math.min(1000 * 2 ** (n - 1), 10000)
}

function hexOfBase64(b64) {
  return Array.from(atob(b64), (c) => c.charCodeAt(0).toString(16).padStart(2, '0')).join('')
}

function normalizeETag(e) {
  return String(e || '').trim().replace(/^"|"$/g, '').toLowerCase()
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms)
  if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve() }, { once: true })
})

class Stopped extends Error {}

/**
 * Upload is one file's upload. Events (CustomEvent, details below):
 *   'state'    {state}: hashing, uploading, paused, completing, merging,
 *              success, failed, cancelled, error
 *   'progress' {phase: 'hashing'|'uploading', bytesDone, bytesTotal,
 *              rate (bytes/s), eta (s, or null)}
 *   'part'     {partNumber, etag} a part reached S3
 */
export class Upload extends EventTarget {
  /**
   * @param {Ferry} client
   * @param {File|Blob} file
   * @param {object} [opts]
   * @param {number} [opts.concurrency] part PUTs at once (default 4)
   * @param {number} [opts.maxAttempts] tries per part (default 8)
   * @param {number} [opts.pollInterval] ms between status polls (default 1000)
   * @param {string} [opts.name] the file name (default file.name)
   */
  constructor(client, file, opts = {}) {
    super()
    this.client = client
    this.file = file
    this.name = opts.name || file.name
    this.concurrency = opts.concurrency || 4
    this.maxAttempts = opts.maxAttempts || 8
    this.pollInterval = opts.pollInterval || 1000
    this.state = 'idle'
    this.uploadId = null
    this.result = null
    this.error = null
    this.partSize = partSizeFor(file.size)
    this.md5s = []
    this.etags = new Map() // part number → ETag S3 holds, verified against md5s
    this.urls = new Map() // part number → presigned {url, headers, expires}
    this.inflight = new Map() // part number → {xhr, loaded}
    this.bytesDone = 0
    this.samples = []
    this.stopper = null
  }

  emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })) }

  setState(state) {
    this.state = state
    this.emit('state', { state })
  }

  /** start runs the upload to its end and resolves with ferry's final upload (or instant file). */
  start() {
    if (!this.done) {
      this.done = this.run().catch((err) => {
        if (err instanceof Stopped) return this.result
        this.error = err
        this.setState('error')
        throw err
      })
    }
    return this.done
  }

  /** pause stops sending: parts in flight are abandoned and sent again on resume. */
  pause() {
    if (this.state !== 'uploading') return
    this.paused = true
    this.stop()
    this.setState('paused')
  }

  /** resume asks ferry (that is, S3) which parts are there and sends the rest. */
  resume() {
    if (this.state !== 'paused') return
    this.paused = false
    this.resumed && this.resumed()
  }

  /**
   * cancel abandons the upload and aborts it on the server. Once complete
   * was sent (completing, merging) the upload can no longer be cancelled.
   */
  async cancel() {
    if (!['idle', 'hashing', 'uploading', 'paused'].includes(this.state)) return
    this.cancelled = true
    this.stop()
    this.resumed && this.resumed()
    this.setState('cancelled')
    if (this.uploadId) {
      try { await this.client.api('DELETE', '/uploads/' + this.uploadId) } catch { /* already gone or finished */ }
    }
  }

  stop() {
    if (this.stopper) this.stopper.abort()
    for (const { xhr } of this.inflight.values()) xhr.abort()
  }

  checkStopped() {
    if (this.cancelled) throw new Stopped()
  }

  async run() {
    this.setState('hashing')
    const size = this.file.size
    const hashed = await this.client.hasher().file(this.file, this.partSize, (n) => this.progress('hashing', n, size))
    this.checkStopped()
    this.md5s = hashed.md5s
    this.sha256 = hashed.sha256

    let up = await this.client.api('POST', '/uploads', {
      file_name: this.name, size, content_type: this.file.type || '', sha256: this.sha256, part_size: this.partSize,
    })
    if (up.state === 'proof_required') up = await this.prove(up.challenge)
    if (up.upload_id) this.uploadId = up.upload_id
    if (up.state === 'success') return this.finish(up)
    if (up.state === 'pending' || up.state === 'merging') return this.poll()
    if (up.part_size !== this.partSize) {
      // An upload of this content started elsewhere with another layout:
      // its parts' MD5s are computed as they are needed.
      this.partSize = up.part_size
      this.md5s = []
    }
    this.partCount = up.part_count

    let listed = up.parts
    for (;;) {
      this.setState('uploading')
      await this.sendMissing(listed)
      this.checkStopped()
      if (this.paused) {
        await new Promise((resolve) => { this.resumed = resolve })
        this.checkStopped()
        listed = (await this.client.api('GET', '/uploads/' + this.uploadId)).parts
        continue
      }
      const missing = await this.complete()
      if (!missing) return this.poll()
      listed = missing
    }
  }

  /** prove answers a proof-of-possession challenge with the hashes of its ranges. */
  async prove(ch) {
    const digests = []
    for (const r of ch.ranges) digests.push(await this.client.hasher().sha256(this.file.slice(r.offset, r.offset + r.length)))
    return this.client.api('POST', '/uploads/proofs/' + encodeURIComponent(ch.id), { digests })
  }

  partRange(n) {
    const start = (n - 1) * this.partSize
    return [start, Math.min(start + this.partSize, this.file.size)]
  }

  async md5Of(n) {
    if (!this.md5s[n - 1]) {
      const [a, b] = this.partRange(n)
      this.md5s[n - 1] = await this.client.hasher().md5(this.file.slice(a, b))
    }
    return this.md5s[n - 1]
  }

  /**
   * sendMissing sends every part S3 does not hold intact. A listed part
   * counts only when its size and ETag (the MD5 of its bytes) are those of
   * the local part: a PUT cut off mid-way may have left a wrong part.
   */
  async sendMissing(listed) {
    this.etags.clear()
    this.bytesDone = 0
    for (const p of listed || []) {
      if (p.part_number > this.partCount) continue
      const [a, b] = this.partRange(p.part_number)
      if (p.size === b - a && normalizeETag(p.etag) === hexOfBase64(await this.md5Of(p.part_number))) {
        this.etags.set(p.part_number, p.etag)
        this.bytesDone += p.size
      }
    }
    const todo = []
    for (let n = 1; n <= this.partCount; n++) if (!this.etags.has(n)) todo.push(n)
    this.todo = todo
    this.samples = []
    this.progress('uploading')
    this.stopper = new AbortController()
    const workers = []
    for (let i = 0; i < Math.min(this.concurrency, todo.length); i++) workers.push(this.worker())
    const results = await Promise.allSettled(workers)
    this.stopper = null
    if (this.paused || this.cancelled) return
    const failed = results.find((r) => r.status === 'rejected')
    if (failed) throw failed.reason
  }

  async worker() {
    while (this.todo.length && !this.paused && !this.cancelled) {
      const n = this.todo.shift()
      try {
        await this.sendPart(n)
      } catch (err) {
        if (this.paused || this.cancelled) return
        this.stop() // one part out of attempts fails the upload
        throw err
      }
    }
  }

  async sendPart(n) {
    for (let attempt = 1; ; attempt++) {
      try {
        const u = await this.urlFor(n)
        const etag = await this.put(n, u)
        if (normalizeETag(etag) !== hexOfBase64(await this.md5Of(n))) {
          throw new FerryError(`part ${n}: S3 stored other bytes than were sent`, { retryable: true })
        }
        this.etags.set(n, etag)
        const [a, b] = this.partRange(n)
        this.bytesDone += b - a
        this.progress('uploading')
        this.emit('part', { partNumber: n, etag })
        // Recording the part keeps the upload alive; it is only a report,
        // S3's listing stays the truth, so a failure here is harmless.
        this.client.api('PUT', `/uploads/${this.uploadId}/parts/${n}`, { etag, size: b - a }).catch(() => {})
        return
      } catch (err) {
        if (this.paused || this.cancelled) throw err
        if (err.status === 403) this.urls.delete(n) // expired or refused: sign again
        if (!err.retryable || attempt >= this.maxAttempts) throw err
        await sleep(backoff(attempt), this.stopper && this.stopper.signal)
      }
    }
  }

  /** urlFor returns a fresh presigned URL for part n, signing a batch of upcoming parts at once. */
  async urlFor(n) {
    const have = this.urls.get(n)
    if (have && have.expires - Date.now() > 60000) return have
    const batch = [n, ...this.todo.filter((m) => !this.urls.has(m)).slice(0, 31)]
    const content_md5 = {}
    for (const m of batch) content_md5[m] = await this.md5Of(m)
    const { urls } = await this.client.api('POST', `/uploads/${this.uploadId}/presign`, { part_numbers: batch, content_md5 })
    for (const [k, v] of Object.entries(urls)) this.urls.set(Number(k), { ...v, expires: Date.parse(v.expires_at) })
    return this.urls.get(n)
  }

  put(n, u) {
    const [a, b] = this.partRange(n)
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest()
      const entry = { xhr, loaded: 0 }
      this.inflight.set(n, entry)
      xhr.open(u.method || 'PUT', u.url)
      for (const [k, v] of Object.entries(u.headers || {})) xhr.setRequestHeader(k, v)
      xhr.upload.onprogress = (ev) => { entry.loaded = ev.loaded; this.progress('uploading') }
      const done = (fn) => { this.inflight.delete(n); this.progress('uploading'); fn() }
      xhr.onload = () => done(() => {
        if (xhr.status >= 200 && xhr.status < 300) return resolve(xhr.getResponseHeader('ETag'))
        const code = (/<Code>([^<]+)<\/Code>/.exec(xhr.responseText || '') || [])[1] || ''
        reject(new FerryError(`part ${n}: S3 answered ${xhr.status} ${code}`.trim(), {
          status: xhr.status, code, retryable: xhr.status >= 500 || xhr.status === 403 || xhr.status === 408 || xhr.status === 429,
        }))
      })
      xhr.onerror = () => done(() => reject(new FerryError(`part ${n}: network error`, { retryable: true })))
      xhr.onabort = () => done(() => reject(new FerryError(`part ${n}: aborted`, { retryable: false })))
      xhr.send(this.file.slice(a, b))
    })
  }

  /** complete asks ferry to merge; it returns the parts to send again when S3 lacks some. */
  async complete() {
    this.setState('completing')
    const parts = [...this.etags].sort((x, y) => x[0] - y[0]).map(([n, etag]) => ({ part_number: n, etag }))
    try {
      await this.client.api('POST', `/uploads/${this.uploadId}/complete`, { parts })
      return null
    } catch (err) {
      if (err.code !== 'parts_incomplete' || (this.completeRetries = (this.completeRetries || 0) + 1) > 3) throw err
      const again = new Set([...(err.problem.missing_parts || []), ...(err.problem.bad_parts || [])])
      return (await this.client.api('GET', '/uploads/' + this.uploadId)).parts.filter((p) => !again.has(p.part_number))
    }
  }

  /** poll follows the merge until the upload is verified or failed. */
  async poll() {
    this.setState('merging')
    for (let i = 0; ; i++) {
      this.checkStopped()
      let st
      try {
        st = await this.client.api('GET', '/uploads/' + this.uploadId)
      } catch (err) {
        if (!err.retryable) throw err
        await sleep(backoff(Math.min(i + 1, 5)))
        continue
      }
      if (st.state === 'success' || st.state === 'failed') return this.finish(st)
      await sleep(Math.min(this.pollInterval * (1 + Math.floor(i / 10)), 5000))
    }
  }

  finish(st) {
    this.result = st
    this.bytesDone = this.file.size
    if (st.state === 'success') this.progress('uploading')
    this.setState(st.state)
    if (st.state === 'failed') {
      this.error = new FerryError(st.error || 'the upload failed verification', { code: 'upload_failed' })
    }
    return st
  }

  /** progress emits bytes done (with the parts in flight), the rate over the last seconds and the ETA. */
  progress(phase, done, total = this.file.size) {
    if (phase === 'uploading') {
      done = this.bytesDone
      for (const { loaded } of this.inflight.values()) done += loaded
    }
    const now = performance.now()
    this.samples.push([now, done])
    while (this.samples.length > 2 && now - this.samples[0][0] > 5000) this.samples.shift()
    const [t0, b0] = this.samples[0]
    const rate = now - t0 > 200 ? ((done - b0) * 1000) / (now - t0) : 0
    const eta = rate > 0 ? (total - done) / rate : null
    this.emit('progress', { phase, bytesDone: done, bytesTotal: total, rate, eta })
  }
}
