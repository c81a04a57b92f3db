// ferry's JS client SDK for the native API (ES module).
//
//   import { Ferry } from '/assets/ferry.js'
//   const ferry = new Ferry()                  // same origin, session cookie
//   const ferry = new Ferry({ baseURL, token }) // or a bearer token
//   const up = ferry.upload(file)
//   up.addEventListener('progress', (e) => console.log(e.detail))
//   const result = await up.start()           // {state: 'success', file_id, ...}
//
// An upload reads the file once, in a Web Worker, while it sends it: each
// part's CRC32C is known as soon as the part is read, and the part is then
// signed (its CRC32C pinned in the URL, so S3 refuses other bytes) and PUT
// straight to S3, several at once. ferry is asked as soon as the first
// part is hashed, with the CRC32C of the file's first 8 MiB: that finds an
// unfinished upload of the same file, so only the parts S3 lacks are sent,
// and ferry says whether it may hold the content already
// (instant_candidate). Only then is the whole file hashed (SHA-256), before
// any part is sent, and the hash declared, which can turn the upload into
// an instant file; otherwise the SHA-256 is ferry's to compute. Small
// files are hashed at once and ask with their SHA-256. The whole file's
// CRC32C goes with complete and S3 checks it; the SDK then waits (a long
// poll) for success. See docs/browser.md.

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
   * @param {string} [opts.ticket] an upload ticket (ftk_…) from your backend, sent as the bearer token: it makes one upload
   * @param {string|URL} [opts.workerURL] the hashing worker's script;
   *   default ferry's (/assets/hash-worker.js next to this module), started
   *   from a Blob URL when the page is on another origin
   * @param {number} [opts.idleTimeout] ms a part PUT may go without
   *   sending a byte, or then wait for S3's answer, before it is given up
   *   and sent again (default 60000; 0 waits for ever)
   */
  constructor({ baseURL = '', token = null, ticket = null, workerURL = null, idleTimeout = 60000 } = {}) {
    this.baseURL = baseURL.replace(/\/$/, '')
    this.token = ticket || token
    this.workerURL = workerURL || new URL('./hash-worker.js', import.meta.url)
    this.idleTimeout = idleTimeout
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
   * The key is sent as an RFC 8941 string ("…"), which any printable
   * ASCII key can be; a bare UUID is not a valid token.
   */
  createExport(scope, idempotencyKey) {
    const quoted = '"' + String(idempotencyKey).replace(/[\\"]/g, '\\$&') + '"'
    return this.api('POST', '/exports', { scope }, { 'Idempotency-Key': quoted })
  }
  getExport(id) { return this.api('GET', '/exports/' + encodeURIComponent(id)) }

  /** upload prepares an upload of file; call start() on the result. */
  upload(file, opts = {}) { return new Upload(this, file, opts) }

  /**
   * warm starts the hashing workers now rather than with the first upload,
   * which would otherwise wait for them to load and compile their
   * WebAssembly: a fresh page's first 4 MiB upload sent POST /uploads a
   * median of 45–53 ms after start() without it, 27–28 ms with it
   * (BenchmarkBrowserFirstUpload). Call it when the page is likely to
   * upload, as the web UI does once signed in; it resolves with true when
   * the workers are ready, and uploads need not wait.
   */
  warm() { return this.hasher().warm() }

  /** hasher is the shared hashing worker. */
  hasher() {
    if (!this._hasher) this._hasher = new Hasher(this.workerURL)
    return this._hasher
  }
}

/**
 * Hasher runs hashing jobs on a module Web Worker, and gives streams a
 * second one for their SHA-256 where the page has no WebCrypto.
 */
class Hasher {
  constructor(url) {
    this.url = workerScript(url)
    this.shaWorker = null
    this.next = 1
    this.jobs = new Map()
    this.worker = this.start()
  }

  // start starts a worker; the jobs of both answer through this.jobs.
  start() {
    const w = new Worker(this.url, { type: 'module' })
    w.onmessage = (ev) => {
      const { id, part, progress, result, error } = ev.data
      const job = this.jobs.get(id)
      if (!job) return
      if (part !== undefined) return job.onPart && job.onPart(part)
      if (progress !== undefined) return job.onProgress && job.onProgress(progress)
      this.jobs.delete(id)
      if (error) job.reject(new FerryError('hashing failed: ' + error))
      else job.resolve(result)
    }
    w.onerror = (ev) => this.failed(ev)
    return w
  }

  /** sha is the second worker, started on first use. */
  sha() {
    if (!this.shaWorker) this.shaWorker = this.start()
    return this.shaWorker
  }

  /**
   * warm resolves with true when the workers a stream needs have loaded
   * and compiled their hashes: the reader, and the SHA-256's only where
   * there is no WebCrypto.
   */
  warm() {
    const ready = [this.run({ op: 'warm' }).done]
    if (!webCrypto()) ready.push(this.run({ op: 'warm' }, {}, [], this.sha()).done)
    return Promise.all(ready).then(() => true)
  }

  failed(ev) {
    const err = new FerryError('the hashing worker failed: ' + (ev.message || 'unknown error'))
    for (const job of this.jobs.values()) job.reject(err)
    this.jobs.clear()
  }

  run(msg, handlers = {}, transfer = [], worker = this.worker) {
    const id = this.next++
    const done = new Promise((resolve, reject) => {
      this.jobs.set(id, { resolve, reject, ...handlers })
      worker.postMessage({ id, ...msg }, transfer)
    })
    return { id, done }
  }

  /**
   * stream reads file once, in order: onPart({n, crc32c, md5?}) for each
   * part as soon as it is read, and done resolves with the whole file's
   * {sha256 (hex), crc32c (base64)}. md5 adds each part's MD5; md5on()
   * asks for them from the next part on, cancel() stops the read. With
   * sha false the stream computes no SHA-256 (sha256 is null).
   */
  stream(file, partSize, { md5 = false, sha = true, onPart, onProgress } = {}) {
    const msg = { op: 'file', file, partSize, md5, sha }
    const transfer = []
    if (sha && !webCrypto()) {
      // Without WebCrypto the SHA-256 runs on the second worker, fed by
      // the first over a channel of their own, so the part CRC32Cs do not
      // wait for it. With it, the reader hashes a file of up to 16 MiB
      // (every file the SDK streams with a SHA-256) whole, natively.
      const ch = new MessageChannel()
      this.sha().postMessage({ op: 'sha', port: ch.port2 }, [ch.port2])
      msg.port = ch.port1
      transfer.push(ch.port1)
    }
    const { id, done } = this.run(msg, { onPart, onProgress }, transfer)
    return {
      done,
      md5on: () => this.worker.postMessage({ id, op: 'md5on' }),
      cancel: () => this.worker.postMessage({ id, op: 'cancel' }),
    }
  }

  /** part digests one part: {crc32c, md5?}. */
  part(blob, md5) { return this.run({ op: 'part', blob, md5 }).done }
  sha256(blob) { return this.run({ op: 'sha256', blob }).done }
}

/**
 * webCrypto says whether the page, and so its workers, has WebCrypto: in
 * a secure context (HTTPS, or localhost) only.
 */
function webCrypto() {
  return !!(globalThis.crypto && globalThis.crypto.subtle)
}

/**
 * workerScript is where a page starts the hashing worker from. Browsers
 * start workers only from the page's own origin, so on another origin
 * (the SDK imported from ferry by a host app's page) it is a Blob URL of
 * the page's own whose module imports ferry's worker script: a CORS
 * fetch, which ferry answers for the origins in FERRY_CORS_ORIGINS. A
 * page whose CSP does not allow blob: workers can host the worker itself
 * and pass its URL as workerURL.
 */
export function workerScript(url) {
  const u = new URL(url, location.href)
  if (u.origin === location.origin) return u
  const src = 'import ' + JSON.stringify(u.href) + '\n'
  return URL.createObjectURL(new Blob([src], { type: 'text/javascript' }))
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

function hexBytes(hex) {
  if (!/^([0-9a-f]{2})+$/i.test(hex || '')) throw new FerryError('the challenge has no valid nonce')
  const out = new Uint8Array(hex.length / 2)
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.substr(2 * i, 2), 16)
  return out
}

function normalizeETag(e) {
  return String(e || '').trim().replace(/^"|"$/g, '').toLowerCase()
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms)
  if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve() }, { once: true })
})

