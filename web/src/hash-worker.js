// The hashing worker: SHA-256 of a whole file and MD5 of each of its parts
// in one streaming pass, off the page's main thread. Memory is one chunk
// at a time whatever the file's size.
//
// Messages in:  {id, op: "file", file, partSize}
//               {id, op: "md5", blob}          one part, base64 MD5
//               {id, op: "sha256", blob}       one range, hex SHA-256
// Messages out: {id, progress: bytesHashed}
//               {id, result} or {id, error}

import { createMD5, createSHA256 } from 'hash-wasm'

const chunkSize = 4 << 20

function base64(bytes) {
  let s = ''
  for (const b of bytes) s += String.fromCharCode(b)
  return btoa(s)
}

// chunks lists the [start, end) ranges to read: chunkSize at most, never
// across a part boundary.
function chunks(size, partSize) {
  const out = []
  for (let start = 0; start < size; start += partSize) {
    const end = Math.min(start + partSize, size)
    for (let off = start; off < end; off += chunkSize) out.push([off, Math.min(off + chunkSize, end), start])
  }
  return out
}

// Reading a File is an asynchronous trip to the browser process, as slow
// as hashing; the next chunk is always being read while one is hashed.
async function hashFile(id, file, partSize) {
  const sha = await createSHA256()
  const md5 = await createMD5()
  sha.init()
  const md5s = []
  const list = chunks(file.size, partSize)
  const read = (i) => (i < list.length ? file.slice(list[i][0], list[i][1]).arrayBuffer() : null)
  let next = read(0)
  let done = 0
  let lastReport = 0
  for (let i = 0; i < list.length; i++) {
    const buf = new Uint8Array(await next)
    next = read(i + 1)
    const [off, end, partStart] = list[i]
    if (off === partStart) md5.init()
    sha.update(buf)
    md5.update(buf)
    if (end === Math.min(partStart + partSize, file.size)) md5s.push(base64(md5.digest('binary')))
    done += buf.length
    const now = Date.now()
    if (now - lastReport > 100) {
      lastReport = now
      postMessage({ id, progress: done })
    }
  }
  postMessage({ id, progress: done })
  return { sha256: sha.digest('hex'), md5s }
}

async function hashBlob(blob, create, encoding) {
  const h = await create()
  h.init()
  for (let off = 0; off < blob.size; off += chunkSize) {
    h.update(new Uint8Array(await blob.slice(off, off + chunkSize).arrayBuffer()))
  }
  const d = h.digest(encoding)
  return encoding === 'binary' ? base64(d) : d
}

self.onmessage = async (ev) => {
  const { id, op } = ev.data
  try {
    let result
    if (op === 'file') result = await hashFile(id, ev.data.file, ev.data.partSize)
    else if (op === 'md5') result = await hashBlob(ev.data.blob, createMD5, 'binary')
    else if (op === 'sha256') result = await hashBlob(ev.data.blob, createSHA256, 'hex')
    else throw new Error('unknown op ' + op)
    postMessage({ id, result })
  } catch (err) {
    postMessage({ id, error: String(err && err.message ? err.message : err) })
  }
}
