// Builds dist/ from src/: the UI (app.js), the SDK for other pages
// (ferry.js) and the hashing worker (hash-worker.js), as ES modules.
// The output is committed and embedded in the ferry binary; CI rebuilds it
// and fails if it differs from what is committed.
import { readFile, writeFile } from 'node:fs/promises'
import { build } from 'esbuild'

await build({
  entryPoints: { app: 'src/app.js', ferry: 'src/ferry.js', 'hash-worker': 'src/hash-worker.js' },
  outdir: 'dist',
  bundle: true,
  format: 'esm',
  target: ['es2022'],
  minify: true,
  legalComments: 'eof',
  charset: 'utf8',
  logLevel: 'warning',
})

// Bundled license notices name each package by its registry page; point
// them at the project's source instead, keeping the notice itself.
const sources = { 'https://www.npmjs.com/package/hash-wasm': 'https://github.com/Daninet/hash-wasm' }
for (const file of ['dist/app.js', 'dist/ferry.js', 'dist/hash-worker.js']) {
  let text = await readFile(file, 'utf8')
  for (const [from, to] of Object.entries(sources)) text = text.replaceAll(from, to)
  await writeFile(file, text)
}