// deferred is a promise with its resolve, and its value once resolved.
function deferred() {
  const d = { value: null }
  d.promise = new Promise((r) => { d.resolve = (v) => { d.value = v; r(v) } })
  return d
}

// S3's codes for a body that does not match its signed checksum: the bytes
// were damaged on the way, and the part is read and sent again.
const badDigest = new Set(['BadDigest', 'XAmzContentChecksumMismatch', 'InvalidDigest'])

// Files this small are hashed (SHA-256) before ferry is asked: it takes a
// few tens of milliseconds, and content ferry already holds then costs no
// bytes at all. Larger files are hashed only when ferry answers that it may
// hold the content (instant_candidate, from the CRC32C of their head).
const hashFirstLimit = 16 * MiB

// headLength is how much of a file its head CRC32C covers (ferry's
// upload.HeadLength): part 1 at the default part size.
const headLength = defaultPartSize

// waitFor is how long one status request may be held open by ferry.
const waitFor = '30s'

class Stopped extends Error {}

/**
 * Upload is one file's upload. Events (CustomEvent, details below):
 *   'state'    {state}: hashing, uploading, paused, completing, merging,
 *              success, failed, cancelled, error
 *   'progress' {phase: 'hashing'|'uploading', bytesDone, bytesTotal,
 *              rate (bytes/s), eta (s, or null), bytesHashed}
 *   'part'     {partNumber, etag} a part reached S3
 *   'retry'    {reason: 'connection'|'server', attempt, delay (ms),
 *              message}: a request failed and is tried again after delay
 *   'recovered' {}: a request went through after retries
 */
