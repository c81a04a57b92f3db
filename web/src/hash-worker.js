// The hashing worker: one sequential read of a file that gives each part's
// CRC32C as soon as the part is read (so it can be signed and sent while
// the rest is read), and at the end the whole file's CRC32C and SHA-256.
// It runs off the page's main thread.
//
// SHA-256 is the slow hash (a few hundred MiB/s in WebAssembly, against
// GiB/s for CRC32C), and only complete needs it, so a second instance of
// this worker computes it: the reader hands it each chunk it has read and
// CRC'd (transferred, not copied) over a MessagePort, and the part PUTs
// wait only for the read and the CRC32C. The reader stays at most
// shaAhead chunks ahead of the SHA-256, so memory is bounded whatever the
// file's size. A file of up to 16 MiB is hashed whole by WebCrypto
// instead, where the page has it (see wholeLimit).
//
// Messages in:  {id, op: "file", file, partSize, md5, port, sha}  stream a
//                      whole file; port (optional) leads to a "sha"
//                      worker; sha: false computes no SHA-256 at all
//               {op: "sha", port}      be the SHA-256 side of a stream
//               {id, op: "warm"}       answer once the hashes are compiled
//               {id, op: "md5on"}      from the next part on, MD5s too
//               {id, op: "cancel"}     stop a "file" job
//               {id, op: "part", blob, md5}  one part: {crc32c, md5?}
//               {id, op: "sha256", blob}     one range, hex SHA-256
// Messages out: {id, part: {n, crc32c, md5?}}   a "file" job's part n
//               {id, progress: bytesHashed}
//               {id, result} or {id, error}
// Digests are base64 (as S3's headers take them) except SHA-256 (hex).

import { createCRC32, createMD5, createSHA256 } from 'hash-wasm'

const chunkSize = 8 << 20 // one part at the default layout; larger reads cost less per byte
const shaAhead = 2 // chunks handed to the SHA-256 worker and not yet hashed
const castagnoli = 0x82f63b78 // hash-wasm's CRC-32 with this polynomial is CRC32C

const jobs = new Map() // id of a running "file" job → its switches

// The hashes' WebAssembly is compiled as the worker starts (hash-wasm
// keeps each compiled module), not when the first file is read: a worker
// started ahead of the first upload (Ferry.warm) then has it ready.
const compiled = Promise.all([createCRC32(castagnoli), createMD5(), createSHA256()])
compiled.catch(() => {}) // a job that needs a hash meets the failure itself

// The "part" and "sha256" jobs run one at a time, beside the stream: each
// reads its own slice of the file, and with seven such reads at once (the
// SDK's part workers each reading the parts they waited for) headless
// Chromium 156 now and then never finished one of them, which left the
// upload waiting for good. In turns they cost no more: they share this
// thread.
let turns = Promise.resolve()

function inTurn(fn) {
  const run = turns.then(fn)
  turns = run.catch(() => {})
  return run
}

function base64(bytes) {
  let s = ''
  for (const b of bytes) s += String.fromCharCode(b)
  return btoa(s)
}

function crcBytes(v) {
  return new Uint8Array([v >>> 24, (v >>> 16) & 0xff, (v >>> 8) & 0xff, v & 0xff])
}

// multmodp and x2nmodp are zlib's CRC combination (crc32.c) for the
// Castagnoli polynomial: the whole file's CRC32C follows from its parts'
// CRCs and lengths, so the bytes go through one CRC, not two.
function multmodp(a, b) {
  let m = 1 << 31
  let p = 0
  for (;;) {
    if (a & m) {
      p ^= b
      if ((a & (m - 1)) === 0) break
    }
    m >>>= 1
    b = b & 1 ? (b >>> 1) ^ castagnoli : b >>> 1
  }
  return p >>> 0
}

const x2n = []
for (let k = 0, p = 1 << 30; k < 32; k++, p = multmodp(p, p)) x2n.push(p) // x^(2^k) mod P

