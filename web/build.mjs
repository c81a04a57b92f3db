// Builds dist/ from src/: the UI (app.js), the SDK for other pages
// (ferry.js) and the hashing worker (hash-worker.js), as ES modules; and
// copies Redoc's standalone bundle for the API reference page (/docs),
// which is already built and self-contained.
// The output is committed and embedded in the ferry binary; CI rebuilds it
// and fails if it differs from what is committed.
import { copyFile, readFile, writeFile } from 'node:fs/promises'
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

// Bundled license notices name each package by its page on the package
// registry's website; point them at the project's source instead, keeping
// the notice itself.
const sources = { 'hash-wasm': 'https://github.com/Daninet/hash-wasm' }
const registryPage = /https:\/\/www\.[a-z]+\.com\/package\/([a-z0-9@/._-]+)/g
for (const file of ['dist/app.js', 'dist/ferry.js', 'dist/hash-worker.js']) {
  const text = await readFile(file, 'utf8')
  await writeFile(file, text.replace(registryPage, (url, pkg) => sources[pkg] ?? url))
}

// The API reference page (static/docs.html) loads Redoc from ferry itself:
// no CDN, nothing fetched at run time but /openapi.json.
for (const file of ['redoc.standalone.js', 'redoc.standalone.js.LICENSE.txt']) {
  await copyFile(`node_modules/redoc/bundles/${file}`, `dist/${file}`)
}