export class Upload extends EventTarget {
  /**
   * @param {Ferry} client
   * @param {File|Blob} file
   * @param {object} [opts]
   * @param {number} [opts.concurrency] part PUTs at once (default 4)
   * @param {number} [opts.maxAttempts] tries per part when S3 or ferry
   *   answers with a retryable error (default 8)
   * @param {number} [opts.offlineFor] ms to keep retrying while neither
   *   ferry nor S3 can be reached at all, before the upload stops with
   *   code 'connection_lost' (default 120000)
   * @param {number} [opts.pollInterval] ms between status requests when
   *   ferry answers them without waiting (default 1000)
   * @param {string} [opts.name] the file name (default file.name)
   * @param {boolean} [opts.skipHash] never hash the file, even a small one
   *   or one ferry says it may hold: the SDK computes only the CRC32Cs S3
   *   checks, so the upload cannot become an instant file (as `ferry
   *   upload --no-instant`). Without it, the file is hashed only when an
   *   instant upload may come of it; either way the file's sha256 is the
   *   one ferry computes from the stored object (absent until it has)
   */
  constructor(client, file, opts = {}) {
    super()
    this.client = client
    this.file = file
    this.name = opts.name || file.name
    this.skipHash = !!opts.skipHash
    this.concurrency = opts.concurrency || 4
    this.maxAttempts = opts.maxAttempts || 8
    this.offlineFor = opts.offlineFor || 120000
    this.lostSince = null // when requests started failing at the network
    this.pollInterval = opts.pollInterval || 1000
    this.state = 'idle'
    this.uploadId = null
    this.result = null
    this.error = null
    this.partSize = partSizeFor(file.size)
    this.streamed = this.partSize // the layout the hashing stream reads in
    this.checksum = false // S3 checks each part's CRC32C (else its Content-MD5)
    this.slots = new Map() // part number → deferred digest {crc32c, md5?} from the stream
    this.extra = new Map() // part number → digest computed on its own
    this.digesting = new Map() // part number → its own digest under way
    this.listed = new Map() // part number → the part S3 lists
    this.etags = new Map() // part number → ETag of a part S3 holds intact
    this.urls = new Map() // part number → presigned {url, headers, expires}
    this.signing = new Map() // part number → presign request under way
    this.inflight = new Map() // part number → {xhr, loaded}
    this.todo = [] // parts no worker has taken yet
    this.sending = [] // the parts this round sends (or finds intact)
    this.bytesDone = 0
    this.bytesHashed = 0
    this.samples = []
    this.lastProgress = -Infinity
    this.stopper = null
    this.sha256 = null // the file's, once hashed
    this.crc32c = null // the whole file's, once hashed
    this.serverSHA = null // the SHA-256 the upload declares on ferry
    this.declaring = null
    this.shortcut = null // a file ferry gave while parts were still being sent
    this.proved = false // the shortcut came from a proof: the running upload is ours to abort
    this.conflict = false // the upload found was another file's: start a new one
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
        if (err instanceof Stopped || this.cancelled) return this.result
        if (this.hashing) this.hashing.cancel()
        if (err instanceof FerryError && err.status === 0 && err.retryable && err.code !== 'connection_lost') {
          err = new FerryError('connection lost: ' + err.message, { code: 'connection_lost', retryable: true })
        }
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
    this.wake()
  }

  /**
   * cancel abandons the upload and aborts it on the server. Once complete
   * was sent (completing, merging) the upload can no longer be cancelled.
   */
  async cancel() {
    if (!['idle', 'hashing', 'uploading', 'paused'].includes(this.state)) return
    this.cancelled = true
    this.stop()
    if (this.hashing) this.hashing.cancel()
    this.wake()
    this.setState('cancelled')
    if (this.uploadId) {
      try { await this.client.api('DELETE', '/uploads/' + this.uploadId) } catch { /* already gone or finished */ }
    }
  }