// x2nmodp is x^(n·2^k) mod P; n may exceed 32 bits (parts go up to 5 GiB).
function x2nmodp(n, k) {
  let p = 1 << 31 // x^0
  for (; n > 0; n = Math.floor(n / 2), k++) if (n % 2) p = multmodp(x2n[k & 31], p)
  return p
}

function crc32cCombine(crc1, crc2, len2) {
  return (multmodp(x2nmodp(len2, 3), crc1) ^ crc2) >>> 0
}

function crcValue(digest) {
  return ((digest[0] << 24) | (digest[1] << 16) | (digest[2] << 8) | digest[3]) >>> 0
}

// chunks lists the [start, end) ranges to read: chunkSize at most, never
// across a part boundary. chunks(size, size) reads a blob as one part.
function chunks(size, partSize) {
  const out = []
  for (let start = 0; start < size; start += partSize) {
    const end = Math.min(start + partSize, size)
    for (let off = start; off < end; off += chunkSize) out.push([off, Math.min(off + chunkSize, end), start, end])
  }
  return out
}

// Inputs up to wholeLimit get their SHA-256 from WebCrypto, where the page
// has it (a secure context: HTTPS or localhost), over the whole input at
// once. Such a file is hashed before ferry is asked (the SDK's
// hashFirstLimit is the same 16 MiB), so its upload waits for the hash: a
// 4 MiB file's POST /uploads went 27–28 ms after start() with WebCrypto,
// 46–51 ms with hash-wasm, a 16 MiB one's 91–92 against 125–139
// (BenchmarkBrowserFirstUpload, headless Chromium 156, 2-core AMD EPYC).
// WebCrypto has no streaming digest, and larger inputs are not held whole.
const wholeLimit = 16 << 20

function subtle() {
  return self.crypto && self.crypto.subtle ? self.crypto.subtle : null
}

// wholeSHA256 is the hex SHA-256 of bufs (ArrayBuffers, in order, size
// bytes in all), by WebCrypto.
async function wholeSHA256(bufs, size) {
  let whole = bufs.length === 1 ? bufs[0] : null
  if (!whole) {
    const joined = new Uint8Array(size)
    let off = 0
    for (const b of bufs) {
      joined.set(new Uint8Array(b), off)
      off += b.byteLength
    }
    whole = joined.buffer
  }
  const d = new Uint8Array(await subtle().digest('SHA-256', whole))
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('')
}

// shaSide is where a stream's chunks go for the SHA-256: WebCrypto for a
// file of up to wholeLimit, else the worker at the other end of port,
// or, without one, this thread; nowhere when the stream computes none
// (its digest is then null).
async function shaSide(port, withSHA, size) {
  if (!withSHA) return { push: async () => {}, digest: async () => null, close() {} }
  if (size <= wholeLimit && subtle()) {
    if (port) {
      // Not needed (the SDK sends none where there is WebCrypto): the
      // other worker answers the empty input to a closed port.
      port.postMessage({ end: true })
      port.close()
    }
    const bufs = []
    return { push: async (buf) => { bufs.push(buf) }, digest: () => wholeSHA256(bufs, size), close() {} }
  }
  if (!port) {
    const sha = await createSHA256()
    sha.init()
    return { push: async (buf) => { sha.update(new Uint8Array(buf)) }, digest: async () => sha.digest('hex'), close() {} }
  }
  let outstanding = 0
  let wake = null
  let digested
  const digest = new Promise((resolve) => { digested = resolve })
  port.onmessage = (ev) => {
    if (ev.data.hashed) {
      outstanding--
      if (wake) wake()
    }
    if (ev.data.sha256) digested(ev.data.sha256)
  }
  return {
    async push(buf) {
      while (outstanding >= shaAhead) await new Promise((resolve) => { wake = resolve })
      wake = null
      outstanding++
      port.postMessage({ buf }, [buf])
    },
    digest() {
      port.postMessage({ end: true })
      return digest
    },
    close() {
      port.postMessage({ end: true })
      port.close()
    },
  }
}