  wake() {
    if (this.resumed) this.resumed()
  }

  stop() {
    if (this.stopper) this.stopper.abort()
    for (const { xhr } of this.inflight.values()) xhr.abort()
  }

  checkStopped() {
    if (this.cancelled) throw new Stopped()
  }

  /**
   * retrying runs fn until it succeeds, retrying the retryable failures
   * after a backoff: up to maxAttempts tries for errors ferry or S3
   * answered, and for offlineFor ms while neither can be reached (a
   * network error), so an outage of a minute or two is ridden out. Each
   * wait is announced with a 'retry' event, and the first success after
   * one with 'recovered'.
   */
  async retrying(fn, { onRetry } = {}) {
    for (let attempt = 1; ; attempt++) {
      try {
        const v = await fn(attempt)
        if (this.lostSince !== null || this.retried) {
          this.lostSince = null
          this.retried = false
          this.emit('recovered', {})
        }
        return v
      } catch (err) {
        if (this.halted() || this.cancelled || !(err instanceof FerryError)) throw err
        if (onRetry) onRetry(err)
        if (!err.retryable) throw err
        const offline = err.status === 0
        const now = Date.now()
        if (offline) {
          if (this.lostSince === null) this.lostSince = now
          if (now - this.lostSince >= this.offlineFor) {
            throw new FerryError('connection lost: ' + err.message, { code: 'connection_lost', retryable: true })
          }
        } else if (attempt >= this.maxAttempts) {
          throw err
        }
        const delay = backoff(attempt)
        this.retried = true
        this.emit('retry', { reason: offline ? 'connection' : 'server', attempt, delay, message: err.message })
        await sleep(delay, this.stopper && this.stopper.signal)
        if (this.halted() || this.cancelled) throw err
      }
    }
  }

  /** halted says the part workers should stop taking parts. */
  halted() {
    return this.paused || this.cancelled || this.shortcut || this.conflict
  }

  async run() {
    this.setState('hashing')
    const size = this.file.size
    this.hashing = this.client.hasher().stream(this.file, this.partSize, {
      sha: !this.skipHash && size <= hashFirstLimit,
      onPart: (p) => this.slot(p.n).resolve(p),
      onProgress: (n) => {
        this.bytesHashed = n
        this.progress(this.state === 'hashing' ? 'hashing' : 'uploading')
      },
    })
    this.hashed = this.hashing.done.then((r) => {
      this.sha256 = r.sha256
      this.crc32c = r.crc32c
      return r
    })
    this.hashed.catch(() => { /* awaited where it matters */ })
    if (size <= hashFirstLimit) await this.hashed
    else await this.digestOf(1)
    this.checkStopped()
    for (let tries = 1; ; tries++) {
      const up = await this.retrying(() => this.client.api('POST', '/uploads', this.initBody()))
      const res = await this.follow(up)
      if (res) return res
      // The unfinished upload found by the first part was another file's
      // (same size and first part): start one of this content, now that
      // its hash is known, which finds no other file's.
      if (tries >= 2) throw new FerryError('ferry keeps answering with an upload of other content', { code: 'sha256_mismatch' })
      this.conflict = false
      this.declaring = null
    }
  }

  initBody() {
    const body = {
      file_name: this.name, size: this.file.size, content_type: this.file.type || '', part_size: this.partSize,
      checksum_algorithm: 'CRC32C',
    }
    if (this.sha256) {
      body.sha256 = this.sha256
    } else {
      body.first_part_crc32c = this.digestNow(1).crc32c
      // Part 1 is the head unless a huge file needed larger parts.
      if (this.partSize === headLength || this.file.size <= headLength) body.head_crc32c = body.first_part_crc32c
    }
    return body
  }

  /** follow takes ferry's answer to POST /uploads to its end, or returns null to start over. */
  async follow(up) {
    if (up.state === 'proof_required') up = await this.prove(up.challenge)
    if (up.upload_id) this.uploadId = up.upload_id
    if (up.state === 'success') return this.finish(up)
    if (up.state === 'pending' || up.state === 'merging') return this.wait()
    this.checksum = up.checksum_algorithm === 'CRC32C'
    // A store without checksums: parts are pinned by their Content-MD5.
    if (!this.checksum) this.hashing.md5on()
    this.serverSHA = up.sha256 || null
    if (up.part_size !== this.partSize) {
      // An upload of this content started elsewhere with another layout:
      // its parts are digested on their own as they are needed.
      this.partSize = up.part_size
      this.extra.clear()
      this.digesting.clear()
    }
    this.partCount = up.part_count
    this.urls.clear()
    if (up.instant_candidate && !this.skipHash && !this.sha256) {
      const res = await this.hashFirst()
      if (res) return res
    }
    this.hashed.then(() => this.declare(), () => {})

    let listed = up.parts
    for (;;) {
      this.setState('uploading')
      await this.sendMissing(listed)
      if (!this.halted()) {
        const missing = await this.complete()
        if (!this.halted()) {
          if (!missing) return this.wait()
          listed = missing
          continue
        }
      }
      if (this.shortcut) return this.takeShortcut()
      if (this.conflict) return null
      this.checkStopped()
      await new Promise((resolve) => {
        this.resumed = resolve
        if (!this.paused) resolve()
      })
      this.resumed = null
      if (this.shortcut) return this.takeShortcut()
      if (this.conflict) return null
      this.checkStopped()
      const st = await this.retrying(() => this.client.api('GET', '/uploads/' + this.uploadId))
      this.serverSHA = st.sha256 || null
      listed = st.parts
    }
  }

  /**
   * prove answers a proof-of-possession challenge: for each range, the
   * SHA-256 of the challenge's nonce followed by the range's bytes, so
   * the answer needs the bytes and not only the file's hash.
   */
  async prove(ch) {
    const nonce = hexBytes(ch.nonce)
    const digests = []
    for (const r of ch.ranges) {
      const blob = new Blob([nonce, this.file.slice(r.offset, r.offset + r.length)])
      digests.push(await this.client.hasher().sha256(blob))
    }
    return this.client.api('POST', '/uploads/proofs/' + encodeURIComponent(ch.id), { digests })
  }

  /**
   * hashFirst runs when ferry may hold the content (instant_candidate):
   * it hashes the whole file before any part is sent and declares the
   * SHA-256. An instant file, or one a proof of possession gives, ends the
   * upload (it is returned); otherwise only the head matched, and the
   * upload goes on with its hash declared.
   */
  async hashFirst() {
    this.setState('hashing')
    this.sha256 = await this.client.hasher().sha256(this.file)
    this.checkStopped()
    if (this.serverSHA) {
      // A resumed upload that declared its hash already: another hash is
      // another file, for a new upload.
      if (this.serverSHA !== this.sha256) this.conflict = true
      return null
    }
    let ans = await this.retrying(() => this.client.api('POST', `/uploads/${this.uploadId}/sha256`, { sha256: this.sha256 }))
    if (ans.state === 'proof_required') {
      try {
        ans = await this.prove(ans.challenge)
        this.proved = true
      } catch {
        return null // no file from the proof: the upload goes on
      }
    }
    if (ans.state === 'success') {
      this.shortcut = ans
      return this.takeShortcut()
    }
    this.serverSHA = ans.sha256 || null
    return null
  }

  /**
   * declare tells ferry the file's SHA-256 as soon as it is known, while
   * parts are still to be sent: ferry then answers with the file at once
   * when the caller already has this content (it aborts the running
   * upload), a proof challenge when someone else does, or the upload
   * (keep sending). Once every part left is on the wire, declaring could
   * save nothing, and the hash goes with complete instead.
   */
  declare() {
    if (!this.sha256 || this.declaring || this.halted() || !this.uploadId) return
    if (this.serverSHA) {
      if (this.serverSHA !== this.sha256) this.startOver()
      return
    }
    if (!this.todo.some((n) => !this.intact(n, this.digestNow(n)))) return
    this.declaring = (async () => {
      let ans
      try {
        ans = await this.client.api('POST', `/uploads/${this.uploadId}/sha256`, { sha256: this.sha256 })
      } catch (err) {
        if (err.code === 'sha256_mismatch') this.startOver()
        return // complete carries the hash
      }
      if (ans.state === 'proof_required') {
        try {
          ans = await this.prove(ans.challenge)
          this.proved = true
        } catch {
          return // no file from the proof: the upload goes on
        }
      }
      if (ans.state === 'success') {
        this.shortcut = ans
        this.stop()
        this.wake()
      } else if (ans.sha256) {
        this.serverSHA = ans.sha256
      }
    })()
  }

  startOver() {
    this.conflict = true
    this.stop()
    this.wake()
  }

  /** takeShortcut ends the upload with the file ferry gave mid-transfer. */
  async takeShortcut() {
    if (this.proved) {
      try { await this.client.api('DELETE', '/uploads/' + this.uploadId) } catch { /* cleanup expires it */ }
    }
    this.uploadId = this.shortcut.upload_id
    return this.finish(this.shortcut)
  }