// shaPort is the SHA-256 side of a stream: it hashes the chunks that come
// on port, acknowledging each, and answers the digest at the end.
async function shaPort(port) {
  const sha = await createSHA256()
  sha.init()
  port.onmessage = (ev) => {
    if (ev.data.buf) {
      sha.update(new Uint8Array(ev.data.buf))
      port.postMessage({ hashed: true })
    } else if (ev.data.end) {
      port.postMessage({ sha256: sha.digest('hex') })
      port.close()
    }
  }
}

// A read can stall for good: under load, headless Chromium 156 now and then
// never answered a Blob stream's read (seen in CI as an upload stuck at
// "Checking 8.0 MiB of 12 MiB" with nothing else reading). A read that
// brings no byte for stallMs is given up on, and the rest of the file is
// read by slices instead (see readChunks). A slice's arrayBuffer() cannot
// report progress, so it gets sliceMs, and sliceTries tries, before the
// job fails with an error the upload shows rather than waiting for ever.
// Giving up on a read that was only slow costs the bytes it had read.
const stallMs = 5000
const sliceMs = 30000
const sliceTries = 3

class Stalled extends Error {}

// within settles as p does, or rejects with Stalled after ms.
function within(p, ms) {
  let timer
  const stalled = new Promise((_, reject) => { timer = setTimeout(() => reject(new Stalled('stalled')), ms) })
  return Promise.race([p, stalled]).finally(() => clearTimeout(timer))
}

// readSlice is blob's bytes [start, end), read by a slice.
async function readSlice(blob, start, end) {
  for (let tries = 1; ; tries++) {
    try {
      return new Uint8Array(await within(blob.slice(start, end).arrayBuffer(), sliceMs))
    } catch (err) {
      if (!(err instanceof Stalled) || tries >= sliceTries) {
        throw err instanceof Stalled ? new Error(`reading the file stalled at byte ${start}`) : err
      }
    }
  }
}

// readChunks yields blob's bytes in order, one Uint8Array per [start, end)
// range of ranges (contiguous, from 0). Where Blob streams are byte
// streams (Chromium, Firefox) it reads with BYOB requests into buffers of
// its own, reused from chunk to chunk when reuse is set (the caller is done
// with a chunk when it asks for the next). It is the cheapest read a
// worker has: in headless Chromium 156, BenchmarkBrowserReads (e2e) read
// 256 MiB so in a median of 240 ms and 0.39 CPU s across the browser's
// processes, against 317 ms and 0.53 CPU s for the stream's own chunks,
// 455 ms and 0.69 for FileReaderSync of each 8 MiB slice, and 494 ms and
// 0.72 for slice().arrayBuffer() of each, which allocates and fills a new
// buffer through another trip to the browser process per chunk.
// Elsewhere, and from a stalled read on, it reads by slices, one chunk
// ahead.
async function* readChunks(blob, ranges, reuse) {
  let reader = null
  try {
    reader = blob.stream().getReader({ mode: 'byob' })
  } catch {
    // Blob streams are not byte streams in this browser.
  }
  let i = 0
  if (reader) {
    try {
      let buf = null
      for (; i < ranges.length; i++) {
        const [start, end] = ranges[i]
        const len = end - start
        if (!reuse || !buf || buf.byteLength < len) buf = new ArrayBuffer(len)
        // A read fills what the stream has at hand, and hands the buffer
        // back as a new object (the one it was given is detached).
        for (let got = 0; got < len;) {
          const { done, value } = await within(reader.read(new Uint8Array(buf, got, len - got)), stallMs)
          if (value) buf = value.buffer
          if (done) throw new Error('the file ended early: it changed while it was read')
          got += value.byteLength
        }
        yield new Uint8Array(buf, 0, len)
      }
      return
    } catch (err) {
      // The stalled read holds this range's buffer: the range is read
      // again, by a slice.
      if (!(err instanceof Stalled)) throw err
    } finally {
      reader.cancel().catch(() => {})
    }
  }
  const slice = (k) => {
    if (k >= ranges.length) return null
    const p = readSlice(blob, ranges[k][0], ranges[k][1])
    p.catch(() => {}) // awaited in its turn, unless the caller stops first
    return p
  }
  let next = slice(i)
  for (; i < ranges.length; i++) {
    const buf = await next
    next = slice(i + 1)
    yield buf
  }
}