  partRange(n) {
    const start = (n - 1) * this.partSize
    return [start, Math.min(start + this.partSize, this.file.size)]
  }

  slot(n) {
    let s = this.slots.get(n)
    if (!s) this.slots.set(n, (s = deferred()))
    return s
  }

  /** needsMD5 says parts are pinned by Content-MD5, not CRC32C. */
  needsMD5() {
    return this.uploadId !== null && !this.checksum
  }

  usable(d) {
    return d && (d.md5 || !this.needsMD5()) ? d : null
  }

  /** digestNow is part n's digest if it is known already, or null. */
  digestNow(n) {
    const s = this.streamed === this.partSize && this.slots.get(n)
    return this.usable(s && s.value) || this.usable(this.extra.get(n))
  }

  /**
   * digestOf is part n's {crc32c, md5?} in the upload's layout, with its
   * MD5 when S3 checks Content-MD5: from the stream when it reads this
   * layout, else read on its own, once however many workers ask: each
   * worker used to read the parts it waited for itself, nine reads for
   * six parts (and the reads at once that hash-worker.js now runs in
   * turns).
   */
  async digestOf(n) {
    const now = this.digestNow(n)
    if (now) return now
    if (this.streamed === this.partSize) {
      const s = this.slot(n)
      // The stream's failure (an unreadable file) ends the wait as well.
      const d = await Promise.race([s.promise, this.hashed.then(() => s.promise)])
      if (this.usable(d)) return d
    }
    const md5 = this.needsMD5()
    const key = n + (md5 ? '+md5' : '')
    let job = this.digesting.get(key)
    if (!job) {
      const [a, b] = this.partRange(n)
      const layout = this.partSize
      job = this.client.hasher().part(this.file.slice(a, b), md5).then((d) => {
        if (this.partSize === layout) this.extra.set(n, d)
        return d
      }).finally(() => {
        if (this.digesting.get(key) === job) this.digesting.delete(key)
      })
      this.digesting.set(key, job)
    }
    return job
  }

  /**
   * intact says a part S3 lists is the local part: same size and same
   * CRC32C (or, for Content-MD5 uploads, an ETag that is its MD5). A PUT
   * cut off mid-way may have left a wrong part on some stores.
   */
  intact(n, d) {
    const p = this.listed.get(n)
    if (!p || !d) return false
    const [a, b] = this.partRange(n)
    if (p.size !== b - a) return false
    return this.checksum ? p.checksum_crc32c === d.crc32c : !!d.md5 && normalizeETag(p.etag) === hexOfBase64(d.md5)
  }

  /**
   * unsigned lists, in order, the parts still to send that have no URL
   * and none on its way: not sent yet, and not known to be in S3 intact.
   */
  unsigned() {
    return this.sending.filter((m) => !this.etags.has(m) && !this.urls.has(m) && !this.signing.has(m) && !this.intact(m, this.digestNow(m)))
  }

  /** sendMissing sends every part S3 does not hold intact, several at once, each once its digest is known. */
  async sendMissing(listed) {
    this.etags.clear()
    this.bytesDone = 0
    this.listed = new Map((listed || []).filter((p) => p.part_number <= this.partCount).map((p) => [p.part_number, p]))
    const todo = []
    for (let n = 1; n <= this.partCount; n++) {
      // Parts S3 holds that are known intact already (after a pause, a
      // retry) count at once, so the bar keeps what was sent.
      const p = this.listed.get(n)
      if (p && this.intact(n, this.digestNow(n))) {
        this.etags.set(n, p.etag)
        this.bytesDone += p.size
        continue
      }
      todo.push(n)
    }
    this.todo = todo
    this.sending = todo.slice()
    this.samples = []
    this.progress('uploading', true)
    this.stopper = new AbortController()
    const workers = []
    for (let i = 0; i < Math.min(this.concurrency, todo.length); i++) workers.push(this.worker())
    if (this.sha256) this.declare() // known already: after a pause, or before the upload was found
    this.failure = null
    const results = await Promise.allSettled(workers)
    this.stopper = null
    if (this.halted()) return
    const failed = results.find((r) => r.status === 'rejected')
    if (failed) throw this.failure || failed.reason
  }

  async worker() {
    while (this.todo.length && !this.halted()) {
      const n = this.todo.shift()
      try {
        const d = await this.digestOf(n)
        if (this.intact(n, d)) {
          const p = this.listed.get(n)
          this.etags.set(n, p.etag)
          this.bytesDone += p.size
          this.progress('uploading')
          continue
        }
        if (this.halted()) return
        await this.sendPart(n, d)
      } catch (err) {
        if (this.halted() || err instanceof Stopped) return
        // One part out of attempts fails the upload. The PUTs this stops
        // fail with 'aborted', which is not what went wrong: the first
        // failure is the upload's.
        if (!this.failure) this.failure = err
        this.stop()
        throw err
      }
    }
  }