// hashFile reads the file once, in order, giving each part's CRC32C as it
// is read; the SHA-256 (when asked) follows the read on the other worker.
async function hashFile(id, file, partSize, md5On, port, withSHA) {
  const job = { md5: md5On, cancelled: false }
  jobs.set(id, job)
  const sha = await shaSide(port, withSHA, file.size)
  try {
    const crc = await createCRC32(castagnoli)
    const md5 = await createMD5()
    let whole = 0
    let withMD5 = false
    const list = chunks(file.size, partSize)
    let done = 0
    let lastReport = 0
    let i = 0
    // Each chunk moves to the SHA-256's worker, so buffers are reused
    // only when there is none.
    for await (const buf of readChunks(file, list, !withSHA)) {
      if (job.cancelled) throw new Error('cancelled')
      const [off, end, partStart, partEnd] = list[i++]
      if (off === partStart) {
        crc.init()
        withMD5 = job.md5
        if (withMD5) md5.init()
      }
      crc.update(buf)
      if (withMD5) md5.update(buf)
      if (end === partEnd) {
        const d = crc.digest('binary')
        whole = partStart === 0 ? crcValue(d) : crc32cCombine(whole, crcValue(d), partEnd - partStart)
        const part = { n: partStart / partSize + 1, crc32c: base64(d) }
        if (withMD5) part.md5 = base64(md5.digest('binary'))
        postMessage({ id, part })
      }
      done += buf.length
      await sha.push(buf.buffer) // after the CRCs: the buffer moves to the other worker
      const now = Date.now()
      if (now - lastReport > 100) {
        lastReport = now
        postMessage({ id, progress: done })
      }
    }
    postMessage({ id, progress: done })
    return { sha256: await sha.digest(), crc32c: base64(crcBytes(file.size ? whole : 0)) }
  } catch (err) {
    sha.close()
    throw err
  } finally {
    jobs.delete(id)
  }
}

// sha256Blob is blob's hex SHA-256.
async function sha256Blob(blob) {
  const ranges = chunks(blob.size, blob.size)
  if (blob.size <= wholeLimit && subtle()) {
    const bufs = []
    for await (const buf of readChunks(blob, ranges, false)) bufs.push(buf.buffer)
    return wholeSHA256(bufs, blob.size)
  }
  const h = await createSHA256()
  h.init()
  for await (const buf of readChunks(blob, ranges, true)) h.update(buf)
  return h.digest('hex')
}

// hashPart digests one part on its own: for parts of another layout than
// the streamed one, or MD5s the stream passed before they were asked for.
async function hashPart(blob, withMD5) {
  const crc = await createCRC32(castagnoli)
  const md5 = await createMD5()
  crc.init()
  md5.init()
  for await (const buf of readChunks(blob, chunks(blob.size, blob.size), true)) {
    crc.update(buf)
    if (withMD5) md5.update(buf)
  }
  const out = { crc32c: base64(crc.digest('binary')) }
  if (withMD5) out.md5 = base64(md5.digest('binary'))
  return out
}

self.onmessage = async (ev) => {
  const { id, op } = ev.data
  if (op === 'sha') return shaPort(ev.data.port)
  if (op === 'md5on' || op === 'cancel') {
    const job = jobs.get(id)
    if (job && op === 'md5on') job.md5 = true
    if (job && op === 'cancel') job.cancelled = true
    return
  }
  try {
    let result
    if (op === 'warm') result = await compiled.then(() => true)
    else if (op === 'file') result = await hashFile(id, ev.data.file, ev.data.partSize, !!ev.data.md5, ev.data.port, ev.data.sha !== false)
    else if (op === 'part') result = await inTurn(() => hashPart(ev.data.blob, !!ev.data.md5))
    else if (op === 'sha256') result = await inTurn(() => sha256Blob(ev.data.blob))
    else throw new Error('unknown op ' + op)
    postMessage({ id, result })
  } catch (err) {
    postMessage({ id, error: String(err && err.message ? err.message : err) })
  }
}