  async sendPart(n, d) {
    await this.retrying(async () => {
      const u = await this.urlFor(n)
      if (this.halted()) throw new Stopped()
      const etag = await this.put(n, u)
      if (!this.checksum && normalizeETag(etag) !== hexOfBase64(d.md5)) {
        throw new FerryError(`part ${n}: S3 stored other bytes than were sent`, { retryable: true })
      }
      this.etags.set(n, etag)
      const [a, b] = this.partRange(n)
      this.bytesDone += b - a
      this.progress('uploading', true)
      this.emit('part', { partNumber: n, etag })
      // The part is not reported to ferry (PUT /uploads/{id}/parts/{n}):
      // S3's listing is what resume and complete go by, and the presign
      // calls keep the upload alive. A report per part was a request to
      // ferry for every 8 MiB sent, on the same cores as the upload.
    }, {
      onRetry: (err) => { if (err.status === 403) this.urls.delete(n) }, // expired or refused: sign again
    })
  }

  /**
   * urlFor returns a fresh presigned URL for part n, signing in the same
   * call the other unsigned parts whose digests are known, up to 32. A
   * call first waits until the next concurrency-1 of them are read: the
   * read is only just ahead of the PUTs, and signing only what was read
   * at that moment made a call for almost every part (18 to 27 per 32
   * parts in BenchmarkBrowserUpload). The PUT of part n loses little by
   * the wait, since the parts it waits for are the other workers' next.
   * With no PUT and no call under way (the upload's first call, or the
   * first after a pause) nothing would be sent meanwhile, so it signs what
   * is read at once.
   */
  async urlFor(n) {
    let waited = false
    for (;;) {
      const have = this.urls.get(n)
      if (have && have.expires - Date.now() > 60000) return have
      const pending = this.signing.get(n)
      if (pending) {
        await pending.catch(() => {})
        if (!this.urls.has(n)) break // that batch failed: sign on our own
        continue
      }
      if (waited || (this.inflight.size === 0 && this.signing.size === 0)) break
      waited = true
      const next = this.unsigned().filter((m) => m !== n).slice(0, this.concurrency - 1)
      await Promise.all(next.map((m) => this.digestOf(m)))
      // Meanwhile another worker may have signed part n with its batch.
    }
    const own = this.digestNow(n) || await this.digestOf(n)
    // From here to signing.set nothing awaits, so no other worker signs
    // these parts meanwhile.
    const known = this.unsigned().filter((m) => m !== n && this.digestNow(m))
    const batch = [n, ...known.slice(0, 31)]
    const body = { part_numbers: batch }
    const digests = [own, ...batch.slice(1).map((m) => this.digestNow(m))]
    const field = this.checksum ? 'checksum_crc32c' : 'content_md5'
    body[field] = Object.fromEntries(batch.map((m, i) => [m, this.checksum ? digests[i].crc32c : digests[i].md5]))
    const req = this.client.api('POST', `/uploads/${this.uploadId}/presign`, body)
    for (const m of batch) this.signing.set(m, req)
    try {
      const { urls } = await req
      for (const [k, v] of Object.entries(urls)) this.urls.set(Number(k), { ...v, expires: Date.parse(v.expires_at) })
    } finally {
      for (const m of batch) if (this.signing.get(m) === req) this.signing.delete(m)
    }
    return this.urls.get(n)
  }

  // put sends part n. A PUT that sends no byte for the client's
  // idleTimeout, or then waits that long for S3's answer, is aborted and
  // fails retryably, so it is sent again on a new connection: a connection
  // that died without a reset, or a store that stopped reading, would
  // otherwise hold the upload for a quarter of an hour (the kernel's
  // retransmissions) or for ever (a frozen server that still acknowledges).
  // Chromium reports upload progress every 50 ms while bytes move.
  put(n, u) {
    const [a, b] = this.partRange(n)
    const idle = this.client.idleTimeout
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest()
      const entry = { xhr, loaded: 0, stalled: false }
      this.inflight.set(n, entry)
      let timer = null
      const moved = () => {
        clearTimeout(timer)
        if (idle > 0) timer = setTimeout(() => { entry.stalled = true; xhr.abort() }, idle)
      }
      xhr.open(u.method || 'PUT', u.url)
      for (const [k, v] of Object.entries(u.headers || {})) xhr.setRequestHeader(k, v)
      xhr.upload.onprogress = (ev) => { moved(); entry.loaded = ev.loaded; this.progress('uploading') }
      xhr.upload.onload = moved // the body is sent: the answer's wait starts
      const done = (fn) => { clearTimeout(timer); this.inflight.delete(n); this.progress('uploading'); fn() }
      xhr.onload = () => done(() => {
        if (xhr.status >= 200 && xhr.status < 300) return resolve(xhr.getResponseHeader('ETag'))
        const code = (/<Code>([^<]+)<\/Code>/.exec(xhr.responseText || '') || [])[1] || ''
        const s = xhr.status
        reject(new FerryError(`part ${n}: S3 answered ${s} ${code}`.trim(), {
          status: s, code, retryable: s >= 500 || s === 403 || s === 408 || s === 429 || (s === 400 && badDigest.has(code)),
        }))
      })
      xhr.onerror = () => done(() => reject(new FerryError(`part ${n}: network error`, { retryable: true })))
      xhr.onabort = () => done(() => reject(entry.stalled
        ? new FerryError(`part ${n}: nothing moved for ${idle / 1000} s`, { retryable: true })
        : new FerryError(`part ${n}: aborted`, { retryable: false })))
      moved()
      xhr.send(this.file.slice(a, b))
    })
  }

  /**
   * complete asks ferry to complete the upload with the whole file's
   * CRC32C, which S3 checks, and its SHA-256; it returns the parts to send
   * again when S3 lacks some.
   */
  async complete() {
    this.setState('completing')
    await this.hashed
    if (this.declaring) await this.declaring
    if (this.halted()) return null
    const parts = [...this.etags].sort((x, y) => x[0] - y[0]).map(([n, etag]) => ({ part_number: n, etag }))
    const body = { parts }
    if (this.sha256) body.sha256 = this.sha256
    if (this.checksum) body.checksum_crc32c = this.crc32c
    try {
      await this.retrying(() => this.client.api('POST', `/uploads/${this.uploadId}/complete`, body))
      return null
    } catch (err) {
      if (err.code === 'sha256_mismatch') {
        this.startOver()
        return null
      }
      if (err.code !== 'parts_incomplete' || (this.completeRetries = (this.completeRetries || 0) + 1) > 3) throw err
      const again = new Set([...(err.problem.missing_parts || []), ...(err.problem.bad_parts || [])])
      return (await this.retrying(() => this.client.api('GET', '/uploads/' + this.uploadId))).parts.filter((p) => !again.has(p.part_number))
    }
  }

  /**
   * wait follows the completion until success or failure, each request
   * held open by ferry until the upload's state changes.
   */
  async wait() {
    this.setState('merging')
    for (;;) {
      this.checkStopped()
      const asked = performance.now()
      const st = await this.retrying(() => this.client.api('GET', `/uploads/${this.uploadId}?wait=${waitFor}`))
      if (st.state === 'success' || st.state === 'failed') return this.finish(st)
      if (st.state !== 'pending' && st.state !== 'merging') {
        throw new FerryError(`the upload was ${st.state} while it completed`, { code: 'upload_' + st.state })
      }
      // A ferry that does not hold the request open: poll instead.
      if (performance.now() - asked < 1000) await sleep(this.pollInterval)
    }
  }

  finish(st) {
    if (this.hashing) this.hashing.cancel()
    this.result = st
    this.bytesDone = this.file.size
    if (st.state === 'success') this.progress('uploading', true)
    this.setState(st.state)
    if (st.state === 'failed') {
      this.error = new FerryError(st.error || 'the upload failed verification', { code: 'upload_failed' })
    }
    return st
  }

  /**
   * progress emits bytes done (with the parts in flight), the rate over
   * the last seconds and the ETA: at most every 100 ms unless forced (a
   * part done, the start, the end), since several PUTs report their
   * progress far more often than a page can show it.
   */
  progress(phase, force = false) {
    const now = performance.now()
    if (!force && now - this.lastProgress < 100) return
    this.lastProgress = now
    const total = this.file.size
    let done = phase === 'uploading' ? this.bytesDone : this.bytesHashed
    if (phase === 'uploading') for (const { loaded } of this.inflight.values()) done += loaded
    this.samples.push([now, done])
    while (this.samples.length > 2 && now - this.samples[0][0] > 5000) this.samples.shift()
    const [t0, b0] = this.samples[0]
    const rate = now - t0 > 200 ? ((done - b0) * 1000) / (now - t0) : 0
    const eta = rate > 0 ? (total - done) / rate : null
    this.emit('progress', { phase, bytesDone: done, bytesTotal: total, rate, eta, bytesHashed: this.bytesHashed })
  }
}
